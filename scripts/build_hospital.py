#!/usr/bin/env python3
"""Generate evalsets/hospital/ (package data: the wheel carries it as ragopt/shipped/evalsets): the knowledge base of a hospital data-asset assistant, and questions about it.

    python scripts/build_hospital.py              # rewrites evalsets/hospital/*.jsonl
    python scripts/build_hospital.py --out DIR    # writes the files into DIR instead

The world: two hospitals of one group share a data team's assistant. North Hospital runs the HelixLab
laboratory system and the CareLedger records system and stores lab results in SI units; South Hospital runs
LabSphere and MedArchive in conventional units. The same field, job or runbook exists in both with different
values, old dictionary versions linger as deprecated pages, and similar fields (LAB_GLU_FAST, LAB_GLU_RAND,
LAB_GLU_POC) sit side by side, so that retrieval has to be precise and tenant-aware.

Every document is rendered from the tables of facts below through small templates; each question points at
the exact character span that answers it, and the builder checks that the reference answer appears verbatim
in one of its spans and that the asker may see every evidence document. One fixed seed drives the few random
choices, so every run writes the same bytes (tests/data/test_shipped_evalset.py re-generates and compares).
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Iterator

SEED = 20240611
SHIPPED = Path(__file__).resolve().parents[1] / "evalsets" / "hospital"


# ---------------------------------------------------------------------------------------------------------
# The two hospitals
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tenant:
    id: str
    short: str
    name: str
    lab: str  # laboratory information system
    emr: str  # medical records system
    lab_dictionary: str  # the current field dictionary release of the lab system
    emr_dictionary: str
    warehouse: str
    scheduler: str
    trigger: str  # how to start a job by hand; {job} is the job name
    ticket: str  # ticket prefix
    oncall: str  # on-call chat channel
    dq_channel: str
    secrets: str  # secret store path prefix
    pager: str  # the out-of-hours data on-call
    status_page: str

    def table(self, area: str, name: str) -> str:
        """Where a job lands its data: north has one schema, south one schema per area."""
        return f"ndw.{name}" if self.short == "north" else f"sdw.{area}.{name}"


NORTH = Tenant(
    id="north-hospital",
    short="north",
    name="North Hospital",
    lab="HelixLab",
    emr="CareLedger",
    lab_dictionary="version 4",
    emr_dictionary="2024 edition",
    warehouse="North Data Warehouse (NDW)",
    scheduler="Airflow",
    trigger="airflow dags trigger {job}",
    ticket="NDATA",
    oncall="#north-data-oncall",
    dq_channel="#north-dq-alerts",
    secrets="secret/north/etl",
    pager="North Data On-Call (PagerDuty service P-NDATA)",
    status_page="status.north.local",
)
SOUTH = Tenant(
    id="south-hospital",
    short="south",
    name="South Hospital",
    lab="LabSphere",
    emr="MedArchive",
    lab_dictionary="release 11",
    emr_dictionary="release 7.2",
    warehouse="South Data Warehouse (SDW)",
    scheduler="Dagster",
    trigger="dagster job launch -j {job}",
    ticket="SDATA",
    oncall="#south-data-oncall",
    dq_channel="#south-dq-alerts",
    secrets="kv/south/etl",
    pager="South Data On-Call (Opsgenie team SDATA)",
    status_page="status.south.local",
)
TENANTS = (NORTH, SOUTH)


@dataclass(frozen=True)
class Asker:
    """Who asks: a tenant and the permission scopes that person holds."""

    tenant: Tenant
    scopes: tuple[str, ...]


def askers(t: Tenant) -> dict[str, Asker]:
    return {
        "clinical": Asker(t, ("clinical",)),
        "ops": Asker(t, ("ops",)),
        "finance": Asker(t, ("finance",)),
        "lead": Asker(t, ("clinical", "ops")),
    }


# ---------------------------------------------------------------------------------------------------------
# Teams (owners of jobs and runbooks) and the areas they own
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Team:
    name: str
    owns: str
    channel: str
    hours: str
    manager: str
    pager: str


TEAMS: dict[str, dict[str, Team]] = {
    "north": {
        "lab": Team("Clinical Data Engineering", "laboratory feeds from HelixLab", "#north-cde", "07:00-19:00 on weekdays", "Mara Lindqvist", "North Data On-Call (PagerDuty service P-NDATA)"),
        "emr": Team("Records Integration Team", "CareLedger extracts and ADT feeds", "#north-records-int", "07:30-17:30 on weekdays", "Tobias Brandt", "North Data On-Call (PagerDuty service P-NDATA)"),
        "billing": Team("Finance BI", "charge and claim data for the finance office", "#north-finance-bi", "08:00-17:00 on weekdays", "Ines Kovač", "no pager; the Finance BI duty phone 4471 during close"),
        "quality": Team("Data Quality Office", "range checks, referential checks and quarantine", "#north-dq", "08:00-16:00 on weekdays", "Jonas Feld", "North Data On-Call (PagerDuty service P-NDATA)"),
        "reference": Team("Warehouse Platform", "the warehouse, reference data and the scheduler", "#north-platform", "around the clock", "Priya Raman", "North Platform (PagerDuty service P-NPLAT)"),
        "registry": Team("Clinical Analytics", "registries, quality metrics and research snapshots", "#north-clin-analytics", "08:00-16:30 on weekdays", "Emeka Obi", "no pager; best effort next working day"),
    },
    "south": {
        "lab": Team("Lab Informatics", "LabSphere interfaces and lab data loads", "#south-lab-informatics", "06:30-18:30 every day", "Dana Whitfield", "South Data On-Call (Opsgenie team SDATA)"),
        "emr": Team("Integration Services", "MedArchive FHIR extracts and ADT feeds", "#south-integration", "08:00-18:00 on weekdays", "Luis Ortega", "South Data On-Call (Opsgenie team SDATA)"),
        "billing": Team("Revenue Cycle Analytics", "charges, claims and denials reporting", "#south-rca", "08:00-17:00 on weekdays", "Grace Mensah", "no pager; the revenue cycle desk, extension 2290"),
        "quality": Team("Data Stewardship", "data quality rules and quarantine releases", "#south-stewardship", "08:00-16:00 on weekdays", "Sam Okafor", "South Data On-Call (Opsgenie team SDATA)"),
        "reference": Team("Platform Operations", "the warehouse, reference data and the scheduler", "#south-platform", "around the clock", "Helen Zhou", "South Platform (Opsgenie team SPLAT)"),
        "registry": Team("Outcomes Research Unit", "registries, quality metrics and research snapshots", "#south-outcomes", "09:00-17:00 on weekdays", "Ravi Patel", "no pager; best effort next working day"),
    },
}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# Field dictionaries
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One hospital's definition of a field. An empty unit marks a code, identifier or timestamp field."""

    unit: str
    valid: str  # valid range (numeric fields) or valid values (the others)
    dtype: str
    table: str
    meaning: str = ""  # overrides the shared meaning where the hospitals differ
    note: str = ""


@dataclass(frozen=True)
class Field:
    name: str
    system: str  # "lab", "emr" or "billing"
    meaning: str
    north: Spec
    south: Spec

    def spec(self, t: Tenant) -> Spec:
        return self.north if t is NORTH else self.south


def lab(name: str, meaning: str, north: Spec, south: Spec) -> Field:
    return Field(name, "lab", meaning, north, south)


def emr(name: str, meaning: str, north: Spec, south: Spec) -> Field:
    return Field(name, "emr", meaning, north, south)


def billing(name: str, meaning: str, north: Spec, south: Spec) -> Field:
    return Field(name, "billing", meaning, north, south)


GLUCOSE_NOTE = ("Not to be confused with {others}; the three glucose fields share a unit but feed different "
                "registries.")
FIELDS = [
    lab("LAB_GLU_FAST", "Fasting plasma glucose: venous plasma glucose drawn after at least 8 hours without caloric intake.",
        Spec("mmol/L", "1.0 to 40.0 mmol/L", "DECIMAL(5,1)", "LAB_RESULT_CHEM", note=GLUCOSE_NOTE.format(others="LAB_GLU_RAND (random glucose) or LAB_GLU_POC (capillary point-of-care glucose)")),
        Spec("mg/dL", "18 to 720 mg/dL", "INTEGER", "LAB_RESULT_CHEM", note=GLUCOSE_NOTE.format(others="LAB_GLU_RAND (random glucose) or LAB_GLU_POC (glucometer glucose)"))),
    lab("LAB_GLU_RAND", "Random plasma glucose: venous plasma glucose drawn without regard to the time of the last meal.",
        Spec("mmol/L", "1.0 to 50.0 mmol/L", "DECIMAL(5,1)", "LAB_RESULT_CHEM", note="The diabetes registry ignores this field for diagnosis; only LAB_GLU_FAST and LAB_HBA1C count."),
        Spec("mg/dL", "18 to 900 mg/dL", "INTEGER", "LAB_RESULT_CHEM", note="The diabetes registry ignores this field for diagnosis; only LAB_GLU_FAST and LAB_HBA1C count.")),
    lab("LAB_GLU_POC", "Capillary blood glucose measured on the ward with a point-of-care glucometer.",
        Spec("mmol/L", "0.6 to 33.3 mmol/L", "DECIMAL(4,1)", "LAB_RESULT_POC", note="Glucometers report HI above 33.3 and LO below 0.6; these arrive as text in LAB_RESULT_TXT with an empty numeric value."),
        Spec("mg/dL", "10 to 600 mg/dL", "INTEGER", "POC_RESULT", note="Glucometers report >600 and <10 as text; the loader clamps them to the limit and sets LAB_ABN_FLAG to CRIT_HIGH or CRIT_LOW.")),
    lab("LAB_HBA1C", "Glycated hemoglobin (HbA1c), reflecting the average blood glucose of the previous two to three months.",
        Spec("mmol/mol", "20 to 195 mmol/mol", "INTEGER", "LAB_RESULT_CHEM", meaning="Glycated hemoglobin (HbA1c) in IFCC units, reflecting the average blood glucose of the previous two to three months."),
        Spec("%", "4.0 to 20.0 %", "DECIMAL(3,1)", "LAB_RESULT_CHEM", meaning="Glycated hemoglobin (HbA1c) as an NGSP percentage, reflecting the average blood glucose of the previous two to three months.")),
    lab("LAB_CREAT", "Serum creatinine, enzymatic method.",
        Spec("µmol/L", "10 to 2000 µmol/L", "INTEGER", "LAB_RESULT_CHEM"),
        Spec("mg/dL", "0.10 to 22.60 mg/dL", "DECIMAL(5,2)", "LAB_RESULT_CHEM")),
    lab("LAB_EGFR", "Estimated glomerular filtration rate, calculated by the laboratory system from LAB_CREAT with the CKD-EPI 2021 equation.",
        Spec("mL/min/1.73 m²", "0 to 200 mL/min/1.73 m²", "INTEGER", "LAB_RESULT_CHEM", note="Values above 90 are reported as >90 and stored as 90 with LAB_ABN_FLAG A."),
        Spec("mL/min/1.73 m²", "0 to 200 mL/min/1.73 m²", "INTEGER", "LAB_RESULT_CHEM", note="Values above 60 are reported as >60 and stored as 60 with LAB_ABN_FLAG ABN.")),
    lab("LAB_UREA", "Serum urea.",
        Spec("mmol/L", "0.5 to 70.0 mmol/L", "DECIMAL(4,1)", "LAB_RESULT_CHEM"),
        Spec("mg/dL", "1 to 200 mg/dL", "INTEGER", "LAB_RESULT_CHEM", meaning="Blood urea nitrogen (BUN); the field kept its historical name LAB_UREA although it holds urea nitrogen, not urea.")),
    lab("LAB_K", "Serum potassium.",
        Spec("mmol/L", "1.5 to 10.0 mmol/L", "DECIMAL(3,1)", "LAB_RESULT_CHEM", note="Results from hemolysed specimens carry LAB_ABN_FLAG A and must be excluded from hyperkalemia cohorts."),
        Spec("mEq/L", "1.5 to 10.0 mEq/L", "DECIMAL(3,1)", "LAB_RESULT_CHEM", note="For potassium, mEq/L and mmol/L are numerically identical. Hemolysed specimens carry LAB_ABN_FLAG ABN.")),
    lab("LAB_NA", "Serum sodium.",
        Spec("mmol/L", "100 to 180 mmol/L", "INTEGER", "LAB_RESULT_CHEM"),
        Spec("mEq/L", "100 to 180 mEq/L", "INTEGER", "LAB_RESULT_CHEM")),
    lab("LAB_HGB", "Hemoglobin concentration in whole blood.",
        Spec("g/L", "30 to 250 g/L", "INTEGER", "LAB_RESULT_HEME"),
        Spec("g/dL", "3.0 to 25.0 g/dL", "DECIMAL(3,1)", "LAB_RESULT_HEME")),
    lab("LAB_WBC", "White blood cell (leukocyte) count.",
        Spec("10^9/L", "0.1 to 500.0 x 10^9/L", "DECIMAL(5,1)", "LAB_RESULT_HEME"),
        Spec("10^3/µL", "0.1 to 500.0 x 10^3/µL", "DECIMAL(5,1)", "LAB_RESULT_HEME")),
    lab("LAB_PLT", "Platelet count.",
        Spec("10^9/L", "1 to 2000 x 10^9/L", "INTEGER", "LAB_RESULT_HEME"),
        Spec("10^3/µL", "1 to 2000 x 10^3/µL", "INTEGER", "LAB_RESULT_HEME")),
    lab("LAB_HCT", "Hematocrit, the volume fraction of red cells in whole blood.",
        Spec("L/L", "0.10 to 0.75 L/L", "DECIMAL(3,2)", "LAB_RESULT_HEME"),
        Spec("%", "10 to 75 %", "DECIMAL(3,1)", "LAB_RESULT_HEME")),
    lab("LAB_CRP", "C-reactive protein, standard (not high-sensitivity) assay.",
        Spec("mg/L", "0.3 to 500 mg/L", "DECIMAL(5,1)", "LAB_RESULT_CHEM", note="Results below the detection limit arrive as <0.3 and are stored as 0.3 with LAB_RESULT_CMP set to <."),
        Spec("mg/dL", "0.03 to 50.0 mg/dL", "DECIMAL(5,2)", "LAB_RESULT_CHEM")),
    lab("LAB_TROP_HS", "High-sensitivity cardiac troponin.",
        Spec("ng/L", "3 to 100000 ng/L", "INTEGER", "LAB_RESULT_CHEM", meaning="High-sensitivity cardiac troponin T (hs-cTnT).", note="The 99th percentile upper reference limit is 14 ng/L. Troponin T and troponin I cut-offs are not interchangeable."),
        Spec("ng/L", "2 to 50000 ng/L", "INTEGER", "LAB_RESULT_CARD", meaning="High-sensitivity cardiac troponin I (hs-cTnI).", note="The sex-neutral 99th percentile upper reference limit is 26 ng/L. Troponin I and troponin T cut-offs are not interchangeable.")),
    lab("LAB_LACT", "Lactate.",
        Spec("mmol/L", "0.1 to 30.0 mmol/L", "DECIMAL(3,1)", "LAB_RESULT_BG", meaning="Lactate from the blood gas analysers (arterial or venous)."),
        Spec("mg/dL", "1 to 270 mg/dL", "INTEGER", "LAB_RESULT_CHEM", meaning="Plasma lactate from the core laboratory analysers.")),
    lab("LAB_INR", "International normalised ratio of the prothrombin time.",
        Spec("ratio (no unit)", "0.5 to 20.0", "DECIMAL(3,1)", "LAB_RESULT_COAG"),
        Spec("ratio (no unit)", "0.5 to 20.0", "DECIMAL(3,1)", "LAB_RESULT_COAG")),
    lab("LAB_APTT", "Activated partial thromboplastin time.",
        Spec("s", "10 to 200 s", "DECIMAL(4,1)", "LAB_RESULT_COAG"),
        Spec("s", "10 to 200 s", "DECIMAL(4,1)", "LAB_RESULT_COAG", note="The analyser sends 9999 when the clot was not detected; the loader stores an empty value.")),
    lab("LAB_DDIMER", "D-dimer in fibrinogen-equivalent units (FEU).",
        Spec("mg/L FEU", "0.10 to 80.00 mg/L FEU", "DECIMAL(4,2)", "LAB_RESULT_COAG"),
        Spec("ng/mL FEU", "100 to 80000 ng/mL FEU", "INTEGER", "LAB_RESULT_COAG")),
    lab("LAB_ALT", "Alanine aminotransferase activity.",
        Spec("U/L", "1 to 10000 U/L", "INTEGER", "LAB_RESULT_CHEM"),
        Spec("U/L", "1 to 10000 U/L", "INTEGER", "LAB_RESULT_CHEM")),
    lab("LAB_BILI_TOT", "Total bilirubin.",
        Spec("µmol/L", "1 to 850 µmol/L", "INTEGER", "LAB_RESULT_CHEM"),
        Spec("mg/dL", "0.1 to 50.0 mg/dL", "DECIMAL(3,1)", "LAB_RESULT_CHEM")),
    lab("LAB_ALB", "Serum albumin.",
        Spec("g/L", "5 to 70 g/L", "INTEGER", "LAB_RESULT_CHEM"),
        Spec("g/dL", "0.5 to 7.0 g/dL", "DECIMAL(2,1)", "LAB_RESULT_CHEM")),
    lab("LAB_TSH", "Thyroid-stimulating hormone.",
        Spec("mIU/L", "0.005 to 150 mIU/L", "DECIMAL(7,3)", "LAB_RESULT_CHEM"),
        Spec("µIU/mL", "0.005 to 150 µIU/mL", "DECIMAL(7,3)", "LAB_RESULT_CHEM")),
    lab("LAB_LDL_CALC", "LDL cholesterol calculated with the Friedewald equation.",
        Spec("mmol/L", "0.1 to 15.0 mmol/L", "DECIMAL(3,1)", "LAB_RESULT_CHEM", note="Not reported when triglycerides exceed 4.5 mmol/L."),
        Spec("mg/dL", "4 to 580 mg/dL", "INTEGER", "LAB_RESULT_CHEM", note="Not reported when triglycerides exceed 400 mg/dL.")),
    lab("LAB_NTPROBNP", "N-terminal pro B-type natriuretic peptide.",
        Spec("ng/L", "5 to 70000 ng/L", "INTEGER", "LAB_RESULT_CHEM"),
        Spec("pg/mL", "5 to 70000 pg/mL", "INTEGER", "LAB_RESULT_CARD")),
    lab("LAB_MG", "Serum magnesium.",
        Spec("mmol/L", "0.10 to 5.00 mmol/L", "DECIMAL(3,2)", "LAB_RESULT_CHEM"),
        Spec("mg/dL", "0.2 to 12.0 mg/dL", "DECIMAL(3,1)", "LAB_RESULT_CHEM")),
    lab("LAB_PCT", "Procalcitonin.",
        Spec("µg/L", "0.02 to 1000 µg/L", "DECIMAL(6,2)", "LAB_RESULT_CHEM"),
        Spec("ng/mL", "0.02 to 1000 ng/mL", "DECIMAL(6,2)", "LAB_RESULT_CHEM")),
    lab("LAB_SPEC_ID", "Specimen (tube) barcode printed at collection.",
        Spec("", "H followed by 10 digits, for example H0012345678", "CHAR(11)", "LAB_SPECIMEN"),
        Spec("", "LS-, the year, a hyphen and 8 digits, for example LS-2024-00123456", "VARCHAR(16)", "LAB_SPECIMEN")),
    lab("LAB_COLLECT_TS", "When the specimen was drawn.",
        Spec("", "local wall-clock time without an offset; not before 2009-03-02 (HelixLab go-live) and not in the future", "TIMESTAMP", "LAB_SPECIMEN"),
        Spec("", "UTC, ISO 8601 with a trailing Z; not before 2014-06-30 (LabSphere go-live) and not in the future", "DATETIME2", "LAB_SPECIMEN")),
    lab("LAB_RESULT_STATUS", "Status of the result.",
        Spec("", "P (preliminary), F (final), C (corrected), X (cancelled)", "CHAR(1)", "LAB_RESULT_HDR"),
        Spec("", "PRELIM, FINAL, CORRECTED, CANCELLED", "VARCHAR(10)", "LAB_RESULT_HDR")),
    lab("LAB_ABN_FLAG", "Abnormality flag set by the laboratory system against the reference interval.",
        Spec("", "N, L, H, LL (critical low), HH (critical high), A (abnormal, non-numeric)", "VARCHAR(2)", "LAB_RESULT_HDR"),
        Spec("", "NORMAL, LOW, HIGH, CRIT_LOW, CRIT_HIGH, ABN", "VARCHAR(9)", "LAB_RESULT_HDR")),
    emr("PAT_MRN", "Medical record number, the hospital-wide patient identifier.",
        Spec("", "9 digits, zero-padded, for example 004512398", "CHAR(9)", "PAT_DEMOGRAPHIC"),
        Spec("", "SH followed by 7 digits, for example SH0457812", "VARCHAR(9)", "PAT_DEMOGRAPHIC")),
    emr("PAT_BIRTH_DT", "Date of birth.",
        Spec("", "1900-01-01 up to today", "DATE", "PAT_DEMOGRAPHIC"),
        Spec("", "1900-01-01 up to today", "DATE", "PAT_DEMOGRAPHIC")),
    emr("PAT_SEX_CD", "Administrative sex.",
        Spec("", "F (female), M (male), X (diverse), U (unknown)", "CHAR(1)", "PAT_DEMOGRAPHIC"),
        Spec("", "1 (male), 2 (female), 3 (other), 9 (unknown)", "TINYINT", "PAT_DEMOGRAPHIC")),
    emr("ENC_TYPE_CD", "Type of encounter.",
        Spec("", "IP (inpatient), OP (outpatient), ED (emergency), DS (day surgery)", "VARCHAR(2)", "ENC_ENCOUNTER"),
        Spec("", "I (inpatient), O (outpatient), E (emergency), D (day surgery), B (observation bed)", "CHAR(1)", "ENC_ENCOUNTER")),
    emr("ENC_ADMIT_TS", "Admission time of the encounter.",
        Spec("", "local wall-clock time without an offset", "TIMESTAMP", "ENC_ENCOUNTER"),
        Spec("", "UTC, ISO 8601 with a trailing Z", "DATETIME2", "ENC_ENCOUNTER")),
    emr("ENC_LOS_DAYS", "Length of stay.",
        Spec("days", "0.00 to 3650.00 days", "DECIMAL(6,2)", "ENC_ENCOUNTER", meaning="Length of stay in fractional days, from ENC_ADMIT_TS to the discharge time."),
        Spec("days", "0 to 3650 days", "INTEGER", "ENC_ENCOUNTER", meaning="Length of stay as the number of midnights spent in the hospital (census days).")),
    emr("DIAG_CD", "Diagnosis code.",
        Spec("", "an ICD-10-GM code with the dot, for example E11.9", "VARCHAR(8)", "DIAG_CODED"),
        Spec("", "an ICD-10-CM code without the dot, for example E119", "VARCHAR(7)", "DIAG_CODED")),
    emr("DIAG_SEQ", "Position of the diagnosis within the encounter's coded diagnoses.",
        Spec("", "1 = principal diagnosis, 2 and up = secondary diagnoses", "SMALLINT", "DIAG_CODED"),
        Spec("", "0 = principal diagnosis, 1 and up = secondary diagnoses", "SMALLINT", "DIAG_CODED")),
    emr("VITAL_TEMP", "Body temperature.",
        Spec("°C", "25.0 to 45.0 °C", "DECIMAL(3,1)", "VITAL_SIGN"),
        Spec("°F", "77.0 to 113.0 °F", "DECIMAL(4,1)", "VITAL_SIGN")),
    emr("VITAL_WEIGHT", "Body weight.",
        Spec("kg", "0.3 to 350.0 kg", "DECIMAL(4,1)", "VITAL_SIGN"),
        Spec("lb", "0.7 to 770.0 lb", "DECIMAL(4,1)", "VITAL_SIGN")),
    emr("VITAL_HEIGHT", "Body height.",
        Spec("cm", "20 to 250 cm", "INTEGER", "VITAL_SIGN"),
        Spec("in", "8.0 to 98.0 in", "DECIMAL(3,1)", "VITAL_SIGN")),
    emr("VITAL_SBP", "Systolic blood pressure.",
        Spec("mmHg", "40 to 300 mmHg", "SMALLINT", "VITAL_SIGN"),
        Spec("mmHg", "40 to 300 mmHg", "SMALLINT", "VITAL_SIGN")),
    emr("VITAL_HR", "Heart rate.",
        Spec("beats/min", "20 to 300 beats/min", "SMALLINT", "VITAL_SIGN"),
        Spec("beats/min", "20 to 300 beats/min", "SMALLINT", "VITAL_SIGN")),
    emr("VITAL_SPO2", "Peripheral oxygen saturation.",
        Spec("%", "50 to 100 %", "SMALLINT", "VITAL_SIGN"),
        Spec("%", "50 to 100 %", "SMALLINT", "VITAL_SIGN")),
    emr("MED_DOSE_QTY", "Administered dose of a medication, in the unit given in MED_DOSE_UNIT.",
        Spec("per MED_DOSE_UNIT", "greater than 0 and at most 100000", "DECIMAL(10,3)", "MED_ADMIN"),
        Spec("per MED_DOSE_UNIT", "greater than 0 and at most 100000", "DECIMAL(10,3)", "MED_ADMIN")),
    emr("MED_ROUTE_CD", "Route of administration.",
        Spec("", "PO, IV, IM, SC, INH, TOP, PR", "VARCHAR(3)", "MED_ADMIN"),
        Spec("", "1 (oral), 2 (intravenous), 3 (intramuscular), 4 (subcutaneous), 5 (inhaled), 6 (topical)", "TINYINT", "MED_ADMIN")),
    emr("DISCH_DISP_CD", "Discharge disposition.",
        Spec("", "01 (home), 02 (other hospital), 03 (rehabilitation), 07 (died), 09 (other)", "CHAR(2)", "ENC_ENCOUNTER"),
        Spec("", "HOME, SNF, REHAB, TRANSFER, EXPIRED, AMA (left against medical advice)", "VARCHAR(8)", "ENC_ENCOUNTER")),
    billing("BILL_DRG_CD", "Diagnosis-related group assigned to the closed inpatient case.",
        Spec("", "a 4-character G-DRG code, for example F62C", "CHAR(4)", "BILL_CLAIM"),
        Spec("", "a 3-digit MS-DRG code, for example 291", "CHAR(3)", "BILL_CLAIM")),
    billing("BILL_CHARGE_AMT", "Charged amount of one charge line.",
        Spec("euro cents", "0 to 100000000 euro cents", "BIGINT", "BILL_CHARGE", note="Stored in whole cents; divide by 100 for reporting."),
        Spec("US dollars", "0.00 to 1000000.00 US dollars", "DECIMAL(12,2)", "BILL_CHARGE", note="Stored in dollars with two decimals.")),
    billing("BILL_CLAIM_STATUS", "Status of the claim.",
        Spec("", "D (draft), S (submitted), P (paid), R (rejected), A (appealed)", "CHAR(1)", "BILL_CLAIM"),
        Spec("", "0 (open), 1 (billed), 2 (paid), 3 (denied), 4 (written off)", "TINYINT", "BILL_CLAIM")),
    billing("BILL_PAYER_ID", "Identifier of the paying insurer.",
        Spec("", "a payer code from the CareLedger payer master, P followed by 5 digits", "CHAR(6)", "BILL_CLAIM"),
        Spec("", "a payer code from the MedArchive payer table, 4 to 6 upper-case letters", "VARCHAR(6)", "BILL_CLAIM")),
]  # fmt: skip
FIELD = {f.name: f for f in FIELDS}
SYSTEM_SCOPES = {"lab": ("clinical", "ops"), "emr": ("clinical", "ops"), "billing": ("finance",)}


@dataclass(frozen=True)
class Superseded:
    """A field definition from an older dictionary release, kept online as a deprecated page."""

    field: str
    tenant: Tenant
    unit: str
    valid: str
    dtype: str
    factor: str  # how to convert an old value to the current unit


SUPERSEDED = [
    Superseded("LAB_GLU_FAST", NORTH, "mg/dL", "18 to 720 mg/dL", "INTEGER", "divide by 18.0"),
    Superseded("LAB_GLU_RAND", NORTH, "mg/dL", "18 to 900 mg/dL", "INTEGER", "divide by 18.0"),
    Superseded("LAB_CREAT", NORTH, "mg/dL", "0.10 to 22.60 mg/dL", "DECIMAL(5,2)", "multiply by 88.4"),
    Superseded("LAB_HBA1C", NORTH, "%", "4.0 to 20.0 %", "DECIMAL(3,1)", "subtract 2.15, then multiply by 10.929"),
    Superseded("LAB_HGB", NORTH, "g/dL", "3.0 to 25.0 g/dL", "DECIMAL(3,1)", "multiply by 10"),
    Superseded("LAB_BILI_TOT", NORTH, "mg/dL", "0.1 to 50.0 mg/dL", "DECIMAL(3,1)", "multiply by 17.1"),
    Superseded("LAB_CRP", SOUTH, "mg/L", "0.3 to 500 mg/L", "DECIMAL(5,1)", "divide by 10"),
    Superseded("LAB_DDIMER", SOUTH, "µg/mL FEU", "0.10 to 80.00 µg/mL FEU", "DECIMAL(4,2)", "multiply by 1000"),
    Superseded("LAB_LACT", SOUTH, "mmol/L", "0.1 to 30.0 mmol/L", "DECIMAL(3,1)", "multiply by 9.01"),
    Superseded("LAB_HCT", SOUTH, "L/L", "0.10 to 0.75 L/L", "DECIMAL(3,2)", "multiply by 100"),
]
OLD_RELEASE = {"north": ("version 3", "2023-03-06", "v3"), "south": ("release 10.4", "2024-02-19", "r10.4")}

TABLES = {  # source table -> what a row is, its key, and roughly how many rows arrive per day in (north, south)
    "LAB_RESULT_CHEM": ("one clinical chemistry result", "RESULT_ID", (41000, 28000)),
    "LAB_RESULT_HEME": ("one hematology result", "RESULT_ID", (23000, 16500)),
    "LAB_RESULT_COAG": ("one coagulation result", "RESULT_ID", (5200, 3900)),
    "LAB_RESULT_POC": ("one point-of-care result from a ward device", "POC_RESULT_ID", (9800, 0)),
    "POC_RESULT": ("one point-of-care result from a ward device", "POC_ID", (0, 7400)),
    "LAB_RESULT_BG": ("one blood gas analyser result", "RESULT_ID", (6100, 0)),
    "LAB_RESULT_CARD": ("one cardiac marker result", "RESULT_ID", (0, 2100)),
    "LAB_RESULT_HDR": ("the header shared by all results of one order: status and flags", "ORDER_ID, TEST_CD", (52000, 37000)),
    "LAB_SPECIMEN": ("one collected specimen (tube)", "LAB_SPEC_ID", (14500, 10200)),
    "PAT_DEMOGRAPHIC": ("one patient, current demographics", "PAT_MRN", (900, 650)),
    "ENC_ENCOUNTER": ("one encounter (admission, visit or emergency attendance)", "ENC_ID", (3100, 2400)),
    "DIAG_CODED": ("one coded diagnosis of an encounter", "ENC_ID, DIAG_SEQ", (7800, 6100)),
    "VITAL_SIGN": ("one charted vital sign observation", "OBS_ID", (96000, 71000)),
    "MED_ADMIN": ("one medication administration", "ADMIN_ID", (38000, 29500)),
    "BILL_CLAIM": ("one claim submitted to a payer", "CLAIM_ID", (1400, 1150)),
    "BILL_CHARGE": ("one charge line", "CHARGE_ID", (22000, 17800)),
}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# Data-collection jobs
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    name: str
    area: str  # a key of TEAMS: who owns it; also the south warehouse schema
    purpose: str
    target: str  # warehouse table name
    tables: tuple[str, ...]  # source tables it loads
    north: tuple[str, str] | None  # (cron, in words), or None where the hospital has no such job
    south: tuple[str, str] | None

    def schedule(self, t: Tenant) -> tuple[str, str] | None:
        return self.north if t is NORTH else self.south


SERVICE_LEVELS = {  # (hospital, area) -> what a job of that area promises its users
    ("north", "lab"): "results are in the warehouse within 30 minutes of their verification",
    ("north", "emr"): "the previous day is complete by 06:30",
    ("north", "billing"): "the data is complete by 07:00 on the next working day",
    ("north", "quality"): "checks finish within 20 minutes of the loads they check",
    ("north", "registry"): "the output is ready by 10:00 on the day it runs",
    ("north", "reference"): "the code sets are current before the first load that needs them",
    ("south", "lab"): "results are in the warehouse within 75 minutes of their verification",
    ("south", "emr"): "the previous day is complete by 06:00",
    ("south", "billing"): "the data is complete by 08:00 on the next working day",
    ("south", "quality"): "checks finish within 30 minutes of the loads they check",
    ("south", "registry"): "the output is ready by 12:00 on the day it runs",
    ("south", "reference"): "the code sets are current before the first load that needs them",
}
SOURCES = {  # (hospital, area) -> where a job of that area reads from
    ("north", "lab"): "the HelixLab reporting replica HLXRPT (Oracle 19c)",
    ("north", "emr"): "the CareLedger nightly export files on sftp-n.north.local:/drop/careledger",
    ("north", "billing"): "the CareLedger billing schema CLBILL through the reporting replica",
    ("north", "quality"): "the warehouse itself (ndw schemas)",
    ("north", "registry"): "the warehouse itself (ndw schemas)",
    ("north", "reference"): "the group terminology server tx.group.local",
    ("south", "lab"): "the LabSphere export database LSEXP (Oracle 19c)",
    ("south", "emr"): "the MedArchive FHIR R4 API at fhir.south.local",
    ("south", "billing"): "the MedArchive billing API and the monthly ledger files",
    ("south", "quality"): "the warehouse itself (sdw schemas)",
    ("south", "registry"): "the warehouse itself (sdw schemas)",
    ("south", "reference"): "the group terminology server tx.group.local",
}

JOBS = [
    Job("lab_chem_ingest", "lab", "Loads clinical chemistry results and result headers.", "lab_result_chem", ("LAB_RESULT_CHEM", "LAB_RESULT_HDR"),
        ("*/15 * * * *", "every 15 minutes"), ("5 * * * *", "hourly at 5 minutes past the hour")),
    Job("lab_heme_ingest", "lab", "Loads hematology results (blood counts).", "lab_result_heme", ("LAB_RESULT_HEME",),
        ("*/15 * * * *", "every 15 minutes"), ("10 * * * *", "hourly at 10 minutes past the hour")),
    Job("lab_coag_ingest", "lab", "Loads coagulation results.", "lab_result_coag", ("LAB_RESULT_COAG",),
        ("*/30 * * * *", "every 30 minutes"), ("15 * * * *", "hourly at 15 minutes past the hour")),
    Job("lab_cardiac_ingest", "lab", "Loads cardiac marker results (troponin, NT-proBNP).", "lab_result_card", ("LAB_RESULT_CARD",),
        None, ("*/20 * * * *", "every 20 minutes")),
    Job("blood_gas_ingest", "lab", "Loads blood gas analyser results, including lactate.", "lab_result_bg", ("LAB_RESULT_BG",),
        ("*/10 * * * *", "every 10 minutes"), None),
    Job("poc_glucose_ingest", "lab", "Loads point-of-care glucometer results from the ward devices.", "lab_result_poc", ("LAB_RESULT_POC", "POC_RESULT"),
        ("0 */2 * * *", "every 2 hours on the hour"), ("30 1 * * *", "daily at 01:30")),
    Job("lab_specimen_sync", "lab", "Synchronises specimen records (barcodes and collection times).", "lab_specimen", ("LAB_SPECIMEN",),
        ("0 * * * *", "hourly on the hour"), ("*/20 * * * *", "every 20 minutes")),
    Job("micro_culture_ingest", "lab", "Loads microbiology culture results and organism identifications.", "micro_culture", (),
        ("0 5 * * *", "daily at 05:00"), ("0 4,16 * * *", "twice daily at 04:00 and 16:00")),
    Job("emr_patient_sync", "emr", "Synchronises patient demographics.", "pat_demographic", ("PAT_DEMOGRAPHIC",),
        ("30 2 * * *", "daily at 02:30"), ("0 3 * * *", "daily at 03:00")),
    Job("emr_encounter_daily", "emr", "Loads encounters of the previous day, with discharge dispositions.", "enc_encounter", ("ENC_ENCOUNTER",),
        ("0 3 * * *", "daily at 03:00"), ("45 2 * * *", "daily at 02:45")),
    Job("adt_events_compact", "emr", "Compacts the streamed admission, discharge and transfer events into current bed assignments.", "adt_event", (),
        ("*/10 * * * *", "every 10 minutes"), ("*/5 * * * *", "every 5 minutes")),
    Job("diagnosis_coding_nightly", "emr", "Loads diagnoses coded by the clinical coders during the day.", "diag_coded", ("DIAG_CODED",),
        ("0 4 * * *", "daily at 04:00"), ("30 4 * * *", "daily at 04:30")),
    Job("vitals_hourly", "emr", "Loads charted vital signs.", "vital_sign", ("VITAL_SIGN",),
        ("20 * * * *", "hourly at 20 minutes past the hour"), ("0 * * * *", "hourly on the hour")),
    Job("med_admin_ingest", "emr", "Loads medication administrations from the electronic medication record.", "med_admin", ("MED_ADMIN",),
        ("0 */4 * * *", "every 4 hours"), ("0 */6 * * *", "every 6 hours")),
    Job("ed_triage_feed", "emr", "Loads emergency department triage assessments.", "ed_triage", (),
        ("*/5 * * * *", "every 5 minutes"), ("*/10 * * * *", "every 10 minutes")),
    Job("billing_claims_export", "billing", "Loads claims and their payer responses.", "bill_claim", ("BILL_CLAIM",),
        ("0 22 * * 1-5", "on weekdays at 22:00"), ("0 23 * * *", "daily at 23:00")),
    Job("billing_charges_daily", "billing", "Loads the charge lines posted during the previous day.", "bill_charge", ("BILL_CHARGE",),
        ("15 1 * * *", "daily at 01:15"), ("0 1 * * *", "daily at 01:00")),
    Job("ref_code_sets_refresh", "reference", "Refreshes the reference code sets: ICD-10, LOINC, DRG and organism codes.", "ref_code_set", (),
        ("0 6 1 * *", "monthly on the 1st at 06:00"), ("0 6 * * 1", "weekly on Mondays at 06:00")),
    Job("dq_lab_ranges", "quality", "Checks lab results against the valid ranges of the field dictionary and quarantines violations.", "dq_result", (),
        ("40 * * * *", "hourly at 40 minutes past the hour"), ("50 * * * *", "hourly at 50 minutes past the hour")),
    Job("dq_referential_checks", "quality", "Checks that results, encounters and diagnoses point at known patients and encounters.", "dq_result", (),
        ("0 7 * * *", "daily at 07:00"), ("30 6 * * *", "daily at 06:30")),
    Job("registry_diabetes_extract", "registry", "Builds the diabetes registry extract from lab results and diagnoses.", "registry_diabetes", (),
        ("0 8 * * 1", "weekly on Mondays at 08:00"), ("0 7 1 * *", "monthly on the 1st at 07:00")),
    Job("quality_readmission_metrics", "registry", "Computes 30-day readmission rates per ward and specialty.", "qm_readmission", (),
        ("0 9 2 * *", "monthly on the 2nd at 09:00"), ("0 9 3 * *", "monthly on the 3rd at 09:00")),
    Job("deid_research_snapshot", "registry", "Builds the de-identified research snapshot for approved studies.", "research_snapshot", (),
        ("0 20 * * 5", "weekly on Fridays at 20:00"), ("0 21 28 * *", "monthly on the 28th at 21:00")),
    Job("bed_occupancy_snapshot", "emr", "Takes a snapshot of bed occupancy per ward.", "bed_occupancy", (),
        ("0 0,8,16 * * *", "three times a day at 00:00, 08:00 and 16:00"), ("0 */4 * * *", "every 4 hours")),
]  # fmt: skip
JOB = {j.name: j for j in JOBS}
TABLE_JOB = {table: job for job in JOBS for table in job.tables}


# ---------------------------------------------------------------------------------------------------------
# Known errors: why jobs failed and how they were fixed
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnownError:
    code: str
    tenant: Tenant
    job: str
    error: str  # as it appears in the job log
    symptom: str
    cause: str
    fix: str
    answer: str  # the part of the fix a short reference answer quotes
    prevention: str


KNOWN_ERRORS = [
    KnownError("KE-N-101", NORTH, "lab_chem_ingest", 'ORA-01555: snapshot too old: rollback segment number 12 with name "_SYSSMU12$" too small',
       "The extract task fails after 40 to 50 minutes, usually during catch-up runs that cover a whole day.",
       "The catch-up query reads a 24-hour window from HLXRPT while the nightly HelixLab purge rewrites the same blocks, so the undo needed for a consistent read is overwritten before the query ends.",
       "Re-run the catch-up with `--window 2h` so that each extract query covers two hours, and start it after 02:00, when the HelixLab purge has finished.",
       "--window 2h", "The DAG now refuses catch-up windows longer than 6 hours."),
    KnownError("KE-N-102", NORTH, "lab_chem_ingest", 'psycopg2.errors.UniqueViolation: duplicate key value violates unique constraint "lab_result_chem_pkey"',
       "The load task fails after a result was corrected in the laboratory; the extract itself succeeds.",
       "HelixLab re-sends a corrected result (status C) with the same RESULT_ID, and the loader inserted instead of updating.",
       "Upgrade the loader to ndw-etl 3.8.2, which upserts on (RESULT_ID, RESULT_VERSION); until then trigger the DAG with the parameter on_conflict=update.",
       "ndw-etl 3.8.2", "Corrected results are part of the loader's regression tests."),
    KnownError("KE-N-103", NORTH, "lab_heme_ingest", "Schema mismatch: column RESULT_UNIT_CD not found in HLXRPT.HEME_RESULT_V",
       "All hematology runs fail from the morning after the HelixLab 2024.2 upgrade.",
       "The HelixLab 2024.2 upgrade renamed the column RESULT_UNIT_CD to UNIT_CODE in the reporting views.",
       "Point the DAG at the mapping file mappings/helixlab_2024_2.yaml (variable heme_mapping) and clear the failed runs; no data is lost because the extract is incremental.",
       "mappings/helixlab_2024_2.yaml", "Vendor upgrades are now rehearsed against a copy of HLXRPT one week ahead."),
    KnownError("KE-N-104", NORTH, "lab_chem_ingest", "ValueError: could not convert string to float: '<0.3'",
       "One run fails, then every later run fails on the same batch.",
       "A C-reactive protein result below the detection limit arrived with its comparator, as the text <0.3, in the numeric value column.",
       "Enable parse_comparators: true in the DAG config; the loader then stores 0.3 in the value and < in LAB_RESULT_CMP.",
       "parse_comparators: true", "Comparator parsing is on by default since ndw-etl 3.9."),
    KnownError("KE-N-105", NORTH, "poc_glucose_ingest", "ValueError: could not convert string to float: 'HI'",
       "The point-of-care load fails a few times a week, always on batches from the emergency department glucometers.",
       "Glucometers report HI when glucose is above the measuring range (33.3 mmol/L); the parser expected a number.",
       "Upgrade to poc-parser 1.4, which writes HI and LO to LAB_RESULT_TXT and leaves the numeric value empty, then clear the failed task.",
       "poc-parser 1.4", "Device texts are listed in the POC interface specification, section 3."),
    KnownError("KE-N-106", NORTH, "emr_encounter_daily", "FileNotFoundError: [Errno 2] No such file or directory: '/drop/careledger/ENC_20240312.csv.gz'",
       "The load task fails at 06:00 after its file sensor times out.",
       "The CareLedger end-of-day batch ran long, so the nightly encounter export landed after the sensor's 3-hour timeout.",
       "Wait for the file, then clear only the load task with `airflow tasks clear emr_encounter_daily -t load_encounters`; do not ask CareLedger support to re-run the export.",
       "airflow tasks clear emr_encounter_daily -t load_encounters", "The sensor timeout is now 3 hours and alerts go to #north-records-int."),
    KnownError("KE-N-107", NORTH, "emr_patient_sync", "paramiko.ssh_exception.AuthenticationException: Permission denied (publickey)",
       "The SFTP download of the patient file fails; the CareLedger export itself is on time.",
       "The SFTP key of the service account svc_ndw_etl was rotated by the 90-day key rotation, but the Airflow connection sftp_careledger still held the old key.",
       "Update the Airflow connection sftp_careledger from the Vault path secret/north/etl/sftp_careledger and clear the failed run.",
       "secret/north/etl/sftp_careledger", "Key rotation now updates the Airflow connection in the same change."),
    KnownError("KE-N-108", NORTH, "emr_encounter_daily", "GSSException: No valid credentials provided (Mechanism level: Failed to find any Kerberos tgt)",
       "Every task that touches the Kerberos-protected archive share fails at once.",
       "The keytab of svc_ndw_etl expired; the password behind it changes every 180 days.",
       "Renew the keytab as described in the credential rotation runbook and install it at /etc/security/keytabs/svc_ndw_etl.keytab, then clear the failed tasks.",
       "/etc/security/keytabs/svc_ndw_etl.keytab", "A calendar reminder fires 14 days before each expiry."),
    KnownError("KE-N-109", NORTH, "adt_events_compact", 'psycopg2.errors.LockNotAvailable: could not obtain lock on relation "adt_event"',
       "Runs between 01:00 and 01:30 fail; the rest of the night is fine.",
       "The nightly VACUUM FULL maintenance of the adt_event table holds an exclusive lock during its window.",
       "The maintenance now runs a plain VACUUM, and the DAG skips runs inside the maintenance_window from 01:00 to 01:30.",
       "maintenance_window", "Exclusive-lock maintenance needs a change ticket."),
    KnownError("KE-N-110", NORTH, "diagnosis_coding_nightly", "IntegrityError: ICD-10 code U07.3 not found in ref.icd10",
       "The nightly diagnosis load fails in the first days of January.",
       "The new ICD-10-GM codes valid from 1 January were not yet in the reference tables, because ref_code_sets_refresh runs only monthly.",
       "Run ref_code_sets_refresh by hand first, then clear the diagnosis load.",
       "ref_code_sets_refresh", "In December the reference refresh also runs on the 28th."),
    KnownError("KE-N-111", NORTH, "billing_claims_export", "HTTP 413 Payload Too Large from the clearing house endpoint",
       "The claims export fails on the last working day of the month.",
       "The month-end claim batch grew beyond the clearing house's 50 MB request limit.",
       "Split the submission with batch_size=2000 claims per request and re-run the export task.",
       "batch_size=2000", "The export now splits automatically when a batch exceeds 40 MB."),
    KnownError("KE-N-112", NORTH, "vitals_hourly", "ValueError: VITAL_TEMP 98.6 outside valid range 25.0 to 45.0 °C",
       "Temperature rows from one ward are rejected every hour.",
       "After a firmware update, the monitors of ward 4B charted temperatures in Fahrenheit.",
       "Biomedical engineering set the monitors back to Celsius; the rejected rows were kept in ndw.quarantine_vital, converted and reloaded.",
       "ndw.quarantine_vital", "Firmware updates of ward monitors now include a unit check."),
    KnownError("KE-N-113", NORTH, "dq_lab_ranges", "Alert storm: 2314 LAB_CREAT values out of range 10 to 2000 µmol/L",
       "Hundreds of creatinine results are quarantined within an hour.",
       "A legacy interface, HLX_LEGACY_ORU, still sent creatinine in mg/dL after the move to dictionary version 4.",
       "Disable the legacy channel HLX_LEGACY_ORU in Mirth, convert the quarantined values with the factor 88.4 and release them.",
       "HLX_LEGACY_ORU", "Range checks now report the unit that arrived with each value."),
    KnownError("KE-N-114", NORTH, "lab_specimen_sync", "ORA-12170: TNS:Connect timeout occurred",
       "Specimen syncs fail only when they land on the new Airflow workers.",
       "A firewall change blocked port 1521 on HLXRPT for the new worker subnet 10.40.12.0/24.",
       "Network operations opened port 1521 for 10.40.12.0/24 under change FW-2291; clear the failed runs afterwards.",
       "10.40.12.0/24", "New worker pools are added to the firewall request template."),
    KnownError("KE-N-115", NORTH, "micro_culture_ingest", "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 1187",
       "The microbiology load fails on some days and not on others.",
       "Organism comments containing accented letters are exported by HelixLab in Windows-1252, not UTF-8.",
       "Set source_encoding: cp1252 in the DAG config and clear the run.",
       "source_encoding: cp1252", "The export format is documented in the HelixLab interface catalogue."),
    KnownError("KE-N-116", NORTH, "ed_triage_feed", "ssl.SSLCertVerificationError: certificate verify failed: certificate has expired",
       "The triage feed stops completely at midnight.",
       "The TLS certificate of the Mirth HTTPS listener on mirth-n.north.local expired.",
       "Renew the certificate as described in the certificate rotation runbook and restart only the listener channel; the feed resumes from its last acknowledged message.",
       "restart only the listener channel", "Certificates are now renewed 30 days before expiry."),
    KnownError("KE-N-117", NORTH, "registry_diabetes_extract", "AssertionError: cohort size dropped by 38% week over week",
       "The weekly registry extract stops on its plausibility check.",
       "The HbA1c inclusion threshold was still 6.5, an NGSP percentage, although LAB_HBA1C is stored in mmol/mol since dictionary version 4.",
       "Set the HbA1c threshold in the registry config to 48 mmol/mol and re-run the extract.",
       "48 mmol/mol", "Registry thresholds now carry their unit in the config."),
    KnownError("KE-N-118", NORTH, "deid_research_snapshot", "k-anonymity check failed: 14 equivalence classes below k=5",
       "The snapshot is built but not released.",
       "Rare diagnoses combined with exact birth dates and full postcodes made some patients unique.",
       "Re-run the snapshot with the profile research-strict, which keeps only the birth year and drops the postcode.",
       "research-strict", "Study requests must state the needed date precision."),
    KnownError("KE-N-119", NORTH, "bed_occupancy_snapshot", "UniqueViolation: duplicate snapshot for 2024-10-27 02:00",
       "The snapshot fails once a year, on the night the clocks go back.",
       "Snapshots were keyed on local time, and 02:00 to 03:00 happens twice when daylight saving time ends.",
       "Key snapshots on UTC; the daylight saving runbook lists the one-off clean-up.",
       "UTC", "All new DAGs use UTC schedules."),
    KnownError("KE-N-120", NORTH, "lab_coag_ingest", "AirflowTaskTimeout: Timeout, PID: 31877 after 0:30:00",
       "The coagulation load times out after a middleware outage.",
       "The coagulation analysers re-sent three days of results at once after their middleware came back.",
       'Trigger a one-off run with a longer timeout: `airflow dags trigger lab_coag_ingest --conf \'{"execution_timeout_minutes": 120}\'`.',
       '"execution_timeout_minutes": 120', "Backfills should follow the lab backfill runbook instead."),
    KnownError("KE-N-121", NORTH, "med_admin_ingest", "Task exited with return code Negsignal.SIGKILL (exit code 137)",
       "The medication load is killed on the first day of each month.",
       "The monthly reconciliation run, triggered on the 1st, reads a full month of administrations into memory and the worker runs out of it.",
       "Set chunksize=50000 in the DAG config so the loader streams the extract, and clear the run.",
       "chunksize=50000", "Workers alert at 80% memory."),
    KnownError("KE-N-122", NORTH, "lab_chem_ingest", "psycopg2.errors.DiskFull: could not extend file: No space left on device",
       "Loads fail while extracts succeed.",
       "The staging tablespace ts_staging on /pgdata/staging filled up with staging tables older than a week.",
       "Purge staging with `CALL ndw.purge_staging(7)`, then clear the failed loads; see the storage runbook if the volume is still above 85%.",
       "CALL ndw.purge_staging(7)", "The purge now runs nightly."),
    KnownError("KE-N-123", NORTH, "billing_charges_daily", "Reconciliation failed: warehouse total 1203455.10 differs from ledger total 1203512.40",
       "The charge load finishes but its reconciliation step fails.",
       "Late charges were posted in CareLedger after the 23:00 cut-off, so the ledger total includes charges the extract did not see.",
       "Re-run the reconciliation step after 02:00; if the difference remains, Finance BI compares the charge lines posted after 23:00.",
       "after 02:00", "The cut-off is stated in the month-end runbook."),
    KnownError("KE-N-124", NORTH, "quality_readmission_metrics", "ZeroDivisionError: division by zero in readmission_rate",
       "The monthly metrics job fails.",
       "Ward 7C was closed for renovation and had no discharges, so its rate divided by zero.",
       "Upgrade to qm-metrics 2.3.1, which excludes wards without discharges, and re-run the job.",
       "qm-metrics 2.3.1", "Closed wards are flagged in the ward reference table."),
    KnownError("KE-S-201", SOUTH, "lab_chem_ingest", 'ORA-01555: snapshot too old: rollback segment number 7 with name "_SYSSMU7$" too small',
       "Long catch-up runs fail after about an hour.",
       "Catch-up queries on the primary LSEXP database compete with the LabSphere archiving job and run out of undo.",
       "Run catch-ups against the Data Guard standby by setting source: standby in the job config, which reads LSEXP_DG.",
       "source: standby", "Catch-ups default to the standby since sdw-pipelines 2.15."),
    KnownError("KE-S-202", SOUTH, "lab_chem_ingest", "Violation of PRIMARY KEY constraint 'PK_chem_result'. Cannot insert duplicate key in object 'lab.chem_result'",
       "A load fails after results were corrected.",
       "LabSphere re-sends corrected results with the same accession number and test code, and the loader inserted them as new rows.",
       "Deploy sdw-pipelines 2.14.0, whose loader MERGEs on (accession_no, test_cd, result_seq), and re-materialize the failed partition.",
       "sdw-pipelines 2.14.0", "Corrected results are part of the integration tests."),
    KnownError("KE-S-203", SOUTH, "poc_glucose_ingest", "ValueError: could not convert string to float: '>600'",
       "The nightly point-of-care load fails on batches from the intensive care glucometers.",
       "Glucometers report >600 when glucose is above their measuring range.",
       "Set clamp_censored: true in the job config; the loader stores 600 and sets LAB_ABN_FLAG to CRIT_HIGH.",
       "clamp_censored: true", "Censored values are covered by the POC parser tests."),
    KnownError("KE-S-204", SOUTH, "emr_encounter_daily", "HTTPError: 429 Client Error: Too Many Requests for url: https://fhir.south.local/Encounter",
       "The encounter load slows down and then fails after retries.",
       "The job opened 16 parallel requests, above the MedArchive API limit of 10 requests per second.",
       "Set max_concurrent_requests: 4 in the resource config of the MedArchive client and re-launch the job.",
       "max_concurrent_requests: 4", "The client now honours the Retry-After header."),
    KnownError("KE-S-205", SOUTH, "emr_patient_sync", "HTTPError: 401 Client Error: invalid_client",
       "Every call to the MedArchive API is refused.",
       "The OAuth client secret of the warehouse expired; it is rotated every 365 days.",
       "Store the new secret at kv/south/etl/medarchive_fhir and reload the code location sdw_pipelines so that the job reads it.",
       "kv/south/etl/medarchive_fhir", "The credential rotation runbook schedules the rotation."),
    KnownError("KE-S-206", SOUTH, "diagnosis_coding_nightly", "String or binary data would be truncated in table 'sdw.emr.diag_coded', column 'diag_cd'",
       "The diagnosis load fails after a coding software update.",
       "The coding software started sending codes with the dot (E11.65), one character longer than the column allows.",
       "Set normalize_icd: strip_dot in the job config; codes are stored without the dot as before.",
       "normalize_icd: strip_dot", "Format changes of the coding software are announced by Integration Services."),
    KnownError("KE-S-207", SOUTH, "vitals_hourly", "ValueError: VITAL_TEMP 37.2 outside valid range 77.0 to 113.0 °F",
       "Temperature rows from the new step-down unit are rejected.",
       "The monitors of the new step-down unit send Celsius, while the warehouse stores Fahrenheit.",
       "Convert at the integration engine: route VITALS-IN-03 now multiplies by 1.8 and adds 32 for that unit's devices.",
       "VITALS-IN-03", "Device onboarding includes a unit check."),
    KnownError("KE-S-208", SOUTH, "adt_events_compact", "Transaction (Process ID 87) was deadlocked on lock resources with another process and has been chosen as the deadlock victim",
       "Runs fail on Sunday mornings around 02:00.",
       "The compaction overlapped with the weekly index rebuild on the adt_event table.",
       "The index rebuild moved to 03:30 and the job retries up to 3 times with a 2-minute backoff.",
       "03:30", "Maintenance windows are published in #south-platform."),
    KnownError("KE-S-209", SOUTH, "ref_code_sets_refresh", "SSLError: certificate verify failed: unable to get local issuer certificate",
       "The weekly refresh fails while downloading from the terminology server.",
       "The web proxy started TLS inspection with a new root certificate that the job's container did not trust.",
       "Add the proxy root certificate /etc/ssl/certs/south-proxy-ca.pem to the image and set REQUESTS_CA_BUNDLE to it.",
       "/etc/ssl/certs/south-proxy-ca.pem", "The base image now ships the proxy certificate."),
    KnownError("KE-S-210", SOUTH, "billing_claims_export", "999 acknowledgement rejected: CLM05-3 claim frequency code invalid",
       "Corrected claims are rejected by the clearing house.",
       "Corrected claims were sent with claim frequency code 1 (original) instead of 7 (replacement).",
       "Fix the mapping table billing.freq_code_map so that corrected claims map to 7, then resubmit them.",
       "billing.freq_code_map", "Claim rejections are reviewed daily by Revenue Cycle Analytics."),
    KnownError("KE-S-211", SOUTH, "lab_specimen_sync", "Login failed for user 'SOUTH\\svc_sdw_etl'",
       "All jobs using the warehouse login fail at the same time.",
       "The domain password policy expired the service account password after 180 days.",
       "The service account was converted to the group managed service account svc_sdw_etl$, whose password the domain rotates itself.",
       "svc_sdw_etl$", "No warehouse job uses a password-based account any more."),
    KnownError("KE-S-212", SOUTH, "micro_culture_ingest", "KeyError: organism code 'CANAUR' not found in ref.organism",
       "The microbiology load fails on one isolate.",
       "A new organism code for Candida auris arrived before the weekly reference refresh.",
       "Add the code with `EXEC ref.usp_add_organism 'CANAUR', 'Candida auris'` and re-materialize the partition.",
       "ref.usp_add_organism", "Lab Informatics announces new organism codes a week ahead."),
    KnownError("KE-S-213", SOUTH, "dq_lab_ranges", "Alert: 1870 LAB_CRP values out of range 0.03 to 50.0 mg/dL",
       "Point-of-care CRP results flood the quarantine after the LabSphere 11 upgrade.",
       "LabSphere 11 moved CRP to mg/dL, but the point-of-care CRP devices still send mg/L through route LS-ORU-01.",
       "Apply the conversion factor 0.1 to point-of-care CRP at route LS-ORU-01, then release the quarantined batch.",
       "0.1", "Unit changes are checked per device type."),
    KnownError("KE-S-214", SOUTH, "med_admin_ingest", "dagster._core.errors.DagsterExecutionStepExecutionError: MemoryError",
       "The medication load fails on busy days.",
       "The job materialised all wards in one partition.",
       "Partition the asset by ward (partition_key: ward) and backfill the failed day.",
       "partition_key: ward", "Large assets are partitioned from the start."),
    KnownError("KE-S-215", SOUTH, "deid_research_snapshot", "ValueError: date shift missing for 312 patients",
       "The snapshot stops before writing any file.",
       "Patients added since the last snapshot had no entry in the date shift table.",
       "Run `EXEC deid.usp_extend_shift_table` before the snapshot; it assigns each new patient a random shift of 1 to 364 days.",
       "deid.usp_extend_shift_table", "The snapshot job now extends the table itself."),
    KnownError("KE-S-216", SOUTH, "ed_triage_feed", "HL7 parse error: MSH-12 version 2.8 not supported",
       "No triage records arrive after the emergency department system upgrade.",
       "The upgraded emergency department system sends HL7 version 2.8, and the parser accepts up to 2.5.1.",
       "The integration engine route ED-TRIAGE-02 now rewrites MSH-12 to 2.5.1 after checking that no 2.8-only segments are present.",
       "ED-TRIAGE-02", "Interface upgrades are tested in the integration engine's test lane."),
    KnownError("KE-S-217", SOUTH, "bed_occupancy_snapshot", "Missing snapshot for 2024-03-10 02:00",
       "One snapshot is missing on the night the clocks go forward.",
       "The schedule ran in local time, and 02:00 does not exist when daylight saving time starts.",
       'Set execution_timezone="UTC" on the schedule, as the daylight saving runbook requires.',
       'execution_timezone="UTC"', "Schedules in local time are rejected in review."),
    KnownError("KE-S-218", SOUTH, "lab_heme_ingest", "ORA-00942: table or view does not exist",
       "Hematology loads fail after the LabSphere 11 upgrade.",
       "LabSphere 11 moved its export views from the schema LS_EXPORT to LS_EXPORT2.",
       "Set export_schema: LS_EXPORT2 in the job config and re-materialize the failed partitions.",
       "export_schema: LS_EXPORT2", "Upgrade notes are reviewed by Lab Informatics before go-live."),
    KnownError("KE-S-219", SOUTH, "emr_encounter_daily", "FHIR paging error: Bundle.total is 0 but Bundle.link[next] is present",
       "The encounter load finishes with far too few rows.",
       "A paging defect in MedArchive FHIR 4.2 returned empty pages for page sizes above 200.",
       "Set page_size: 200 in the client config until the vendor patch MA-4.2.3 is installed, then reload the day.",
       "page_size: 200", "Row count checks now compare with the MedArchive census."),
    KnownError("KE-S-220", SOUTH, "registry_diabetes_extract", "AssertionError: 0 rows returned for HbA1c >= 48",
       "The monthly registry extract is empty.",
       "The HbA1c threshold was copied from North's configuration (48 mmol/mol), but South stores LAB_HBA1C as an NGSP percentage.",
       "Set the HbA1c threshold to 6.5 % in the registry config and re-run.",
       "6.5 %", "Registry configs are reviewed per hospital."),
    KnownError("KE-S-221", SOUTH, "quality_readmission_metrics", "KeyError: discharge disposition 'AMA' not mapped",
       "The readmission metrics fail after a new disposition appeared.",
       "Discharges against medical advice (AMA) had no category in the disposition mapping.",
       "Map AMA to the category left-against-advice in ref.disposition_map and re-run the metrics.",
       "ref.disposition_map", "New codes in DISCH_DISP_CD raise a warning, not an error."),
    KnownError("KE-S-222", SOUTH, "lab_coag_ingest", "Arithmetic overflow error converting numeric to data type numeric",
       "Coagulation loads fail on isolated batches.",
       "The analyser sends 9999 for the aPTT when the clot was not detected, which overflows DECIMAL(4,1).",
       "Treat 9999 as a sentinel: sdw-pipelines 2.16 stores an empty value and keeps the raw text.",
       "sdw-pipelines 2.16", "Sentinel values are listed in the field dictionary."),
    KnownError("KE-S-223", SOUTH, "billing_charges_daily", "Reconciliation failed: warehouse total 884120.55 differs from ledger total 884301.15",
       "The charge reconciliation fails on the first day of the month.",
       "South's ledger closes at 18:00 on the last day of the month, and charges posted later belong to the next period.",
       "Reconcile against the period column of the ledger file, not the posting date; the job option reconcile_by: period does this.",
       "reconcile_by: period", "The cut-off is stated in the month-end runbook."),
    KnownError("KE-S-224", SOUTH, "lab_cardiac_ingest", "Schema mismatch: unexpected column HS_TNI_SEX_URL in LS_EXPORT2.CARD_RESULT_V",
       "Cardiac marker loads fail after a LabSphere configuration change.",
       "The laboratory added sex-specific upper reference limits for troponin I as a new column.",
       "Add HS_TNI_SEX_URL to the cardiac mapping in sdw-pipelines 2.16.1; the sex-neutral limit of 26 ng/L stays the default.",
       "sdw-pipelines 2.16.1", "Schema drift is detected in the staging check, before the load."),
]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# Runbooks and policies: sections of steps; a step may carry the question it answers
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One step or paragraph, a template over the runbook's parameters. `only` limits it to one hospital."""

    text: str
    question: str = ""
    answer: str = ""
    only: str = ""


def step(text: str, question: str = "", answer: str = "", only: str = "") -> Step:
    return Step(text, question, answer, only)


@dataclass(frozen=True)
class Runbook:
    slug: str
    title: str
    area: str  # the owning team (a key of TEAMS); shared runbooks belong to the group data office
    scopes: tuple[str, ...]
    purpose: str
    background: str
    triggers: list[str]
    prerequisites: list[str]
    steps: list[Step]
    checks: list[Step]
    rollback: list[Step]
    pitfalls: list[Step]
    params: dict[str, dict[str, str]]  # "north"/"south"/"shared" -> template values


RUNBOOKS = [
    Runbook(
        "lis-interface-outage", "Laboratory result interface outage", "lab", ("ops",),
        "Restore the flow of laboratory results from {lab} to the warehouse and the clinical dashboards after the "
        "result interface stops, without losing or duplicating results.",
        "Every result verified in {lab} leaves as an HL7 ORU^R01 message. The {engine} receives it on the {unit} "
        "{channel}, acknowledges it to {lab}, and forwards it to the clinical dashboards and to the warehouse landing "
        "tables, from which lab_chem_ingest, lab_heme_ingest and lab_coag_ingest load. When a destination refuses "
        "messages, the {engine} queues them on disk instead of dropping them, and {lab} keeps sending because every "
        "message was acknowledged. An outage therefore rarely loses data; it delays it, and the work is to drain the "
        "queue in order and to prove that nothing was lost. On a weekday the {unit} carries {daily} messages, with a "
        "peak between 09:00 and 12:00 when the samples of the morning ward rounds are verified.",
        ["The {engine} {unit} {channel} shows a growing queue and no message sent for more than 10 minutes.",
         "lab_chem_ingest or lab_heme_ingest loads zero rows in two consecutive runs during the day.",
         "The laboratory reports results verified in {lab} that are missing from the dashboards."],
        ["Read access to the {engine} administrator console."],
        [step("Confirm the outage in the {engine} console: the {unit} {channel} is red or its queue grows. Note the "
              "time of the last message sent; it is the outage start for the ticket."),
         step("Open an incident ticket with severity 2. Lab results missing for more than 4 hours make it severity 1."),
         step("Tell the laboratory shift lead (extension {lab_ext}) that results are not reaching the warehouse. The "
              "laboratory phones critical results to the wards as usual during the outage."),
         step("Do not restart the {lab} outbound interface and do not clear the queue. The engine keeps queued "
              "messages for {retention}; after that they are dropped and must be re-sent from {lab}.",
              "During a lab result interface outage, how long does the interface engine keep queued messages?",
              "{retention}"),
         step("Find the cause. In most outages the destination is unreachable: the warehouse listener is down, a "
              "certificate expired or a disk is full. Fix the destination first; the queue drains on its own once the "
              "destination accepts messages again."),
         step("If the queue does not start draining within 5 minutes of the fix, replay it by hand with `{replay}`.",
              "What command replays the queued lab result messages after the interface outage is fixed?", "{replay}"),
         step("Watch the queue drain. Expect about {rate} messages per minute, so a queue of 10000 messages takes "
              "about {drain} minutes."),
         step("When the queue is empty, run the loads by hand instead of waiting for the schedule: `{run_chem}`, then "
              "`{run_heme}`."),
         step("If the outage lasted longer than {retention}, ask the laboratory to re-send the affected period with "
              "{resend}. Re-sent results carry their original identifiers, so the loaders update rows instead of "
              "duplicating them.",
              "The lab interface was down longer than the queue retention. How are the lost results recovered?",
              "{resend}")],
        [step("Compare the number of results per hour in the warehouse with {report} for the outage period; the "
              "difference must be below 0.5%.",
              "Which report do you reconcile lab result counts against after an interface outage?", "{report}"),
         step("Check that dq_lab_ranges raised no new alerts for the replayed period."),
         step("Spot-check five results verified during the outage on the clinical dashboard.")],
        [step("Replaying is idempotent: results already loaded are updated, not duplicated. If the replay itself "
              "misbehaves, pause the {unit} {channel}; queued messages stay in the queue.")],
        [step("Restarting the whole {engine} instead of the one {unit} drops the in-memory state of every other "
              "interface."),
         step("{pitfall}")],
        {"north": {"daily": "about 60000", "engine": "Mirth Connect", "unit": "channel", "channel": "HLX_ORU_IN",
                   "lab_ext": "5120",
                   "retention": "72 hours", "replay": "mirth-cli channel resend HLX_ORU_IN --queued", "rate": "400",
                   "drain": "25", "resend": "the HelixLab transaction RSND (result re-send by date range)",
                   "report": "HelixLab report LR-114 Daily Result Counts",
                   "pitfall": "The legacy channel HLX_LEGACY_ORU must stay disabled: it sends creatinine in mg/dL."},
         "south": {"daily": "about 42000", "engine": "integration engine", "unit": "route", "channel": "LS-ORU-01",
                   "lab_ext": "2215",
                   "retention": "48 hours", "replay": "ie-admin route replay LS-ORU-01 --since <outage start>",
                   "rate": "250", "drain": "40", "resend": "the LabSphere utility ls_resend and the outage window",
                   "report": "LabSphere report QC-27 Interface Totals",
                   "pitfall": "Point-of-care CRP devices send mg/L on this route, which converts with the factor 0.1; "
                              "never replay through the test route, which lacks that conversion."}},
    ),
    Runbook(
        "lab-backfill", "Backfilling laboratory results", "lab", ("ops",),
        "Reload a period of laboratory results into the warehouse after an outage, a loader defect or a dictionary "
        "change, without overloading {lab} and without a flood of data quality alerts.",
        "The lab loads are incremental: each run reads the results changed since its watermark and upserts them by "
        "result identifier. A backfill runs the same loads over an explicit period instead, so it can repair a gap or "
        "reload data after a defect without moving the watermark of the regular runs. Because it reads far more data "
        "at once than a regular run, a backfill loads {source_db}, competes with the regular runs for the same target "
        "tables, and can raise thousands of range alerts when the period holds values in old units. The steps below "
        "keep those effects small. One day of chemistry results is about {day_rows} rows and takes about "
        "{day_minutes} minutes to load.",
        ["Results of a period are missing or wrong in the warehouse while {lab} still holds them.",
         "A loader defect was fixed and the affected period must be reloaded.",
         "A known error asks for a catch-up longer than 6 hours."],
        ["The period (first and last day) is agreed in the ticket with the laboratory data owner."],
        [step("Announce the backfill in {oncall} and in {dq_channel}, with the period and the expected duration."),
         step("Backfills run only between {window}, when {lab} has little interactive load.",
              "During which hours may a backfill of lab results run?", "{window}"),
         step("Split the period into runs of at most {max_window}; longer runs hold locks on the source for too long.",
              "What is the longest period one lab backfill run may cover?", "{max_window}"),
         step("Load specimens first: run lab_specimen_sync for the period before any result job, because results "
              "reference specimen barcodes.",
              "When backfilling lab results, which job has to run before the result jobs?", "lab_specimen_sync"),
         step("Mute the range alerts for the period: {mute}."),
         step("Run the result jobs in this order: lab_chem_ingest, lab_heme_ingest, lab_coag_ingest{extra_jobs}. For "
              "example: `{backfill}`.",
              "What command backfills lab_chem_ingest for a period?", "{backfill}"),
         step("Keep at most {concurrency} running at the same time.",
              "How many lab backfill runs may run at the same time?", "{concurrency}"),
         step("Unmute the range alerts and run dq_lab_ranges once by hand over the whole period: `{dq_run}`.")],
        [step("Row counts per day match {report} within 0.5%."),
         step("No result of the period lacks its specimen: dq_referential_checks is green.")],
        [step("A backfill only upserts, it never deletes. To undo one, restore the affected partitions from "
              "{snapshot}.",
              "How is a faulty lab backfill undone?", "{snapshot}")],
        [step("Backfilling results before specimens produces referential errors that look like data loss but are not."),
         step("Period boundaries are given in {tz}; a boundary in the wrong time zone leaves a gap of one or two "
              "hours.",
              "In which time zone are the period boundaries of a lab backfill given?", "{tz}")],
        {"north": {"source_db": "the HelixLab reporting replica HLXRPT", "day_rows": "41000", "day_minutes": "6",
                   "window": "20:00 and 06:00", "max_window": "7 days",
                   "mute": "`airflow variables set dq_mute_until <end of backfill>`",
                   "extra_jobs": ", poc_glucose_ingest and blood_gas_ingest",
                   "backfill": "airflow dags backfill lab_chem_ingest -s 2024-05-01 -e 2024-05-07 --reset-dagruns",
                   "concurrency": "2 DAG runs (max_active_runs=2)",
                   "dq_run": "airflow dags trigger dq_lab_ranges --conf '{\"full_period\": true}'",
                   "report": "HelixLab report LR-114 Daily Result Counts",
                   "snapshot": "the nightly pg_dump snapshots in /backup/ndw/nightly",
                   "tz": "local time, as HelixLab stores it"},
         "south": {"source_db": "the LabSphere export database LSEXP", "day_rows": "28000", "day_minutes": "9",
                   "window": "22:00 and 05:00", "max_window": "3 days",
                   "mute": "pause the dq_lab_ranges sensor in the Dagster UI",
                   "extra_jobs": ", lab_cardiac_ingest and poc_glucose_ingest",
                   "backfill": "dagster job backfill -j lab_chem_ingest --from 2024-05-01 --to 2024-05-03",
                   "concurrency": "4 partitions",
                   "dq_run": "dagster job launch -j dq_lab_ranges --config full_period.yaml",
                   "report": "LabSphere report QC-27 Interface Totals",
                   "snapshot": "the SQL Server snapshot database SDW_NIGHTLY",
                   "tz": "UTC, as LabSphere stores it"}},
    ),
    Runbook(
        "records-extract-late", "Late or missing nightly records extract", "emr", ("ops",),
        "Recover when the nightly extract from {emr} is late or incomplete, so that encounters, diagnoses and "
        "demographics reach the warehouse before the 07:00 reports.",
        "{background}",
        ["{late_symptom}",
         "emr_encounter_daily loads less than 70% of the usual number of encounters.",
         "The morning bed and discharge reports show yesterday as empty."],
        ["Read access to {extract_place}."],
        [step("Check whether the extract exists: {check}."),
         step("If the extract has not started, contact {support} {support_how}. Do not start the export yourself: "
              "{why_not}.",
              "Whom do you contact when the nightly records extract has not started?", "{support}"),
         step("If the extract is only late, wait. emr_encounter_daily waits up to {wait} for it; after that the load "
              "fails on purpose, so that someone looks.",
              "How long does emr_encounter_daily wait for the nightly extract before it fails?", "{wait}"),
         step("{stuck}", "What do you do when the nightly records export is stuck?", "{stuck_answer}"),
         step("When the extract is complete, re-run only the load: `{rerun}`.",
              "The nightly extract arrived late. How do you re-run only the encounter load?", "{rerun}"),
         step("Then run emr_patient_sync and diagnosis_coding_nightly, in that order, because diagnoses reference "
              "encounters."),
         step("If the 07:00 reports already ran, ask {team_registry} to re-run them. The bed occupancy snapshot "
              "needs no re-run.")],
        [step("The day's encounter count is within 10% of the same weekday last week."),
         step("No diagnosis lacks its encounter: dq_referential_checks is green.")],
        [step("A load of one day replaces that day's partition, so re-running is safe.")],
        [step("{pitfall}")],
        {"north": {"background": "CareLedger has no real-time interface for encounters and diagnoses. Every night its "
                                 "end-of-day batch closes the day's encounters at 00:30, and the export EXP-NIGHTLY "
                                 "writes one compressed CSV file per entity to /drop/careledger, followed by a "
                                 "checksum file and a .done marker. The warehouse jobs wait for the marker, then load "
                                 "the files. The batch usually finishes by 02:15; month ends and CareLedger "
                                 "upgrades make it later.",
                   "late_symptom": "The file sensor of emr_encounter_daily is still waiting at 04:00.",
                   "extract_place": "sftp-n.north.local:/drop/careledger",
                   "check": "list /drop/careledger for ENC_<yyyymmdd>.csv.gz and its .done marker file",
                   "support": "CareLedger application support", "support_how": "on extension 4602, around the clock",
                   "why_not": "a second export run locks the CareLedger end-of-day batch", "wait": "3 hours",
                   "stuck": "If the export has written nothing for 90 minutes, ask CareLedger support to check the "
                            "batch EXP-NIGHTLY; only they may cancel it.",
                   "stuck_answer": "ask CareLedger support to check the batch EXP-NIGHTLY",
                   "rerun": "airflow tasks clear emr_encounter_daily -t load_encounters",
                   "pitfall": "The .done marker appears only after the checksum file. Loading a file without its "
                              "marker can load a partial file."},
         "south": {"background": "MedArchive offers a FHIR R4 API. Every night emr_encounter_daily starts a bulk "
                                 "export ($export) of the Encounter, Condition and Patient resources changed since "
                                 "the last successful export, polls its status URL, and loads the NDJSON files once "
                                 "the export reports completion. The export normally completes within 40 minutes; on "
                                 "the first night after a MedArchive release it takes much longer while the vendor "
                                 "rebuilds indexes.",
                   "late_symptom": "The bulk export of emr_encounter_daily still reports in progress at 04:00.",
                   "extract_place": "the job logs in the Dagster UI",
                   "check": "poll the bulk export status URL logged by the job; HTTP 202 means running, 200 complete",
                   "support": "MedArchive vendor support", "support_how": "through the support portal with priority P2",
                   "why_not": "MedArchive refuses a second $export request for a period while one runs",
                   "wait": "2 hours",
                   "stuck": "If the bulk export shows no progress for 90 minutes, cancel it with an HTTP DELETE on "
                            "its status URL and start a new export with _since set to the last successful export.",
                   "stuck_answer": "cancel it with an HTTP DELETE on its status URL",
                   "rerun": "dagster job launch -j emr_encounter_daily --tags '{\"rerun\": \"load_only\"}'",
                   "pitfall": "MedArchive FHIR 4.2 returns empty pages above a page size of 200; keep page_size: 200 "
                              "until the patch MA-4.2.3 is installed."}},
    ),
    Runbook(
        "credential-rotation", "Rotating service account credentials", "reference", ("ops",),
        "Rotate the credentials the warehouse jobs use (passwords, keys, client secrets) before they expire, and "
        "recover when one expired unnoticed.",
        "{background} Each credential expires on its own cycle, and an expired credential fails every job that uses "
        "it at the same moment, usually at night, when the fewest people can fix it.",
        ["A credential expires within 14 days (the calendar reminder fired).",
         "Jobs fail with authentication errors and a known error points here."],
        ["Access to the secret store under {secrets}."],
        [step("List what expires: {inventory}."),
         step("{request}", "{request_q}", "{request_a}"),
         step("{install}"),
         step("{test}", "{test_q}", "{test_a}"),
         step("{second}"),
         step("Restart nothing else: running jobs finish with the old credential, {reload}.",
              "After rotating a credential, what must be done so that new job runs use it?", "{reload_a}"),
         step("Record the new expiry date in the credential inventory and set the reminder to 14 days before it.")],
        [step("The next scheduled run of every job using the credential succeeds."),
         step("The old credential is revoked after {revoke_after}.",
              "When is the old credential revoked after a rotation?", "{revoke_after}")],
        [step("If the new credential fails, switch back to the old one, which stays valid until it is revoked.")],
        [step("Rotating during a long backfill breaks the backfill; rotate between runs.")],
        {"north": {"background": "The warehouse jobs authenticate as the service account svc_ndw_etl: with a Kerberos "
                                 "keytab against the archive share and the reporting replica, with an SSH key against "
                                 "the CareLedger SFTP server, and with a client secret against the HR API.",
                   "inventory": "the keytab of svc_ndw_etl (every 180 days), the SFTP key for CareLedger (every 90 "
                                "days) and the HR API client secret (every 365 days)",
                   "request": "Request a new keytab from the Identity team with the ticket type KEYTAB-RENEW; allow 3 "
                              "working days.",
                   "request_q": "How much lead time does a keytab renewal request need?", "request_a": "3 working days",
                   "install": "Install the keytab at /etc/security/keytabs/svc_ndw_etl.keytab on every Airflow worker, "
                              "owned by airflow with mode 0400.",
                   "test": "Test it with `kinit -kt /etc/security/keytabs/svc_ndw_etl.keytab svc_ndw_etl@NORTH.LOCAL` "
                           "followed by `klist`.",
                   "test_q": "How do you test a renewed keytab?",
                   "test_a": "kinit -kt /etc/security/keytabs/svc_ndw_etl.keytab svc_ndw_etl@NORTH.LOCAL",
                   "second": "For the SFTP key, generate a new key pair, send the public key to CareLedger support, "
                             "store the private key at secret/north/etl/sftp_careledger and update the Airflow "
                             "connection sftp_careledger in the same change.",
                   "reload": "and new task runs read the new keytab by themselves",
                   "reload_a": "new task runs read the new keytab by themselves", "revoke_after": "7 days"},
         "south": {"background": "The warehouse jobs authenticate as the group managed service account svc_sdw_etl$ "
                                 "against the LabSphere export database and the warehouse, with an OAuth client "
                                 "secret against the MedArchive FHIR API, and with a client certificate against the "
                                 "clearing house.",
                   "inventory": "the MedArchive OAuth client secret (every 365 days), the LabSphere export database "
                                "login (a group managed service account rotated by the domain) and the clearing house "
                                "certificate (every 2 years)",
                   "request": "Request a new client secret in the MedArchive admin portal under Applications > "
                              "sdw-warehouse; the old secret stays valid for 7 days.",
                   "request_q": "How long does the old MedArchive client secret stay valid after a new one is issued?",
                   "request_a": "7 days",
                   "install": "Store the new secret at kv/south/etl/medarchive_fhir.",
                   "test": "Test it with `dagster job launch -j emr_patient_sync --config smoke_test.yaml`, which "
                           "fetches a single Patient resource.",
                   "test_q": "How do you test a rotated MedArchive client secret?",
                   "test_a": "dagster job launch -j emr_patient_sync --config smoke_test.yaml",
                   "second": "The LabSphere database login needs no manual rotation: svc_sdw_etl$ is a group managed "
                             "service account. Only check that the Dagster hosts are still members of the group "
                             "SDW-ETL-HOSTS.",
                   "reload": "but reload the code location sdw_pipelines (Deployment > Code locations > Reload) so "
                             "that new runs read the new secret",
                   "reload_a": "reload the code location sdw_pipelines", "revoke_after": "7 days"}},
    ),
    Runbook(
        "certificate-renewal", "Renewing interface TLS certificates", "reference", ("ops",),
        "Renew the TLS certificates of the interface listeners (lab results, triage, vital signs) before they expire, "
        "without interrupting the feeds.",
        "Every interface listener that receives data over the network uses TLS with a certificate from the "
        "hospital's internal certificate authority. Senders check the certificate on every connection; once it has "
        "expired they refuse to send, and the {engine} has nothing to queue because nothing arrives. The listeners "
        "concerned carry the lab results ({listener}), the emergency department triage feed and the vital signs "
        "feed. Renewal is routine work when it is done ahead of time, and an outage when it is forgotten.",
        ["The weekly certificate report lists a certificate expiring within {renew_days}.",
         "A feed fails with certificate verify failed: certificate has expired."],
        ["Administrator access to the {engine}."],
        [step("Find the certificates expiring within {renew_days}: {find}.",
              "How long before expiry are interface certificates renewed?", "{renew_days}"),
         step("Request the new certificate from {ca} with the same subject names; it is valid for {validity}.",
              "Which certificate authority issues the interface certificates?", "{ca}"),
         step("{install}", "Where is a renewed interface certificate installed?", "{install_a}"),
         step("Restart only the listener {unit}, never the whole {engine}; senders retry and resume from their last "
              "acknowledged message."),
         step("Verify that the new certificate is served: `openssl s_client -connect {host}:{port} -servername {host}` "
              "shows the new expiry date."),
         step("Record the new expiry date in the certificate inventory.")],
        [step("Each feed on the listener delivers messages within 10 minutes of the restart.")],
        [step("Keep the old certificate in the store until the new one has served a full day; to roll back, bind it "
              "again and restart the listener {unit}.")],
        [step("Senders that pin the certificate (the blood gas middleware in particular) need the new certificate "
              "before the switch; send it to them 5 working days ahead.")],
        {"north": {"listener": "channel HLX_ORU_IN on port 6661", "renew_days": "30 days",
                   "find": "the weekly certificate report in #north-platform lists them",
                   "ca": "North Issuing CA 2", "validity": "1 year", "engine": "Mirth Connect", "unit": "channel",
                   "install": "Import the certificate and key into the Mirth keystore /opt/mirth/appdata/keystore.jks "
                              "under the alias of the old one.",
                   "install_a": "/opt/mirth/appdata/keystore.jks", "host": "mirth-n.north.local", "port": "6661"},
         "south": {"listener": "route LS-ORU-01 on port 8443", "renew_days": "45 days",
                   "find": "the weekly certificate report in #south-platform lists them",
                   "ca": "South Enterprise CA", "validity": "2 years", "engine": "integration engine", "unit": "route",
                   "install": "Upload the certificate to the integration engine's certificate store (Admin > "
                              "Security > Certificates) and bind it to the listener.",
                   "install_a": "the integration engine's certificate store", "host": "ie.south.local",
                   "port": "8443"}},
    ),
    Runbook(
        "daylight-saving", "Daylight saving time changeover", "reference", ("ops",),
        "Keep timestamps and schedules correct on the two nights a year when the clocks change.",
        "{background}",
        ["The last Sunday of March (clocks go forward) and the last Sunday of October (clocks go back)."],
        ["The changeover dates are in the platform calendar."],
        [step("The night of the changeover, pause the lab loads that read local timestamps (lab_chem_ingest, "
              "lab_heme_ingest, lab_coag_ingest, lab_specimen_sync) from 01:45 to 03:15.",
              "On a daylight saving changeover night, during which hours are the lab loads paused?",
              "from 01:45 to 03:15", only="north"),
         step("HelixLab and CareLedger store local wall-clock time without an offset. In autumn the hour from 02:00 to "
              "03:00 happens twice, so two results can carry the same timestamp; in spring that hour does not exist.",
              only="north"),
         step("After the autumn changeover, run `CALL ndw.fix_dst_duplicates('<changeover date>')`, which gives the "
              "second occurrence of the repeated hour its real UTC offset using the HelixLab audit sequence.",
              "What clean-up runs after the autumn daylight saving changeover?", "ndw.fix_dst_duplicates",
              only="north"),
         step("LabSphere and MedArchive store UTC, so the data needs no correction. Only schedules are at risk: a "
              "schedule at 02:xx local time is skipped in spring and runs twice in autumn.", only="south"),
         step('Before the changeover, check that every schedule sets execution_timezone="UTC": `dagster schedule '
              "list` must show UTC for every schedule.",
              "Which setting must every Dagster schedule have to survive the daylight saving changeover?",
              'execution_timezone="UTC"', only="south"),
         step("Reports for clinicians show local time through the reporting view sdw.rpt.v_local_time; check one "
              "report on the Monday after the changeover.",
              "Which view converts UTC timestamps to local time for reports?", "sdw.rpt.v_local_time", only="south"),
         step("Resume the paused jobs; they pick up the paused period in one run."),
         step("bed_occupancy_snapshot is keyed on UTC and needs no action.")],
        [step("No duplicate keys reported by dq_referential_checks for the changeover night."),
         step("The number of results between 01:00 and 04:00 is plausible against the same night a week earlier.")],
        [step("The clean-up can be re-run; it only touches rows of the changeover night.")],
        [step("Do not shift timestamps by hand; every manual shift so far created a second error.")],
        {"north": {"background": "HelixLab and CareLedger record local wall-clock time without an offset, as they "
                                 "have since they went live. Twice a year this breaks: in spring the hour from 02:00 "
                                 "to 03:00 does not exist, and in autumn it happens twice, so that two results drawn "
                                 "an hour apart carry the same timestamp and a load keyed on time sees duplicates."},
         "south": {"background": "LabSphere and MedArchive record UTC, and the warehouse keeps UTC, so the data itself "
                                 "is safe. The risk lies in schedules: a job scheduled in local time at 02:xx is "
                                 "skipped in spring and runs twice in autumn, and reports that show local time must "
                                 "convert correctly on both sides of the change."}},
    ),
    Runbook(
        "dictionary-release", "Lab dictionary release and unit migration", "lab", ("clinical", "ops"),
        "Move the warehouse, the range checks and the registries to a new release of the {lab} field dictionary "
        "when units, types or valid ranges change.",
        "The laboratory owns the field dictionary of {lab}: the name, type, unit, meaning and valid range of every "
        "result field. A new release is published when the laboratory changes methods or units, or when a vendor "
        "upgrade changes what {lab} reports. The warehouse has to follow, because every consumer of lab data "
        "(registries, quality reports, range checks and research snapshots) depends on the unit being right. The "
        "last release, {release}, changed the units of {changed} fields.",
        ["The laboratory announces a new dictionary release.", "A vendor upgrade changes reported units."],
        ["The release notes of the new dictionary and the cutover date."],
        [step("Read the release notes of {release} and list every field whose unit, type or valid range changed."),
         step("From the cutover date, {cutover}, {lab} reports the new units. The warehouse keeps the value as "
              "received in value_orig and the value in the current unit in {value_col}.",
              "Which warehouse column holds lab values converted to the current unit?", "{value_col}"),
         step("Convert historical values with these factors: {factors}.",
              "{factor_q}", "{factor_a}"),
         step("Range checks: dq_lab_ranges uses the valid range of the dictionary release in force on each "
              "result's collection date, so results before {cutover} are checked against the old ranges."),
         step("Run a dual-reporting period of {dual}: {lab} prints both units on reports and the laboratory checks 50 "
              "random pairs per day.",
              "How long is the dual-reporting period when lab units change?", "{dual}"),
         step("Update registry and cohort thresholds; {threshold}."),
         step("Publish the analyst view {view}, which shows all results in the current units.",
              "Which warehouse view shows all lab results in the current units?", "{view}"),
         step("Mark the old dictionary pages deprecated and keep them online for {keep}, so that old extracts stay "
              "readable.")],
        [step("Thirty random results per changed field agree between value_orig and {value_col} after conversion.")],
        [step("If the cutover is postponed, the conversion view is dropped and re-created later; value_orig is never "
              "changed.")],
        [step("Feeds that bypass the main interface (legacy channels, point-of-care devices) often keep the old unit; "
              "the range checks catch them as alert storms.")],
        {"north": {"release": "HelixLab dictionary version 4", "cutover": "2023-03-06", "value_col": "value_si",
                   "dual": "30 days", "threshold": "the diabetes registry moved from HbA1c 6.5 % to 48 mmol/mol",
                   "view": "ndw.v_lab_result_si", "keep": "10 years",
                   "factor_q": "What factor converts creatinine from mg/dL to µmol/L?",
                   "factor_a": "multiply by 88.4"},
         "south": {"release": "LabSphere release 11", "cutover": "2024-02-19", "value_col": "value_conv",
                   "dual": "14 days", "threshold": "sepsis screening moved from lactate 2.0 mmol/L to 18 mg/dL",
                   "view": "sdw.lab.v_result_conventional", "keep": "7 years",
                   "factor_q": "What factor converts lactate from mmol/L to mg/dL?", "factor_a": "multiply by 9.01"}},
    ),
    Runbook(
        "patient-merge", "Patient record merges and unmerges", "emr", ("ops",),
        "Keep results, encounters and registries consistent when {emr} merges two patient records, or when a wrong "
        "merge is undone.",
        "A patient registered twice gets two MRNs. When Health Information Management (HIM) finds the duplicate, "
        "{emr} merges the records: one MRN survives, the other is retired, and all encounters move to the survivor. "
        "Results and encounters already in the warehouse still carry the retired MRN. Wrong merges happen too, "
        "usually between relatives with similar names and the same birth date, and must be undone quickly, because "
        "the results of one person then appear in the history of another.",
        ["{emr} merged two records.", "Health Information Management (HIM) requests an unmerge."],
        ["The retired and the surviving MRN."],
        [step("{signal}"),
         step("The warehouse never rewrites history: it records the merge in {xref}, and the views resolve every "
              "retired MRN to the surviving one.",
              "Where does the warehouse record patient merges?", "{xref}"),
         step("Registry extracts built before the merge may count the patient twice; re-run "
              "registry_diabetes_extract when the merge date falls inside its period."),
         step("An unmerge (two different patients merged by mistake) is requested by HIM with a ticket, which must "
              "reach the data team within {unmerge_days} of the merge.",
              "Within how long after a merge must an unmerge request reach the data team?", "{unmerge_days}"),
         step("Apply the unmerge with `{unmerge}`; it splits results and encounters by the original MRN recorded at "
              "load time.",
              "What command applies a patient unmerge in the warehouse?", "{unmerge}"),
         step("Tell {team_registry} which study extracts included the wrongly merged patient. Research snapshots are "
              "corrected in the next release, never patched.")],
        [step("The retired MRN has no rows of its own in the current-patient views.")],
        [step("An unmerge can be reverted by merging again; the cross-reference keeps the full history.")],
        [step("Unmerges older than the limit need the privacy office, because results may have reached studies.")],
        {"north": {"signal": "CareLedger sends an HL7 ADT^A40 (merge patient) message listing the surviving and the "
                             "retired MRN.",
                   "xref": "ndw.patient_xref", "unmerge_days": "5 working days",
                   "unmerge": "CALL ndw.apply_unmerge('<retired MRN>', '<surviving MRN>')"},
         "south": {"signal": "MedArchive marks the retired Patient resource with a link of type replaced-by that "
                             "points at the surviving one.",
                   "xref": "sdw.emr.patient_link", "unmerge_days": "10 working days",
                   "unmerge": "EXEC emr.usp_apply_unmerge @retired_mrn, @surviving_mrn"}},
    ),
    Runbook(
        "range-alert-triage", "Triage of lab range alerts", "quality", ("clinical", "ops"),
        "Find out why lab values fail the valid-range checks, fix the cause, and release or discard the "
        "quarantined values.",
        "dq_lab_ranges checks every loaded lab value against the valid range in the field dictionary release in "
        "force for it. Valid ranges are plausibility limits, much wider than clinical reference intervals: a value "
        "outside them is almost certainly an error of unit, device or interface, not a very sick patient. A single "
        "failing value is usually a typing error that the laboratory corrects within the hour; dozens of failures "
        "in the same field within an hour point at a systematic cause.",
        ["dq_lab_ranges posts an alert in {dq_channel}.", "The on-call is paged for an alert storm."],
        ["Read access to the quarantine table and the field dictionary."],
        [step("dq_lab_ranges posts every failure in {dq_channel}, but pages the on-call only when more than "
              "{page_at} fail within one hour.",
              "How many out-of-range lab values within an hour make dq_lab_ranges page the on-call?", "{page_at}"),
         step("Failed values are not lost: they move to {quarantine}, with the batch identifier and the check that "
              "failed.",
              "Where are lab values that fail the range check kept?", "{quarantine}"),
         step("Triage in this order. First look for a unit mismatch: most alert storms come from a feed or device "
              "sending an old unit, so compare the values with the deprecated dictionary page. Second, an analyser "
              "problem: ask the laboratory QC lead (extension {qc_ext}) whether an analyser was recalibrated. Third, "
              "an interface mapping error after an upgrade.",
              "What is checked first when lab range alerts pile up?", "a unit mismatch"),
         step("Never widen a valid range to silence alerts. Ranges belong to the laboratory and change only with a "
              "dictionary release."),
         step("Once the cause is fixed, correct the values if needed and release the batch with `{release}`.",
              "What command releases a batch of quarantined lab values?", "{release}"),
         step("Values that are truly implausible stay in quarantine and are purged after {purge}.",
              "After how long are quarantined lab values that were never released purged?", "{purge}")],
        [step("The released batch appears in the warehouse and dq_lab_ranges passes on its next run.")],
        [step("A released batch can be re-quarantined by its batch identifier.")],
        [step("An analyser recalibration can shift a whole day of values slightly without failing any range; "
              "range checks do not catch drift.")],
        {"north": {"page_at": "50 values", "quarantine": "ndw.quarantine_lab", "qc_ext": "5133",
                   "release": "CALL ndw.release_quarantine(<batch_id>)", "purge": "90 days"},
         "south": {"page_at": "25 values", "quarantine": "sdw.dq.quarantine_lab", "qc_ext": "2207",
                   "release": "EXEC dq.usp_release_quarantine @batch_id", "purge": "60 days"}},
    ),
    Runbook(
        "storage-full", "Warehouse storage running full", "reference", ("ops",),
        "Free space in the {warehouse} before loads fail, and get more storage when purging is not enough.",
        "{background} When staging fills up, loads fail while their extracts succeed, so the data waits in the "
        "sources and nothing is lost as long as the space is freed within a day.",
        ["The storage alert fires.", "Loads fail with no space left on device or a full filegroup."],
        ["Administrator access to the warehouse."],
        [step("The storage alert fires at {alert} use of {volume}.",
              "At what usage does the warehouse storage alert fire?", "{alert}"),
         step("First purge staging data older than {keep}: `{purge}`. This frees the most space and is always safe.",
              "Which command purges old staging data when the warehouse storage runs full?", "{purge}"),
         step("{never}", "What must never be done when the warehouse storage runs full?", "{never_a}"),
         step("If usage is still above the alert level, request more storage from {team_reference} with a {ticket} "
              "ticket of type STORAGE; expect {lead}.",
              "How long does an extension of the warehouse storage take?", "{lead}"),
         step("Until the extension, pause the largest non-clinical loads: deid_research_snapshot, "
              "quality_readmission_metrics and bed_occupancy_snapshot."),
         step("After the extension, resume the paused jobs and clear the failed loads.")],
        [step("Usage is below the alert level and the failed loads have caught up.")],
        [step("Purged staging data is re-created by the next load; nothing needs restoring.")],
        [step("A long backfill can fill staging within hours; check the backfill plan before purging.")],
        {"north": {"background": "The NDW cluster keeps its data, its staging tables and its write-ahead log on "
                                 "separate volumes. Staging holds the raw extracts of every load until they are "
                                 "purged; the write-ahead log feeds the standby ndw-pg02 and is never touched by hand.",
                   "alert": "85%", "volume": "the staging tablespace ts_staging (/pgdata/staging)", "keep": "7 days",
                   "purge": "CALL ndw.purge_staging(7)",
                   "never": "Never delete files under /pgdata/wal by hand: removing write-ahead log files corrupts the "
                            "cluster and breaks the standby.",
                   "never_a": "delete files under /pgdata/wal", "lead": "4 hours"},
         "south": {"background": "SDW keeps its staging tables in the filegroup FG_STAGING on a volume of its own, "
                                 "apart from the data filegroups and the transaction log, which the availability group "
                                 "replicates to sdw-sql03.",
                   "alert": "80%", "volume": "the filegroup FG_STAGING", "keep": "5 days",
                   "purge": "EXEC admin.usp_purge_staging @days = 5",
                   "never": "Never shrink database files during business hours (07:00 to 19:00): a shrink fragments "
                            "the indexes and blocks loads for hours.",
                   "never_a": "shrink database files during business hours", "lead": "1 working day"}},
    ),
    Runbook(
        "month-end-close", "Month-end billing close", "billing", ("finance", "ops"),
        "Deliver complete, reconciled charge and claim data for the month-end financial close, and keep the closed "
        "period stable.",
        "At month end the finance office closes the books: it reconciles charges and claims, posts corrections and "
        "reports the month's revenue. The warehouse delivers the charge and claim data for that close, so for a few "
        "days the billing data must be complete, reconciled and unchanging. Everything in this runbook serves that: "
        "a cut-off that decides which period a charge belongs to, a freeze that stops changes, and a sign-off after "
        "which the period is closed.",
        ["The last working day of each month."],
        ["The close ticket opened by the finance office."],
        [step("The close freeze runs from {freeze_start} to {freeze_end}.",
              "When does the month-end billing freeze start?", "{freeze_start}"),
         step("During the freeze: no deployments to billing jobs, no schema changes in {schema}, and no backfills of "
              "charge data."),
         step("billing_charges_daily runs in close mode ({close_flag}), which also writes the period totals the "
              "finance office signs off.",
              "Which option runs billing_charges_daily in close mode?", "{close_flag}"),
         step("The ledger cut-off is {cutoff}; charges posted later belong to the next period.",
              "What is the ledger cut-off at month end?", "{cutoff}"),
         step("Reconciliation: the warehouse totals must match the ledger within {tolerance}; a larger difference "
              "goes to {team_billing} before sign-off.",
              "Within what tolerance must month-end charge totals match the ledger?", "{tolerance}"),
         step("Sign-off is given by {signoff} in the close ticket; only then are the period's claim and charge "
              "tables marked closed.",
              "Who signs off the month-end billing close?", "{signoff}"),
         step("Corrections after sign-off are posted to the next period, never to the closed one.")],
        [step("The period totals in the warehouse equal the signed-off totals.")],
        [step("A closed period is reopened only by the finance office, in writing.")],
        [step("Claims exports run during the freeze as usual; only charges are frozen.")],
        {"north": {"freeze_start": "18:00 on the last working day of the month",
                   "freeze_end": "12:00 on the third working day", "schema": "the ndw tables bill_*",
                   "close_flag": "close_mode=true", "cutoff": "23:00 on the last day of the month",
                   "tolerance": "0.01%", "signoff": "the Finance BI lead"},
         "south": {"freeze_start": "20:00 on the last calendar day of the month",
                   "freeze_end": "10:00 on the second working day", "schema": "sdw.billing",
                   "close_flag": "--tags close=true", "cutoff": "18:00 on the last day of the month",
                   "tolerance": "0.05%", "signoff": "the revenue cycle director"}},
    ),
    Runbook(
        "warehouse-failover", "Warehouse failover to the standby", "reference", ("ops",),
        "Restore the {warehouse} on its standby when the primary is lost, within the agreed recovery objectives.",
        "{background} A failover is rare and disruptive: all loads stop while it runs and every report refreshes "
        "afterwards. Most outages of the primary are shorter than the decision time below, which is why waiting is "
        "usually the right call.",
        ["The primary warehouse is down and cannot be restored quickly.", "The data centre hosting it is lost."],
        ["The incident commander's decision to fail over, recorded in the ticket."],
        [step("Targets: at most {rpo} of data loss (RPO) and service restored within {rto} (RTO).",
              "What is the recovery point objective of the warehouse?", "{rpo}"),
         step("Fail over only when the primary cannot be restored within {decide}; the incident commander decides.",
              "How long may restoring the primary warehouse take before a failover is decided?", "{decide}"),
         step("Pause all jobs in {scheduler} before promoting; they resume from their last watermark afterwards."),
         step("{promote}", "What command promotes the standby warehouse?", "{promote_cmd}"),
         step("Jobs and reports connect through {alias}; {alias_how}, so no configuration changes.",
              "Which name do jobs use to reach the warehouse, so that a failover needs no configuration change?",
              "{alias}"),
         step("Resume the jobs, then rebuild the old primary as the new standby. Do not fail back during the day.")],
        [step("Each job's next run succeeds and the dashboards show current data."),
         step("Replication to the rebuilt standby is healthy before the incident is closed.")],
        [step("Failing back is a planned change, outside business hours, with the same steps in reverse.")],
        [step("Jobs that cached a host name instead of the alias keep failing until restarted.")],
        {"north": {"background": "NDW runs on a Patroni-managed PostgreSQL cluster: the primary ndw-pg01 streams its "
                                 "write-ahead log to the standby ndw-pg02 in the second data centre.",
                   "rpo": "15 minutes", "rto": "4 hours", "decide": "1 hour",
                   "promote": "Promote the standby ndw-pg02 with `patronictl failover ndw --candidate ndw-pg02`.",
                   "promote_cmd": "patronictl failover ndw --candidate ndw-pg02", "alias": "ndw.north.local",
                   "alias_how": "Patroni moves the alias to the new primary within a minute"},
         "south": {"background": "SDW runs in the SQL Server availability group AG-SDW: the primary sdw-sql02 "
                                 "replicates synchronously to the secondary sdw-sql03 in the second data centre.",
                   "rpo": "5 minutes", "rto": "2 hours", "decide": "30 minutes",
                   "promote": "On the secondary sdw-sql03, run `ALTER AVAILABILITY GROUP [AG-SDW] FAILOVER;`.",
                   "promote_cmd": "ALTER AVAILABILITY GROUP [AG-SDW] FAILOVER;", "alias": "sdw-listener.south.local",
                   "alias_how": "the availability group listener follows the primary by itself"}},
    ),
    Runbook(
        "incident-severity", "Data incident severity and communication", "group", (),
        "Give every data incident in the group the same severity, response times and communication, whichever "
        "hospital it happens in.",
        "Both hospitals classify data incidents the same way, so that group management compares like with like and "
        "on-call staff who move between the hospitals learn one scheme only. The severity decides how fast someone "
        "responds, how often users hear about progress, and whether a review follows.",
        ["Any failure that makes data missing, late or wrong for its users."],
        ["Access to the incident ticket queue of your hospital."],
        [step("Severity 1: clinical data (lab results, vital signs, medication administrations) missing or wrong on "
              "clinical dashboards for more than 4 hours, or any suspected exposure of patient data.",
              "When does missing clinical data become a severity 1 data incident?", "for more than 4 hours"),
         step("Severity 2: clinical data delayed by up to 4 hours, or finance and registry data missing for more than "
              "one working day."),
         step("Severity 3: everything else, including failures that retries fixed."),
         step("Response times: severity 1 within 15 minutes around the clock; severity 2 within 1 hour during team "
              "hours; severity 3 on the next working day.",
              "How quickly must a severity 2 data incident get a response?", "within 1 hour during team hours"),
         step("Updates every 30 minutes for severity 1 and 2, in the ticket and in the on-call channel."),
         step("A post-incident review within 5 working days for every severity 1, and for severity 2 incidents that "
              "recur within 30 days.",
              "When does a severity 2 data incident need a post-incident review?", "recur within 30 days")],
        [step("Every incident ticket states its severity and the time of the first response.")],
        [step("A severity can be lowered only by the incident commander, with a reason in the ticket.")],
        [step("Do not wait for certainty before declaring severity 1 for a suspected exposure.")],
        {"shared": {}},
    ),
    Runbook(
        "research-release", "Releasing a de-identified research dataset", "group", ("clinical", "ops"),
        "Release patient-level data for approved research without identifying any patient.",
        "Researchers of both hospitals receive patient-level data only in de-identified form and only inside "
        "ResearchVault. De-identification removes direct identifiers, shifts dates, generalises quasi-identifiers "
        "such as the birth date and the postcode until every combination is shared by enough patients, and drops "
        "free text, which cannot be de-identified reliably.",
        ["An approved study requests data."],
        ["The ethics approval number and the signed data use agreement, both in the ticket."],
        [step("Check the approval: without an ethics approval number and a signed data use agreement in the ticket, "
              "nothing is released."),
         step("Choose the profile: research-standard (k = 5, birth month and year, 3-digit postcode) or "
              "research-strict (k = 11, birth year only, no postcode).",
              "What k-anonymity level does the research-strict profile enforce?", "k = 11"),
         step("Dates are shifted per patient by a random number of days between 1 and 364, the same shift for all of "
              "a patient's records, so that intervals stay exact.",
              "How far are dates shifted in a de-identified research dataset?", "between 1 and 364"),
         step("Free text (result comments, discharge letters) is never released."),
         step("Run the hospital's deid_research_snapshot job with the chosen profile; it refuses to write when the "
              "k-anonymity check fails."),
         step("Release through ResearchVault, the secure enclave; files never leave it, and access expires at the "
              "end of the approved study period.",
              "Through which system are research datasets released?", "ResearchVault"),
         step("Keep the release manifest for 10 years.")],
        [step("The k-anonymity report of the release is attached to the ticket.")],
        [step("A release is withdrawn by revoking the study's ResearchVault workspace.")],
        [step("Combining two releases of the same study can re-identify patients; each study gets one shift table.")],
        {"shared": {}},
    ),
    Runbook(
        "access-request", "Processing a data access request", "group", (),
        "Grant staff the narrowest access their work needs, with the right approvals, and take it away again when "
        "the need ends.",
        "Access to data follows two rules: the hospital separation policy (staff see their own hospital's data) and "
        "the scopes: clinical (results, diagnoses, vital signs), ops (jobs, runbooks, known errors and other "
        "technical documentation) and finance (charges, claims, payers). A scope is granted per hospital.",
        ["An ACCESS ticket arrives."],
        ["The request states the dataset, the purpose and the scope needed (clinical, ops or finance)."],
        [step("Requests arrive as ACCESS tickets stating the dataset, the purpose and the scope."),
         step("The data owner approves; for the clinical scope the privacy office approves as well.",
              "Besides the data owner, who must approve a request for the clinical scope?", "the privacy office"),
         step("Finance scope requests need the approval of the CFO office."),
         step("Grant access through the directory groups DATA-<HOSPITAL>-<SCOPE>, for example DATA-NORTH-CLINICAL "
              "or DATA-SOUTH-FINANCE; never grant tables directly.",
              "Through which directory group is South's finance scope granted?", "DATA-SOUTH-FINANCE"),
         step("Complete the request within 5 working days of the last approval."),
         step("Access is recertified every 180 days; access that is not confirmed is removed automatically.",
              "How often is data access recertified?", "every 180 days")],
        [step("The user sees the approved datasets and nothing else; test with the user before closing.")],
        [step("Remove the user from the directory group; access ends within one hour.")],
        [step("Cross-hospital access is never granted at row level; the group receives aggregated reports only.")],
        {"shared": {}},
    ),
    Runbook(
        "data-leak-response", "Suspected data leak response", "group", ("ops",),
        "Contain a suspected exposure of patient or finance data, preserve the evidence and let the privacy officer "
        "decide on notification.",
        "A suspected leak is any sign that patient or finance data reached someone not entitled to it: a file on an "
        "open share, a report sent to the wrong list, a user who sees data of the other hospital or of a scope they "
        "do not hold. Speed matters more than certainty: the first hour decides whether the exposure can be "
        "contained.",
        ["Data found where it should not be (a share, a mailbox, a public repository).",
         "A user reports seeing data of the other hospital or of a scope they do not hold."],
        ["Nothing: start at once, even out of hours."],
        [step("Within 1 hour, tell the privacy officer (privacy@group.local, phone 1999).",
              "How soon must the privacy officer be told about a suspected data leak?", "Within 1 hour"),
         step("Preserve the evidence: do not delete the exposed files or logs; copy them to the evidence share first."),
         step("Contain: revoke the tokens, shares or accounts involved, and stop the job that produced the data."),
         step("Declare a severity 1 incident, as the incident severity runbook requires."),
         step("The privacy officer decides within 72 hours whether the regulator must be notified.",
              "Within how many hours is the decision on notifying the regulator made?", "72 hours"),
         step("Find the root cause together with the owning team; permission filters and scope mappings are checked "
              "first.")],
        [step("The exposed copy is gone and the access logs show who saw it.")],
        [step("Revoked access is restored only after the root cause is fixed.")],
        [step("Telling the users involved before the privacy officer can destroy evidence.")],
        {"shared": {}},
    ),
]  # fmt: skip
GROUP_TEAM = Team("Group Data Office", "group-wide data policies and shared runbooks", "#group-data-office",
                  "08:00-17:00 on weekdays", "Aisha Karimi", "the group duty manager, through the switchboard")  # fmt: skip


@dataclass(frozen=True)
class Policy:
    slug: str
    title: str
    tenant: Tenant | None  # None: a group policy, shared by both hospitals
    scopes: tuple[str, ...]
    owner: str
    purpose: str
    sections: list[tuple[str, list[Step]]]


POLICIES = [
    Policy("data-classification", "Data classification standard", None, (), "Group Data Office",
           "Give all data of the group one of four levels, so that everyone handles it the same way.", [
        ("Levels", [
            step("Public: approved for publication, for example yearly activity figures."),
            step("Internal: operational information without patient or staff identity, for example job schedules, "
                 "runbooks and field dictionaries."),
            step("Confidential: aggregated patient data with small cells suppressed, and finance data without "
                 "patient identity."),
            step("Restricted: patient-level data (anything with an MRN, a name, a birth date or free text) and "
                 "patient-level finance data.",
                 "Which classification level applies to patient-level data?", "Restricted")]),
        ("Handling", [
            step("Restricted data stays inside the warehouse, ResearchVault or the clinical systems. It is never "
                 "sent by e-mail, not even inside the group."),
            step("Confidential data may be shared inside the group through the reporting portal."),
            step("A derived dataset takes the highest level of its inputs, unless it was aggregated and suppressed "
                 "under the small cell rule.",
                 "Which classification does a derived dataset get?", "the highest level of its inputs")]),
    ]),
    Policy("small-cell-rule", "Small cell suppression rule", None, (), "Group Data Office",
           "Prevent the identification of patients from small counts in published tables.", [
        ("Rule", [
            step("In any report that leaves the data team, counts from 1 to 10 are suppressed and shown as <11.",
                 "Which counts are suppressed in reports that leave the data team?", "counts from 1 to 10"),
            step("Secondary suppression: when a suppressed cell could be recovered from the row or column totals, "
                 "also suppress the next smallest cell of that row or column."),
            step("Zero counts are shown unless they reveal a suppressed neighbour."),
            step("Rates whose denominator is below 30 are not published.",
                 "Below which denominator are rates not published?", "below 30")]),
        ("Scope", [
            step("The rule covers group reports, registry feedback to wards, and every export to external bodies. It "
                 "does not cover data inside ResearchVault, which has its own k-anonymity checks.")]),
    ]),
    Policy("retention-schedule", "Data retention schedule", None, (), "Group Data Office",
           "State how long each kind of data is kept, so that data is neither lost too early nor kept too long.", [
        ("Periods", [
            step("Raw HL7 messages as received by the interface engines: 90 days."),
            step("Warehouse staging tables: 7 days, unless a hospital addendum sets another period."),
            step("Laboratory results and encounters in the warehouse: 30 years after the last encounter."),
            step("Job logs: 400 days.", "How long are job logs kept?", "400 days"),
            step("Audit logs of warehouse access: 6 years."),
            step("Research release manifests: 10 years.")]),
        ("Deletion", [
            step("Deletion is automatic and logged. Legal holds, set by the privacy office, suspend deletion for the "
                 "data they name.",
                 "What suspends the automatic deletion of data?", "Legal holds")]),
    ]),
    Policy("hospital-separation", "Hospital data separation policy", None, (), "Group Data Office",
           "Keep the patient data of each hospital within that hospital, while allowing group reporting.", [
        ("Rule", [
            step("Staff of one hospital see the patient-level data of that hospital only; the hospital is taken from "
                 "the user's home hospital in the directory."),
            step("Group reports combine the hospitals only as aggregates that follow the small cell rule."),
            step("The data-asset assistant applies the same rule: it answers from documents of the asker's hospital, "
                 "shared group documents, and documents of the scopes the asker holds."),
            step("Staff who work in both hospitals hold two accounts, one per hospital, which are never merged.",
                 "How is access arranged for staff who work in both hospitals?", "two accounts, one per hospital")]),
    ]),
    Policy("finance-data-access", "Finance data access policy", None, ("finance",), "Group finance office",
           "Protect charge, claim and payer data, which is commercially sensitive and often identifies patients.", [
        ("Rule", [
            step("Charges, claims, payer data and cost centres are visible only with the finance scope."),
            step("Patient-level finance data never enters research snapshots."),
            step("Exports of finance data outside the finance office need the approval of the CFO office.",
                 "Who must approve exports of finance data outside the finance office?", "the CFO office"),
            step("Finance users see clinical data only as the diagnosis-related group and the length of stay of a "
                 "case; result values are out of their scope.")]),
    ]),
    Policy("break-glass", "Break-glass access", None, ("clinical",), "Privacy office",
           "Allow clinicians emergency access to restricted records while keeping every such access accountable.", [
        ("Rule", [
            step("Break-glass access lets a clinician open a restricted record in an emergency without prior "
                 "approval."),
            step("Every use must be justified in writing within 24 hours.",
                 "Within how long must a break-glass access be justified?", "within 24 hours"),
            step("The privacy office reviews every use weekly; unjustified use is reported to the line manager."),
            step("Break-glass exists in the clinical systems only, never in the warehouse, which has no emergency "
                 "access.")]),
    ]),
    Policy("assistant-use", "Using the data-asset assistant", None, (), "Group Data Office",
           "Explain what the data-asset assistant is for, and what must never be entered into it.", [
        ("Do", [
            step("Ask about data assets: fields, jobs, runbooks and policies. The assistant cites the documents it "
                 "used; check them before acting on an answer."),
            step("If an answer seems to be missing, your scopes may not cover it: request access with an ACCESS "
                 "ticket.")]),
        ("Do not", [
            step("Never paste patient identifiers (MRNs, names, birth dates) into the assistant; ask about fields, "
                 "not about patients.",
                 "What must never be pasted into the data-asset assistant?", "patient identifiers"),
            step("Do not use the assistant's answers as clinical advice.")]),
        ("Feedback", [
            step("Report a wrong answer with the thumbs-down button; the Group Data Office reviews them weekly.")]),
    ]),
    Policy("audit-review", "Audit log review", None, ("ops",), "Privacy office",
           "Detect misuse of warehouse access early.", [
        ("Rule", [
            step("Warehouse access logs are reviewed weekly by the privacy office together with the platform teams."),
            step("Ad-hoc queries returning more than 10000 patient rows are flagged automatically.",
                 "How many patient rows must an ad-hoc query return to be flagged in the audit?", "more than 10000"),
            step("Audit logs are read-only for everybody, platform administrators included.")]),
    ]),
    Policy("retention-addendum", "North Hospital retention addendum", NORTH, (), "North Hospital data protection",
           "Record where North Hospital keeps data longer or shorter than the group retention schedule.", [
        ("Deviations from the group schedule", [
            step("Raw HL7 lab messages are kept for 180 days instead of 90, because the laboratory accreditation "
                 "requires re-processing up to six months back."),
            step("Warehouse staging tables: 7 days, as in the group schedule."),
            step("Point-of-care device logs are kept for 2 years.")]),
    ]),
    Policy("retention-addendum", "South Hospital retention addendum", SOUTH, (), "South Hospital data protection",
           "Record where South Hospital keeps data longer or shorter than the group retention schedule.", [
        ("Deviations from the group schedule", [
            step("Warehouse staging tables are kept for 5 days instead of 7, because of the size of the FG_STAGING "
                 "filegroup."),
            step("Raw HL7 messages: 90 days, as in the group schedule."),
            step("FHIR bulk export files are deleted after a successful load, and after 14 days at the latest.")]),
    ]),
    Policy("data-owners", "North Hospital data owners", NORTH, (), "North Hospital data protection",
           "Name the people accountable for each body of North Hospital data.", [
        ("Owners", [
            step("Laboratory data (HelixLab): the head of laboratory medicine, Dr. Kai Nyberg.",
                 "Who owns the laboratory data?", "Dr. Kai Nyberg"),
            step("Records data (CareLedger): the director of Health Information Management, Ruth Adeyemi."),
            step("Finance data: the finance director, Olaf Petersen."),
            step("Warehouse platform: Priya Raman, Warehouse Platform.")]),
        ("Duties", [
            step("Data owners approve access requests and dictionary releases for their data.")]),
    ]),
    Policy("data-owners", "South Hospital data owners", SOUTH, (), "South Hospital data protection",
           "Name the people accountable for each body of South Hospital data.", [
        ("Owners", [
            step("Laboratory data (LabSphere): the laboratory director, Dr. Amara Quist.",
                 "Who owns the laboratory data?", "Dr. Amara Quist"),
            step("Records data (MedArchive): the HIM director, Peter Lindgren."),
            step("Finance data: the revenue cycle director, Monica Reyes."),
            step("Warehouse platform: Helen Zhou, Platform Operations.")]),
        ("Duties", [
            step("Data owners approve access requests and dictionary releases for their data.")]),
    ]),
]  # fmt: skip

GLOSSARY = [
    ("LIS", "Laboratory information system: the system in which the laboratory receives orders, records results and "
            "verifies them. North runs HelixLab, South runs LabSphere."),
    ("Records system", "The electronic medical record: encounters, diagnoses, vital signs and medication. North runs "
                       "CareLedger, South runs MedArchive."),
    ("HL7 ORU^R01", "The HL7 version 2 message that carries observation results, such as lab results, from the "
                    "laboratory system to other systems."),
    ("HL7 ADT^A40", "The HL7 version 2 message that tells other systems that two patient records were merged."),
    ("FHIR bulk export", "The FHIR $export operation: an asynchronous export of many resources at once, polled "
                         "through a status URL until the files are ready."),
    ("LOINC", "Logical Observation Identifiers Names and Codes, the code system for laboratory tests and "
              "observations. The field dictionaries map each result field to a LOINC code."),
    ("ICD-10", "The international classification of diseases. North codes with the German modification "
               "(ICD-10-GM, with the dot), South with the clinical modification (ICD-10-CM, stored without the dot)."),
    ("DRG", "Diagnosis-related group: the case group that determines the payment for an inpatient stay. North uses "
            "G-DRG, South uses MS-DRG."),
    ("MRN", "Medical record number, the identifier of a patient within one hospital."),
    ("SI and conventional units", "SI units express concentrations per litre in moles where possible (mmol/L, "
                                  "µmol/L); conventional units use mass per decilitre (mg/dL, g/dL). North stores SI "
                                  "units, South conventional units."),
    ("FEU", "Fibrinogen-equivalent units, the reporting basis of a D-dimer result; FEU values are about twice the "
            "D-dimer units (DDU) of the same sample."),
    ("eGFR", "Estimated glomerular filtration rate, a measure of kidney function calculated from creatinine, age "
             "and sex."),
    ("Point-of-care testing", "Tests performed at the bedside with portable devices, such as glucometers, outside "
                              "the core laboratory."),
    ("Hemolysis", "The breakdown of red cells in a blood sample, which falsely raises potassium and some other "
                  "results."),
    ("RPO and RTO", "Recovery point objective: the most data, in time, that a failure may lose. Recovery time "
                    "objective: the longest a service may be down."),
    ("k-anonymity", "A dataset is k-anonymous when every combination of identifying attributes is shared by at "
                    "least k records."),
    ("Date shifting", "De-identification by moving all dates of a patient by the same random number of days."),
    ("Quarantine", "Where values that fail a data quality check wait until they are corrected and released, or "
                   "purged."),
    ("Watermark", "The last loaded position (a time or a sequence number) from which an incremental job continues."),
    ("Upsert", "Insert a row, or update it when a row with the same key exists."),
    ("Keytab", "A file holding the Kerberos keys of a service account, used to authenticate without a password."),
    ("gMSA", "Group managed service account: a Windows domain account whose password the domain rotates itself."),
]


@dataclass(frozen=True)
class Page:
    """A page both hospitals keep, with the same sections and different values."""

    kind: str
    slug: str
    title: str
    scopes: tuple[str, ...]
    purpose: str
    sections: list[tuple[str, list[Step]]]  # templates over the hospital's values below and its team names
    values: dict[str, dict[str, str]]


COHORT_REVIEW = [
    step("The definition is applied to the full history at every refresh, so a change takes effect backwards too."),
    step("Owner: {team_registry}. Changes need the approval of the clinical lead of the report and are announced a "
         "month ahead to the wards that receive it."),
]


def cohort(slug: str, title: str, purpose: str, sections: list, values: dict[str, dict[str, str]]) -> Page:
    return Page("cohort", slug, title, ("clinical",), purpose, [*sections, ("Refresh and review", COHORT_REVIEW)], values)


COHORTS = [
    cohort("diabetes-registry", "Diabetes registry definition",
           "Which patients the diabetes registry counts, built weekly or monthly by registry_diabetes_extract.", [
               ("Inclusion", [step("A patient is included with an HbA1c of {hba1c}, or a fasting glucose (LAB_GLU_FAST) "
                                   "of {glu} on two separate days, or a coded diagnosis {codes}.",
                                   "What HbA1c value qualifies a patient for the diabetes registry?", "{hba1c}")]),
               ("Exclusion", [step("Random glucose (LAB_GLU_RAND) and point-of-care glucose (LAB_GLU_POC) never "
                                   "qualify a patient on their own."),
                              step("Gestational diabetes ({gest}) is reported separately.")]),
               ("Sources", [step("LAB_HBA1C and LAB_GLU_FAST from lab_chem_ingest; DIAG_CD from "
                                 "diagnosis_coding_nightly.")])],
           {"north": {"hba1c": "48 mmol/mol or more", "glu": "7.0 mmol/L or more", "codes": "E10 to E14",
                      "gest": "O24.4"},
            "south": {"hba1c": "6.5 % or more", "glu": "126 mg/dL or more", "codes": "E08 to E13",
                      "gest": "O244"}}),
    cohort("aki-cohort", "Acute kidney injury cohort definition",
           "Which admissions count as acute kidney injury in the kidney quality report.", [
               ("Criteria", [step("Acute kidney injury: a creatinine rise of {rise} within 48 hours, or a rise to 1.5 "
                                  "times the baseline within 7 days.",
                                  "What creatinine rise within 48 hours defines acute kidney injury?", "{rise}"),
                             step("Baseline: {baseline}.", "How is the creatinine baseline defined for the acute "
                                  "kidney injury cohort?", "{baseline}")]),
               ("Exclusion", [step("Patients on chronic dialysis, identified by the procedure codes of the dialysis "
                                   "unit.")])],
           {"north": {"rise": "26.5 µmol/L or more", "baseline": "the lowest LAB_CREAT of the previous 90 days"},
            "south": {"rise": "0.3 mg/dL or more", "baseline": "the median LAB_CREAT of the previous 365 days"}}),
    cohort("sepsis-screen", "Sepsis screening report definition",
           "Which encounters the daily sepsis screening report lists for review by the sepsis team.", [
               ("Criteria", [step("An encounter is listed when lactate is above {lactate} and a blood culture was "
                                  "ordered within 6 hours.",
                                  "Above which lactate value does the sepsis screening report list an encounter?",
                                  "{lactate}"),
                             step("Procalcitonin of {pct} or more raises the priority of the listing.")]),
               ("Sources", [step("LAB_LACT from {lact_job}; cultures from micro_culture_ingest.")])],
           {"north": {"lactate": "2.0 mmol/L", "pct": "0.5 µg/L", "lact_job": "blood_gas_ingest"},
            "south": {"lactate": "18 mg/dL", "pct": "0.5 ng/mL", "lact_job": "lab_chem_ingest"}}),
    cohort("anemia-report", "Anemia report definition",
           "Which inpatients the monthly anemia report counts.", [
               ("Criteria", [step("Anemia: hemoglobin below {women} for women and below {men} for men, on the last "
                                  "result before discharge.",
                                  "Below which hemoglobin value is a woman counted as anemic in the anemia report?",
                                  "{women}")]),
               ("Sources", [step("LAB_HGB from lab_heme_ingest and PAT_SEX_CD from emr_patient_sync.")])],
           {"north": {"women": "120 g/L", "men": "130 g/L"}, "south": {"women": "12.0 g/dL", "men": "13.0 g/dL"}}),
    cohort("fever-flag", "Fever flag definition",
           "How the vital signs dashboard flags fever.", [
               ("Criteria", [step("Fever is a body temperature (VITAL_TEMP) of {fever}.",
                                  "What temperature does the vital signs dashboard flag as fever?", "{fever}"),
                             step("Two readings within 1 hour count as one episode.")])],
           {"north": {"fever": "38.0 °C or more"}, "south": {"fever": "100.4 °F or more"}}),
]  # fmt: skip

REFERENCE_PAGES = [
    Page("reference", "lab-interface-spec", "Lab result interface specification", ("ops",),
         "How verified results travel from {lab} to the warehouse: transport, segments and their mapping to the "
         "field dictionary.", [
             ("Transport", [
                 step("{lab} sends every verified result as an HL7 version 2.5.1 ORU^R01 message over MLLP with TLS to "
                      "the {unit} {channel} of {engine} on {host}, port {port}."),
                 step("One message carries one order; an order with several tests has one OBX segment per test."),
                 step("{Engine} acknowledges a message (MSA-1 = AA) once it is written to its queue. {lab} "
                      "re-sends an unacknowledged message {retry}.",
                      "How often does the laboratory system re-send an unacknowledged result message?", "{retry}")]),
             ("Segment mapping", [
                 step("MSH-7, message time: {msh7}."),
                 step("PID-3, patient identifier: the MRN (PAT_MRN), {mrn}."),
                 step("OBR-7, collection time: becomes LAB_COLLECT_TS."),
                 step("SPM-2, specimen identifier: becomes LAB_SPEC_ID, {spec}."),
                 step("OBX-3, test: the local test code, with the LOINC code as the alternate identifier."),
                 step("OBX-5, value: numbers with a decimal point; censored results arrive as text ({censored})."),
                 step("OBX-6, unit: the unit of the value, as in the current field dictionary release; the loaders "
                      "reject a unit that does not match the dictionary.",
                      "Which HL7 field carries the unit of a lab result?", "OBX-6"),
                 step("OBX-8, abnormal flags: {flags} into LAB_ABN_FLAG."),
                 step("OBX-11, result status: {status} into LAB_RESULT_STATUS.")]),
             ("Corrections and cancellations", [
                 step("A corrected result is sent again with OBX-11 = C and the same {result_key}; the loaders update "
                      "the row and keep the previous value in the audit table.",
                      "How does a corrected lab result arrive through the interface?", "OBX-11 = C"),
                 step("A cancelled test arrives with OBX-11 = X and no value; the warehouse keeps the row with an "
                      "empty value.")]),
             ("Volumes", [step("On a weekday the {unit} carries {daily} messages; the peak is between 09:00 and "
                               "12:00.")]),
             ("Known deviations", [step("{deviation}")]),
             ("Testing", [
                 step("Interface changes are tested on the test {unit} {test_channel}, with test patients whose MRNs "
                      "start with {test_mrn}; test messages never reach production."),
                 step("A change to the mapping needs the sign-off of {team_lab} and of the laboratory.")])],
         {"north": {"lab": "HelixLab", "engine": "Mirth Connect", "Engine": "Mirth Connect", "unit": "channel",
                    "channel": "HLX_ORU_IN", "test_channel": "HLX_ORU_TEST", "test_mrn": "999",
                    "host": "mirth-n.north.local", "port": "6661", "retry": "every 60 seconds",
                    "msh7": "local time without an offset, like every HelixLab timestamp",
                    "mrn": "9 digits, zero-padded", "spec": "H followed by 10 digits", "censored": "<0.3, HI, LO",
                    "flags": "L, H, LL, HH, A and N pass unchanged", "status": "P, F, C and X pass unchanged",
                    "result_key": "RESULT_ID", "daily": "about 60000",
                    "deviation": "The legacy channel HLX_LEGACY_ORU, disabled since KE-N-113, sent creatinine in "
                                 "mg/dL; it must stay disabled."},
          "south": {"lab": "LabSphere", "engine": "the integration engine", "Engine": "The integration engine",
                    "unit": "route", "channel": "LS-ORU-01", "test_channel": "LS-ORU-T1", "test_mrn": "SH99",
                    "host": "ie.south.local", "port": "8443", "retry": "every 5 minutes",
                    "msh7": "UTC with an explicit +0000 offset", "mrn": "SH followed by 7 digits",
                    "spec": "LS-, the year, a hyphen and 8 digits", "censored": ">600 and <10 from glucometers",
                    "flags": "L, H, LL, HH, A and N are mapped to LOW, HIGH, CRIT_LOW, CRIT_HIGH, ABN and NORMAL",
                    "status": "P, F, C and X are mapped to PRELIM, FINAL, CORRECTED and CANCELLED",
                    "result_key": "accession number, test code and result sequence", "daily": "about 42000",
                    "deviation": "Point-of-care CRP devices send mg/L on this route, which multiplies the value by "
                                 "0.1 (KE-S-213)."}}),
    Page("reference", "warehouse-overview", "Warehouse overview", (),
         "What the {warehouse} is made of, how to reach it, and how it is protected.", [
             ("Platform", [
                 step("The {warehouse} runs on {engine}: {host}."),
                 step("Clients connect through the name {alias} on port {port}, never to a host directly, so that a "
                      "failover needs no change on their side.",
                      "Which port does the warehouse listen on?", "{port}")]),
             ("Layout", [
                 step("Schemas: {schemas}."),
                 step("Timestamps are stored in {ts}; the columns holding them end in _ts."),
                 step("Lab values are kept twice: value_orig as received and {value_col} in the unit of the current "
                      "dictionary release.")]),
             ("Backups", [step("{backup}.", "How long are the nightly warehouse backups kept?", "{backup_keep}")]),
             ("Capacity", [step("The warehouse holds {size} and grows by {growth}; storage is reviewed every quarter.",
                                "How large is the warehouse?", "{size}")]),
             ("Access", [
                 step("Access goes through the directory groups {access}; every query is logged for the audit "
                      "review."),
                 step("Heavy queries and backfills run between {heavy}; during the day, ad-hoc queries are stopped "
                      "after {adhoc}.",
                      "How long may an ad-hoc warehouse query run during the day?", "{adhoc}")]),
             ("Environments", [
                 step("The test warehouse {test_host} is refreshed {test_refresh} with de-identified data; real "
                      "patient data is never loaded into it.",
                      "How often is the test warehouse refreshed?", "{test_refresh}"),
                 step("Schema changes reach production only through the test warehouse and a change ticket.")]),
             ("Support", [step("{team_reference} runs the platform ({platform_channel}); questions about the data "
                               "itself go to the team that owns the job loading it.")])],
         {"north": {"warehouse": "North Data Warehouse (NDW)", "engine": "PostgreSQL 15",
                    "host": "ndw-pg01.north.local is the primary and ndw-pg02 the standby", "alias": "ndw.north.local",
                    "port": "5432",
                    "schemas": "a single schema, ndw, whose table names start with their area (lab_, enc_, diag_, "
                               "vital_, med_, bill_, ref_, dq_ and registry_), plus quarantine_ tables for rejected "
                               "values",
                    "ts": "local time, as the sources deliver it", "value_col": "value_si",
                    "backup": "A pg_dump runs every night to /backup/ndw/nightly and is kept for 35 days; a continuous "
                              "write-ahead log archive allows a restore to any point of the last 7 days",
                    "backup_keep": "35 days", "size": "4.2 TB", "growth": "about 90 GB a month",
                    "access": "DATA-NORTH-CLINICAL, DATA-NORTH-OPS and DATA-NORTH-FINANCE",
                    "heavy": "20:00 and 06:00", "adhoc": "15 minutes", "test_host": "ndw-test.north.local",
                    "test_refresh": "on the first Sunday of each month", "platform_channel": "#north-platform"},
          "south": {"warehouse": "South Data Warehouse (SDW)", "engine": "SQL Server 2019",
                    "host": "sdw-sql02.south.local is the primary and sdw-sql03 the secondary of the availability "
                            "group AG-SDW",
                    "alias": "sdw-listener.south.local", "port": "1433",
                    "schemas": "one schema per area (lab, emr, billing, reference, quality and registry), dq for the "
                               "quarantine tables and rpt for the reporting views",
                    "ts": "UTC", "value_col": "value_conv",
                    "backup": "A full backup runs every night and is kept for 30 days, transaction log backups run "
                              "every 15 minutes, and the snapshot database SDW_NIGHTLY is refreshed each night",
                    "backup_keep": "30 days", "size": "2.9 TB", "growth": "about 60 GB a month",
                    "access": "DATA-SOUTH-CLINICAL, DATA-SOUTH-OPS and DATA-SOUTH-FINANCE",
                    "heavy": "22:00 and 05:00", "adhoc": "30 minutes", "test_host": "sdw-test.south.local",
                    "test_refresh": "every two weeks", "platform_channel": "#south-platform"}}),
]  # fmt: skip

UPSTREAM = {  # job -> jobs whose data it needs first
    "lab_chem_ingest": ("lab_specimen_sync",),
    "lab_heme_ingest": ("lab_specimen_sync",),
    "lab_coag_ingest": ("lab_specimen_sync",),
    "lab_cardiac_ingest": ("lab_specimen_sync",),
    "diagnosis_coding_nightly": ("emr_encounter_daily",),
    "dq_lab_ranges": ("lab_chem_ingest", "lab_heme_ingest", "lab_coag_ingest"),
    "dq_referential_checks": ("emr_patient_sync", "emr_encounter_daily", "diagnosis_coding_nightly"),
    "registry_diabetes_extract": ("lab_chem_ingest", "diagnosis_coding_nightly"),
    "quality_readmission_metrics": ("emr_encounter_daily",),
    "deid_research_snapshot": ("dq_referential_checks",),
}
SYSTEMS = {  # what a runbook's "Systems involved" section lists, per hospital
    "north": ("HelixLab, the laboratory information system, read through its reporting replica HLXRPT (Oracle 19c)",
              "CareLedger, the records system, delivering nightly export files to sftp-n.north.local",
              "Mirth Connect on mirth-n.north.local, the interface engine",
              "Airflow at airflow.north.local, the scheduler; its DAG pages show every run and its logs",
              "the North Data Warehouse (NDW), PostgreSQL 15 on ndw-pg01.north.local with the standby ndw-pg02",
              "Vault under secret/north/etl, for every credential the jobs use"),
    "south": ("LabSphere, the laboratory information system, read through its export database LSEXP (Oracle 19c) "
              "and the Data Guard standby LSEXP_DG",
              "MedArchive, the records system, read through its FHIR R4 API at fhir.south.local",
              "the integration engine on ie.south.local",
              "Dagster at dagster.south.local, the scheduler; the code location sdw_pipelines holds every job",
              "the South Data Warehouse (SDW), SQL Server 2019 on sdw-sql02.south.local in the availability group "
              "AG-SDW",
              "Vault under kv/south/etl, for every credential the jobs use"),
    "shared": ("the systems of the hospital concerned; the hospital runbooks name its hosts",
               "the incident ticket queues NDATA (North) and SDATA (South)",
               "ResearchVault, the group's secure research enclave",
               "the group directory, which holds the access groups DATA-<HOSPITAL>-<SCOPE>"),
}
REVISION_AUTHORS = {
    "north": ("A. Vogel", "S. Haddad", "L. Moreau", "K. Tanaka", "J. Sørensen"),
    "south": ("M. Alvarez", "T. Nguyen", "R. Cohen", "B. Adebayo", "C. Murphy"),
    "shared": ("P. Novak", "Aisha Karimi"),
}
REVISION_NOTES = (
    "Added verification steps after incident {ticket}-{n}.",
    "Updated contacts.",
    "Clarified the escalation path.",
    "Reviewed; no changes.",
    "Aligned with the group incident severity runbook.",
    "Replaced screenshots with commands.",
)


# ---------------------------------------------------------------------------------------------------------
# Documents with addressable spans, and questions that point into them
# ---------------------------------------------------------------------------------------------------------


class Doc:
    """A document under construction. Text added with a key is remembered as a span that questions can cite;
    steps that carry a question add it to `asks` as (span key, question, answer)."""

    def __init__(self, doc_id: str, title: str, tenant: Tenant | None, scopes: tuple[str, ...], kind: str):
        self.id, self.title, self.tenant, self.kind = doc_id, title, tenant, kind
        self.scopes = tuple(sorted(scopes))
        self.parts: list[str] = []
        self.length = 0
        self.spans: dict[str, tuple[int, int]] = {}
        self.asks: list[tuple[str, str, str]] = []

    def add(self, text: str, key: str = "") -> None:
        if key:
            if key in self.spans:
                raise ValueError(f"{self.id}: span {key} marked twice")
            self.spans[key] = (self.length, self.length + len(text))
        self.parts.append(text)
        self.length += len(text)

    def line(self, text: str, key: str = "") -> None:
        self.add(text, key)
        self.add("\n")

    def para(self, text: str, key: str = "") -> None:
        self.add(text, key)
        self.add("\n\n")

    def heading(self, text: str) -> None:
        self.add(f"## {text}\n\n")

    @contextmanager
    def span(self, key: str) -> Iterator[None]:
        """Everything added inside the block, trailing whitespace excluded, becomes the span `key`."""
        start = self.length
        yield
        self.spans[key] = (start, start + len("".join(self.parts)[start:].rstrip()))

    def steps(self, steps: list[Step], params: dict[str, str], prefix: str, numbered: bool = False) -> None:
        """A list of step templates for this document's hospital; step n is the span `{prefix}-{n}`, and
        steps with a question become asks."""
        tenant = self.tenant.short if self.tenant else "shared"
        kept = [s for s in steps if not s.only or s.only == tenant]
        for n, s in enumerate(kept, start=1):
            key = f"{prefix}-{n}"
            self.add(f"{n}. " if numbered else "- ")
            self.line(s.text.format_map(params), key)
            if s.question:
                self.asks.append((key, s.question.format_map(params), s.answer.format_map(params)))
        self.add("\n")

    def cite(self, key: str) -> str:
        start, end = self.spans[key]
        return self.text[start:end]

    @property
    def text(self) -> str:
        return "".join(self.parts).rstrip()


def visible(doc: Doc, asker: Asker) -> bool:
    """ragopt's permission rule: same hospital (or shared), and a scope in common (or unscoped)."""
    tenant_ok = doc.tenant is None or doc.tenant is asker.tenant
    return tenant_ok and (not doc.scopes or bool(set(doc.scopes) & set(asker.scopes)))


@dataclass
class Question:
    id: str
    text: str
    answer: str
    evidence: list[tuple[Doc, str]]  # (document, span key)
    asker: Asker
    relevance: dict[Doc, int] | None = None  # graded, where more pages than the evidence pages state the answer
    history: list[tuple[str, str]] = field(default_factory=list)  # (role, content)

    def check(self) -> None:
        """The asker may see every evidence and relevant document, and the answer is quoted from one evidence span."""
        for doc in [d for d, _ in self.evidence] + list(self.relevance or ()):
            if not visible(doc, self.asker):
                raise ValueError(f"{self.id}: {doc.id} is not visible to its asker")
        if not any(self.answer in doc.cite(key) for doc, key in self.evidence):
            raise ValueError(f"{self.id}: the answer {self.answer!r} is not in its evidence")


class Builder:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.docs: dict[str, Doc] = {}
        self.questions: dict[str, Question] = {}

    def doc(self, doc_id: str, title: str, tenant: Tenant | None, scopes: tuple[str, ...], kind: str) -> Doc:
        if doc_id in self.docs:
            raise ValueError(f"document {doc_id} made twice")
        self.docs[doc_id] = Doc(doc_id, title, tenant, scopes, kind)
        return self.docs[doc_id]

    def ask(self, qid: str, text: str, answer: str, evidence: list[tuple[Doc, str]], asker: Asker, **extra) -> None:
        if qid in self.questions:
            raise ValueError(f"question {qid} asked twice")
        self.questions[qid] = Question(qid, text, answer, evidence, asker, **extra)

    def corpus_rows(self) -> Iterator[dict]:
        for d in self.docs.values():
            tenant = d.tenant.id if d.tenant else None
            yield {"id": d.id, "title": d.title, "text": d.text, "tenant": tenant, "scopes": list(d.scopes),
                   "metadata": {"kind": d.kind}}

    def question_rows(self) -> Iterator[dict]:
        for q in self.questions.values():
            q.check()
            row: dict = {"id": q.id, "question": q.text, "answer": q.answer}
            row["evidence"] = [{"doc_id": d.id, "start": d.spans[k][0], "end": d.spans[k][1]} for d, k in q.evidence]
            if q.relevance:
                row["relevance"] = {d.id: grade for d, grade in q.relevance.items()}
            row.update({"tenant": q.asker.tenant.id, "scopes": list(q.asker.scopes)})
            if q.history:
                row["history"] = [{"role": role, "content": content} for role, content in q.history]
            yield row


# ---------------------------------------------------------------------------------------------------------
# Rendering: one function per kind of document
# ---------------------------------------------------------------------------------------------------------


def system_of(t: Tenant, system: str) -> str:
    return t.lab if system == "lab" else t.emr


def dictionary_of(t: Tenant, system: str) -> str:
    return t.lab_dictionary if system == "lab" else t.emr_dictionary


def field_doc(b: Builder, t: Tenant, f: Field, spec: Spec, doc_id: str, title: str, release: str, kind: str) -> Doc:
    """A field dictionary page: North's wiki writes `Key: value` lines, South's an attribute table."""
    doc = b.doc(doc_id, title, t, SYSTEM_SCOPES[f.system], kind)
    system = system_of(t, f.system)
    job = TABLE_JOB.get(spec.table)
    loaded = f"{t.table(job.area, job.target)}, loaded by {job.name}" if job else "not loaded into the warehouse"
    rows = [
        ("Field" if t is NORTH else "Field name", f.name, ""),
        ("System", f"{system}, {t.name}", ""),
        ("Dictionary", release, "release"),
        ("Source table", spec.table, "table"),
        ("Type" if t is NORTH else "Data type", spec.dtype, "dtype"),
        ("Unit" if t is NORTH else "Unit of measure", spec.unit or "not applicable", "unit"),
        ("Meaning" if t is NORTH else "Definition", spec.meaning or f.meaning, "meaning"),
        ("Valid range" if spec.unit else "Valid values", spec.valid, "valid"),
        ("Warehouse", loaded, "loaded"),
    ]
    if t is SOUTH:
        doc.line("| Attribute | Value |")
        doc.line("| --- | --- |")
    for label, value, key in rows:
        doc.line(f"{label}: {value}" if t is NORTH else f"| {label} | {value} |", key)
    doc.add("\n")
    if spec.unit:
        doc.para("Values outside the valid range are quarantined by dq_lab_ranges." if f.system == "lab" else
                 "Values outside the valid range are rejected by the load and kept for review.")
    if spec.note:
        doc.para(f"{'Notes' if t is NORTH else 'Remarks'}: {spec.note}", "note")
    return doc


def render_fields(b: Builder, t: Tenant) -> dict[str, Doc]:
    docs = {}
    for f in FIELDS:
        system = system_of(t, f.system)
        title = f"{f.name} ({system} field dictionary)" if t is NORTH else f"{system} data dictionary: {f.name}"
        release = f"{dictionary_of(t, f.system)} (current)"
        docs[f.name] = field_doc(b, t, f, f.spec(t), f"{t.short}.field.{f.name}", title, release, "field")
    return docs


def render_superseded(b: Builder, s: Superseded) -> Doc:
    t, f = s.tenant, FIELD[s.field]
    old, cutover, suffix = OLD_RELEASE[t.short]
    current = f.spec(t)
    spec = Spec(s.unit, s.valid, s.dtype, current.table, current.meaning,
                f"Superseded on {cutover}. To convert a value of this release to the current unit, {s.factor}.")
    title = f"{f.name} ({t.lab} field dictionary {old}, deprecated)" if t is NORTH else \
        f"{t.lab} data dictionary {old} (deprecated): {f.name}"
    release = f"{old} (DEPRECATED since {cutover}, replaced by {t.lab_dictionary})"
    return field_doc(b, t, f, spec, f"{t.short}.field.{f.name}.{suffix}", title, release, "field-deprecated")


def render_release_notes(b: Builder, t: Tenant) -> Doc:
    old, cutover, _ = OLD_RELEASE[t.short]
    changed = [s for s in SUPERSEDED if s.tenant is t]
    doc = b.doc(f"{t.short}.release-notes.{t.lab.lower()}", f"{t.lab} dictionary {t.lab_dictionary}: release notes",
                t, ("clinical", "ops"), "release-notes")
    doc.para(f"{t.lab_dictionary.capitalize()} of the {t.lab} field dictionary replaces {old} on {cutover}. From that "
             f"date {t.lab} reports the results below in new units; results reported earlier keep their old units "
             "in value_orig, and the warehouse converts them as described in the dictionary release runbook.")
    doc.heading("Changed fields")
    for s in changed:
        spec = FIELD[s.field].spec(t)
        doc.line(f"- {s.field}: unit {s.unit} changes to {spec.unit} ({s.factor}); type {s.dtype} changes to "
                 f"{spec.dtype}; valid range {s.valid} changes to {spec.valid}.", s.field)
    doc.add("\n")
    doc.heading("Unchanged")
    doc.para("All other fields keep their unit, type and valid range.")
    team = TEAMS[t.short]["lab"]
    doc.para(f"Questions: {team.name} in {team.channel}.")
    return doc


def render_tables(b: Builder, t: Tenant) -> None:
    for table, (row, key, per_day) in TABLES.items():
        fields = [f for f in FIELDS if f.spec(t).table == table]
        if not fields:
            continue
        system = system_of(t, fields[0].system)
        job = TABLE_JOB[table]
        doc = b.doc(f"{t.short}.table.{table}", f"{table} ({system} source table, {t.name})", t,
                    SYSTEM_SCOPES[fields[0].system], "table")
        volume = per_day[0] if t is NORTH else per_day[1]
        doc.para(f"{table} is the {system} source table holding {row} per row. Primary key: {key}. About {volume} "
                 f"rows arrive per day. {job.name} loads it into {t.table(job.area, job.target)}.")
        doc.heading("Fields")
        for f in fields:
            spec = f.spec(t)
            unit = f", {spec.unit}" if spec.unit else ""
            summary = (spec.meaning or f.meaning).split(": ")[0].rstrip(".")
            doc.line(f"- {f.name}: {spec.dtype}{unit}. {summary}.", f.name)
        doc.add("\n")
        doc.para(f"Definitions, valid ranges and notes are in the {system} field dictionary, one page per field.")


def render_job(b: Builder, t: Tenant, job: Job, errors: list[KnownError]) -> Doc:
    cron, words = job.schedule(t)
    team = TEAMS[t.short][job.area]
    scopes = ("finance", "ops") if job.area == "billing" else ("ops",)
    source = SOURCES[(t.short, job.area)]
    target = t.table(job.area, job.target)
    minute, hour = cron.split()[:2]
    frequent = minute.startswith("*/") or hour == "*"  # runs at least hourly, so it must finish well within that
    low, high = b.rng.choice([(1, 3), (2, 4), (3, 8)] if frequent else [(5, 12), (10, 25), (20, 45)])
    upstream = ", ".join(UPSTREAM.get(job.name, ())) or "none"
    codes = ", ".join(e.code for e in errors) or "none recorded"
    fields = ", ".join(f.name for f in FIELDS if f.spec(t).table in job.tables)
    if t is NORTH:
        doc = b.doc(f"north.job.{job.name}", f"{job.name} (Airflow DAG, North Hospital)", t, scopes, "job")
        doc.line(f"DAG id: {job.name}")
        doc.line(f"Purpose: {job.purpose}")
        doc.line(f"Schedule: {words} (cron {cron}, local time)", "schedule")
        doc.line(f"Source: {source}", "source")
        doc.line(f"Target: {target}", "target")
        doc.line(f"Owner: {team.name} ({team.channel})", "owner")
        doc.line(f"Upstream DAGs: {upstream}")
        doc.line(f"Typical runtime: {low} to {high} minutes; retries: 2, five minutes apart")
        doc.line(f"Service level: {SERVICE_LEVELS[(t.short, job.area)]}")
        doc.line(f"Alerts: failures post to {t.oncall}; out of hours they page {t.pager}.")
        doc.line(f"Known errors: {codes}")
        doc.line(f"Manual run: `{t.trigger.format(job=job.name)}`")
        doc.add("\n")
        if fields:
            doc.para(f"Fields loaded: {fields}.")
        doc.heading("Recent runs")
        for run in recent_runs(b.rng, cron, low, high):
            doc.line(f"- {run}")
    else:
        doc = b.doc(f"south.job.{job.name}", f"Dagster job {job.name} (South Hospital)", t, scopes, "job")
        doc.para(job.purpose)
        doc.heading("Schedule")
        doc.para(f"Runs {words} (cron `{cron}`, execution_timezone UTC).", "schedule")
        doc.heading("Data flow")
        doc.add(f"Reads from {source}.", "source")
        doc.para(f" Writes to {target}.")
        doc.para(f"Needs first: {upstream}. Typical runtime {low} to {high} minutes; up to 3 retries.")
        doc.heading("Service level")
        doc.para(f"Users can rely on this: {SERVICE_LEVELS[(t.short, job.area)]}.")
        doc.heading("Ownership")
        doc.para(f"Owned by {team.name} ({team.channel}).", "owner")
        doc.para(f"Failures alert {t.pager}.")
        doc.heading("Known errors")
        doc.para(codes)
        if fields:
            doc.heading("Assets")
            doc.para(f"Fields materialised: {fields}.")
        doc.heading("Operations")
        doc.para(f"Launch by hand with `{t.trigger.format(job=job.name)}`. Latest runs:")
        for run in recent_runs(b.rng, cron, low, high):
            doc.line(f"- {run}")
    return doc


def recent_runs(rng: random.Random, cron: str, low: int, high: int) -> list[str]:
    """The last five runs the schedule allows before 2024-11-23, as the scheduler UI lists them."""
    minute, hour, day_of_month, _, day_of_week = cron.split()
    runs: list[str] = []
    day = date(2024, 11, 22)
    while len(runs) < 5:
        if day.day in cron_values(day_of_month, 1, 31) and day.isoweekday() % 7 in cron_values(day_of_week, 0, 6):
            for h in reversed(cron_values(hour, 0, 23)):
                for m in reversed(cron_values(minute, 0, 59)):
                    if len(runs) < 5:
                        outcome = "failed, retried successfully" if rng.random() < 0.1 else "success"
                        runs.append(f"{day} {h:02d}:{m:02d}: {outcome}, {rng.randint(low, high)} min")
        day -= timedelta(days=1)
    return runs


def cron_values(expr: str, low: int, high: int) -> list[int]:
    """The values one cron field allows: `*`, `*/n`, `a`, `a-b`, and comma lists of these."""
    values: list[int] = []
    for part in expr.split(","):
        if part == "*":
            values += range(low, high + 1)
        elif part.startswith("*/"):
            values += range(low, high + 1, int(part[2:]))
        elif "-" in part:
            first, last = map(int, part.split("-"))
            values += range(first, last + 1)
        else:
            values.append(int(part))
    return sorted(values)


def render_known_error(b: Builder, e: KnownError) -> Doc:
    t = e.tenant
    head = e.error.split(":")[0]
    doc = b.doc(f"{t.short}.ke.{e.code}", f"{e.code}: {e.job} fails with {head}", t, ("ops",), "known-error")
    year = b.rng.choice([2022, 2023, 2024])
    seen = f"{year}-{b.rng.randint(1, 12):02d}-{b.rng.randint(1, 28):02d}"
    ticket = f"{t.ticket}-{b.rng.randint(1200, 9800)}"
    doc.para(f"Known error {e.code}, {t.name}, job {e.job}. First seen {seen}; ticket {ticket}.")
    doc.heading("Error")
    doc.para(f"`{e.error}`", "error")
    doc.heading("Symptom")
    doc.para(e.symptom)
    doc.heading("Detection")
    how = b.rng.choice(("and confirmed in the {scheduler} run log", "after the morning row-count check showed a gap",
                        "after users reported stale data on a dashboard"))
    doc.para(f"Detected by the failure alert of {e.job} in {t.oncall}, {how.format(scheduler=t.scheduler)}.")
    job = JOB[e.job]
    redo = "clearing the failed runs" if t is NORTH else "re-materializing the failed partitions"
    doc.heading("Affected data")
    doc.para(f"Runs of {e.job} between the first failure and the fix wrote nothing to {t.table(job.area, job.target)}. "
             f"The source kept every record, so {redo} after the fix closes the gap.")
    doc.heading("Cause")
    with doc.span("cause_fix"):
        doc.para(e.cause)
        doc.heading("Fix")
        doc.para(e.fix, "fix")
    doc.heading("Prevention")
    doc.para(e.prevention)
    return doc


def render_team(b: Builder, t: Tenant, area: str, team: Team) -> Doc:
    doc = b.doc(f"{t.short}.team.{area}", f"Team: {team.name} ({t.name})", t, (), "team")
    jobs = [j.name for j in JOBS if j.area == area and j.schedule(t)]
    runbooks = [rb.title for rb in RUNBOOKS if rb.area == area]
    doc.para(f"{team.name} owns {team.owns}.")
    doc.line(f"Chat channel: {team.channel}", "channel")
    doc.line(f"Working hours: {team.hours}", "hours")
    doc.line(f"Manager: {team.manager}", "manager")
    doc.line(f"Out of hours: {team.pager}", "pager")
    doc.add("\n")
    if jobs:
        doc.para(f"Jobs owned: {', '.join(jobs)}.")
    if runbooks:
        doc.para(f"Runbooks owned: {'; '.join(runbooks)}.")
    return doc


def runbook_params(t: Tenant | None, rb: Runbook) -> dict[str, str]:
    if t is None:
        p = {"scheduler": "the scheduler of your hospital (Airflow in North, Dagster in South)",
             "warehouse": "warehouse of your hospital", "oncall": "#north-data-oncall or #south-data-oncall",
             "ticket": "NDATA or SDATA", "status_page": "your hospital's status page", "pager": GROUP_TEAM.pager}
        return p | rb.params["shared"]
    p = {"lab": t.lab, "emr": t.emr, "warehouse": t.warehouse, "scheduler": t.scheduler, "oncall": t.oncall,
         "dq_channel": t.dq_channel, "ticket": t.ticket, "secrets": t.secrets, "status_page": t.status_page,
         "pager": t.pager, "run_chem": t.trigger.format(job="lab_chem_ingest"),
         "run_heme": t.trigger.format(job="lab_heme_ingest")}
    p |= {f"team_{area}": team.name for area, team in TEAMS[t.short].items()}
    p["changed"] = str(sum(s.tenant is t for s in SUPERSEDED))
    p["factors"] = "; ".join(f"{s.field} from {s.unit} to {FIELD[s.field].spec(t).unit}, {s.factor}"
                             for s in SUPERSEDED if s.tenant is t)
    return p | rb.params[t.short]


def render_runbook(b: Builder, t: Tenant | None, rb: Runbook) -> Doc:
    where = t.short if t else "shared"
    team = TEAMS[t.short][rb.area] if t else GROUP_TEAM
    p = runbook_params(t, rb)
    title = f"Runbook: {rb.title} ({t.name if t else 'group'})"
    doc = b.doc(f"{where}.runbook.{rb.slug}", title, t, rb.scopes, "runbook")
    history = revision_history(b.rng, where, team, t.ticket if t else "NDATA")
    applies = t.name if t else "both hospitals"
    version = f"{len(history)}.{b.rng.randint(0, 4)}"
    doc.para(f"Owner: {team.name} ({team.channel}). Applies to: {applies}. Version {version}, last reviewed "
             f"{history[-1][0]}.")
    doc.heading("Purpose")
    doc.para(rb.purpose.format_map(p))
    doc.heading("Background")
    doc.para(rb.background.format_map(p))
    doc.heading("When to use this runbook")
    doc.steps([step(x) for x in rb.triggers], p, "trigger")
    doc.heading("Roles and contacts")
    doc.steps([step("Runbook owner: {owner} ({owner_channel}); manager {manager}."),
               step("First responder: whoever holds the data on-call rotation, reachable in {oncall}."),
               step("Out of hours: {owner_pager}."),
               step("Incident commander for severity 1: the duty manager named in the on-call schedule.")],
              p | {"owner": team.name, "owner_channel": team.channel, "manager": team.manager,
                   "owner_pager": team.pager}, "role")
    doc.heading("Before you start")
    doc.steps([step("You can log in to {scheduler} and to the {warehouse} with your personal administrator account; "
                     "shared accounts are never used for manual steps."),
               step("An incident or change ticket exists in the {ticket} queue, and every command you run goes into "
                    "it with its output."),
               step("You have read the Known pitfalls section below."),
               *[step(x) for x in rb.prerequisites]], p, "before")
    doc.heading("Systems involved")
    doc.steps([step(x) for x in SYSTEMS[where]], p, "system")
    doc.heading("Communication")
    doc.para("Post a first message in {oncall} within 15 minutes: what is affected, since when, and the ticket number. "
             "For severity 1 and 2, update the ticket every 30 minutes until the incident is resolved, even when "
             "nothing changed. When clinical users are affected (results or vital signs missing from dashboards), the "
             "service desk publishes a notice on {status_page}; do not contact the wards directly. Close the ticket "
             "with a summary: the cause, the fix, the data affected and the follow-up actions.".format_map(p))
    doc.heading("Procedure")
    doc.steps(rb.steps, p, "step", numbered=True)
    doc.heading("Verification")
    doc.steps(rb.checks, p, "check")
    doc.heading("Rollback")
    doc.steps(rb.rollback, p, "rollback")
    doc.heading("Known pitfalls")
    doc.steps(rb.pitfalls, p, "pitfall")
    doc.heading("Escalation")
    doc.steps([step("No progress after 60 minutes: escalate to {pager} and inform {manager}."),
               step("Clinical data missing for more than 4 hours: raise the incident to severity 1, as the group "
                    "incident severity runbook requires."),
               step("Suspected exposure of patient data: stop, and follow the group data leak response runbook.")],
              p | {"manager": team.manager}, "escalation")
    doc.heading("Handover")
    doc.para("If your shift ends before the work is done, hand over in the ticket, not only in chat: what was done, "
             "with the commands and their output; what is running now; what comes next; and who was informed. The "
             "next on-call confirms the handover in {oncall}. Never leave a paused job, a muted alert or an open "
             "maintenance window without an owner and an end time.".format_map(p))
    related = related_documents(doc.text, t)
    doc.heading("Related documents")
    doc.steps([step(x) for x in related], {}, "related")
    doc.heading("Revision history")
    for day, author, note in history:
        doc.line(f"- {day}, {author}: {note}")
    return doc


def related_documents(text: str, t: Tenant | None) -> list[str]:
    """Cross-links a wiki adds under a page: known errors of the jobs and dictionary pages of the fields it names."""
    related = []
    if t is not None:
        jobs = [j.name for j in JOBS if j.schedule(t) and j.name in text]
        codes = [e.code for e in KNOWN_ERRORS if e.tenant is t and e.job in jobs]
        if codes:
            related.append(f"Known errors of the jobs named above: {', '.join(codes)}.")
        fields = [f.name for f in FIELDS if f.name in text]
        if fields:
            related.append(f"Field dictionary pages: {', '.join(fields)}.")
    related.append("Group runbooks: Data incident severity and communication; Suspected data leak response.")
    return related


def revision_history(rng: random.Random, where: str, team: Team, ticket: str) -> list[tuple[str, str, str]]:
    authors = [*REVISION_AUTHORS[where], team.manager]
    dates = sorted(f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}" for year in (2021, 2023, 2024))
    notes = ["Initial version.", *rng.sample(REVISION_NOTES, 2)]
    return [(d, rng.choice(authors), n.format(ticket=ticket, n=rng.randint(1200, 9800))) for d, n in zip(dates, notes)]


def render_policy(b: Builder, p: Policy) -> Doc:
    where = p.tenant.short if p.tenant else "shared"
    doc = b.doc(f"{where}.policy.{p.slug}", p.title, p.tenant, p.scopes, "policy")
    applies = p.tenant.name if p.tenant else "North Hospital and South Hospital"
    doc.para(f"Owner: {p.owner}. Applies to: {applies}.")
    doc.heading("Purpose")
    doc.para(p.purpose)
    for n, (heading, steps) in enumerate(p.sections, start=1):
        doc.heading(heading)
        doc.steps(steps, {}, f"s{n}")
    doc.heading("Exceptions")
    doc.para(f"Exceptions are requested in writing from the policy owner ({p.owner}), last at most 12 months and "
             "are listed in the exceptions register.")
    doc.heading("Review")
    doc.para("This policy is reviewed every two years, and earlier after any incident that involved it.")
    return doc


def render_glossary(b: Builder, term: str, definition: str) -> Doc:
    slug = "".join(c if c.isalnum() else "-" for c in term.lower()).strip("-")
    doc = b.doc(f"shared.glossary.{slug}", f"Glossary: {term}", None, (), "glossary")
    doc.para(definition, "definition")
    return doc


def render_page(b: Builder, t: Tenant, page: Page) -> Doc:
    doc = b.doc(f"{t.short}.{page.kind}.{page.slug}", f"{page.title} ({t.name})", t, page.scopes, page.kind)
    params = {f"team_{area}": team.name for area, team in TEAMS[t.short].items()} | page.values[t.short]
    doc.para(page.purpose.format_map(params))
    for n, (heading, steps) in enumerate(page.sections, start=1):
        doc.heading(heading)
        doc.steps(steps, params, f"s{n}")
    return doc


# ---------------------------------------------------------------------------------------------------------
# Questions
# ---------------------------------------------------------------------------------------------------------


UNIT_QUESTIONS = (
    "What unit does {field} use in {system}?",
    "In which unit is {field} stored?",
    "Which unit of measure does {field} have in the {system} dictionary?",
    "I am querying {field}. What unit are its values in?",
)
RANGE_QUESTIONS = ("What is the valid range of {field} in {system}?", "Which values of {field} pass the range check?")
VALUES_QUESTIONS = ("What are the valid values of {field}?", "What format does {field} follow in {system}?")
SCHEDULE_QUESTIONS = ("When does {job} run?", "How often does the {job} job run?", "What is the schedule of {job}?")
ERROR_QUESTIONS = (
    "Why does {job} fail with `{error}`, and how is it fixed?",
    '{job} failed with "{head}". What is the cause and the fix?',
    "How do I fix this error in {job}: {error}",
    'What causes "{head}" in {job}, and what do we do about it?',
)
ALWAYS_ASKED_UNITS = ("LAB_GLU_FAST", "LAB_GLU_RAND", "LAB_GLU_POC", "LAB_HBA1C", "LAB_CREAT", "LAB_TROP_HS",
                      "VITAL_TEMP", "BILL_CHARGE_AMT")  # fmt: skip


def field_asker(b: Builder, t: Tenant, f: Field) -> Asker:
    who = askers(t)
    return who["finance"] if f.system == "billing" else who[b.rng.choice(("clinical", "ops", "lead"))]


def graded(b: Builder, t: Tenant, canonical: Doc, f: Field, fact: str) -> dict[Doc, int] | None:
    """Grade 2 for the page a question cites, grade 1 for other pages that state the same `fact` of field `f`:
    the source table page lists units, types and tables; a dictionary release that changed the field lists its
    old and new unit, type and range, and the release runbook converts between the units."""
    changed = any(s.field == f.name and s.tenant is t for s in SUPERSEDED)
    also = []
    if fact in ("unit", "dtype", "table"):
        also.append(b.docs[f"{t.short}.table.{f.spec(t).table}"])
    if changed and fact in ("unit", "dtype", "valid", "old unit"):
        also.append(b.docs[f"{t.short}.release-notes.{t.lab.lower()}"])
    if changed and fact in ("unit", "old unit"):
        also.append(b.docs[f"{t.short}.runbook.dictionary-release"])
    return {canonical: 2} | {d: 1 for d in also} if also else None


def ask_fields(b: Builder, t: Tenant, fields: dict[str, Doc]) -> None:
    rng = b.rng
    numeric = [f for f in FIELDS if f.spec(t).unit]
    codes = [f for f in FIELDS if not f.spec(t).unit]

    def ask(kind: str, f: Field, text: str, answer: str, key: str) -> None:
        doc = fields[f.name]
        b.ask(f"{kind}-{t.short}-{f.name.lower()}", text.format(field=f.name, system=system_of(t, f.system)), answer,
              [(doc, key)], field_asker(b, t, f), relevance=graded(b, t, doc, f, key))

    others = [f for f in numeric if f.name not in ALWAYS_ASKED_UNITS]
    unit_fields = [FIELD[n] for n in ALWAYS_ASKED_UNITS] + rng.sample(others, 6)
    for f in unit_fields:
        ask("unit", f, rng.choice(UNIT_QUESTIONS), f.spec(t).unit, "unit")
    for f in rng.sample(numeric, 5):
        ask("range", f, rng.choice(RANGE_QUESTIONS), f.spec(t).valid, "valid")
    for f in rng.sample(codes, 4):
        ask("values", f, rng.choice(VALUES_QUESTIONS), f.spec(t).valid.split(";")[0], "valid")
    for f in [f for f in FIELDS if f.north.table != f.south.table]:
        ask("table", f, "Which source table holds {field} in {system}?", f.spec(t).table, "table")
    for f in rng.sample(FIELDS, 3):
        ask("type", f, "What data type does {field} have in {system}?", f.spec(t).dtype, "dtype")


def ask_superseded(b: Builder, superseded: list[tuple[Superseded, Doc]]) -> None:
    for s, doc in superseded:
        t = s.tenant
        _, cutover, _ = OLD_RELEASE[t.short]
        text = f"Before {t.lab} {t.lab_dictionary} took effect on {cutover}, which unit did {s.field} use?"
        b.ask(f"unit-old-{t.short}-{s.field.lower()}", text, s.unit, [(doc, "unit")], askers(t)["lead"],
              relevance=graded(b, t, doc, FIELD[s.field], "old unit"))


def ask_jobs(b: Builder, t: Tenant, jobs: dict[str, Doc]) -> None:
    rng = b.rng
    ops = askers(t)["ops"]
    names = sorted(jobs)
    for name in rng.sample(names, 7):
        text = rng.choice(SCHEDULE_QUESTIONS).format(job=name)
        b.ask(f"schedule-{t.short}-{name}", text, JOB[name].schedule(t)[1], [(jobs[name], "schedule")], ops)
    for name in rng.sample(names, 3):
        area = JOB[name].area
        team_doc = b.docs[f"{t.short}.team.{area}"]  # its list of the jobs the team owns also answers
        b.ask(f"owner-{t.short}-{name}", f"Which team owns {name}?", TEAMS[t.short][area].name,
              [(jobs[name], "owner")], ops, relevance={jobs[name]: 2, team_doc: 1})
    for name in rng.sample(names, 2):
        b.ask(f"source-{t.short}-{name}", f"Where does {name} read its data from?",
              SOURCES[(t.short, JOB[name].area)], [(jobs[name], "source")], ops)


def ask_known_errors(b: Builder, errors: list[tuple[KnownError, Doc]]) -> None:
    rng = b.rng
    for e, doc in sorted(rng.sample(errors, 30), key=lambda pair: pair[0].code):
        text = rng.choice(ERROR_QUESTIONS).format(job=e.job, error=e.error, head=e.error.split(":")[0])
        b.ask(f"error-{e.tenant.short}-{e.code.lower()}", text, e.answer, [(doc, "cause_fix")], askers(e.tenant)["ops"])


def doc_asker(b: Builder, doc: Doc) -> Asker:
    """Someone entitled to read `doc`: of its hospital (or either, for shared documents), with a fitting scope."""
    t = doc.tenant or b.rng.choice(TENANTS)
    if not doc.scopes:
        return askers(t)[b.rng.choice(("clinical", "ops", "finance"))]
    return Asker(t, doc.scopes[:1]) if len(doc.scopes) == 1 or "finance" in doc.scopes else askers(t)["lead"]


def ask_from_steps(b: Builder, docs: list[Doc], per_doc: int | None) -> None:
    """Questions attached to runbook, policy and cohort steps: `per_doc` of each document's (all if None)."""
    for doc in docs:
        asks = doc.asks if per_doc is None else b.rng.sample(doc.asks, min(per_doc, len(doc.asks)))
        for key, text, answer in asks:
            qid = f"{doc.kind}-{doc.id.replace('.', '-').replace(f'-{doc.kind}-', '-')}-{key}"
            b.ask(qid, text, answer, [(doc, key)], doc_asker(b, doc))


def ask_multi(b: Builder, t: Tenant) -> None:
    """Questions that need two evidence spans, usually two documents joined by a name."""
    rng, who, short, d = b.rng, askers(t), t.short, b.docs
    jobs = sorted(j.name for j in JOBS if j.schedule(t))
    for name in rng.sample(jobs, 3):
        team_doc = d[f"{short}.team.{JOB[name].area}"]
        b.ask(f"multi-{short}-manager-{name}", f"Who manages the team that owns {name}?",
              TEAMS[short][JOB[name].area].manager, [(d[f"{short}.job.{name}"], "owner"), (team_doc, "manager")],
              who["ops"])
    for name in rng.sample(jobs, 2):
        team_doc = d[f"{short}.team.{JOB[name].area}"]
        b.ask(f"multi-{short}-hours-{name}", f"During which hours does the team behind {name} work?",
              TEAMS[short][JOB[name].area].hours, [(d[f"{short}.job.{name}"], "owner"), (team_doc, "hours")],
              who["ops"])
    loaded = [f for f in FIELDS if f.system != "billing" and f.spec(t).table in TABLE_JOB]
    for f in rng.sample(loaded, 2):
        job = TABLE_JOB[f.spec(t).table]
        evidence = [(d[f"{short}.field.{f.name}"], "loaded"), (d[f"{short}.job.{job.name}"], "schedule")]
        b.ask(f"multi-{short}-refresh-{f.name.lower()}", f"How often is {f.name} refreshed in the warehouse?",
              job.schedule(t)[1], evidence, who["lead"])
    cohort = COHORTS[0]
    b.ask(f"multi-{short}-registry-hba1c",
          f"Which HbA1c value puts a patient in the diabetes registry, and in which unit does {t.lab} store LAB_HBA1C?",
          cohort.values[short]["hba1c"],
          [(d[f"{short}.cohort.{cohort.slug}"], "s1-1"), (d[f"{short}.field.LAB_HBA1C"], "unit")], who["clinical"])


def ask_cross_document(b: Builder) -> None:
    """Hand-picked two-document questions: a hospital rule that overrides a group rule, and a known error whose
    fix is a runbook step."""
    north, south, d = askers(NORTH), askers(SOUTH), b.docs
    group_retention = d["shared.policy.retention-schedule"]
    b.ask("multi-north-retention-hl7", "How long are raw HL7 lab messages kept?", "180 days",
          [(d["north.policy.retention-addendum"], "s1-1"), (group_retention, "s1-1")], north["ops"])
    b.ask("multi-south-retention-staging", "How long are warehouse staging tables kept?", "5 days",
          [(d["south.policy.retention-addendum"], "s1-1"), (group_retention, "s1-2")], south["ops"])
    b.ask("multi-north-keytab-lead-time",
          "KE-N-108 says the keytab expired. How far ahead must a keytab renewal be requested?", "3 working days",
          [(d["north.ke.KE-N-108"], "cause_fix"), (d["north.runbook.credential-rotation"], "step-2")], north["ops"])
    b.ask("multi-south-secret-reload",
          "After fixing KE-S-205 with a new client secret, what must be done so that new runs use it?",
          "reload the code location sdw_pipelines",
          [(d["south.ke.KE-S-205"], "cause_fix"), (d["south.runbook.credential-rotation"], "step-6")], south["ops"])


def ask_follow_ups(b: Builder, t: Tenant) -> None:
    """Second turns of a conversation: the question only makes sense with the history before it."""
    rng, short, d = b.rng, t.short, b.docs
    loaded = [f for f in FIELDS if f.system == "lab" and f.spec(t).table in TABLE_JOB]
    for f in rng.sample(loaded, 2):
        job = TABLE_JOB[f.spec(t).table]
        history = [("user", f"Which job loads {f.name} into the warehouse?"),
                   ("assistant", f"{job.name} loads it into {t.table(job.area, job.target)} [1].")]
        b.ask(f"followup-{short}-schedule-{f.name.lower()}", "How often does it run?", job.schedule(t)[1],
              [(d[f"{short}.job.{job.name}"], "schedule")], askers(t)["ops"], history=history)
    numeric = [f for f in FIELDS if f.system != "billing" and f.spec(t).unit]
    for f in rng.sample(numeric, 2):
        spec = f.spec(t)
        history = [("user", f"What unit is {f.name} in?"), ("assistant", f"{spec.unit} [1].")]
        doc = d[f"{short}.field.{f.name}"]
        b.ask(f"followup-{short}-range-{f.name.lower()}", "And what is its valid range?", spec.valid, [(doc, "valid")],
              askers(t)["clinical"], relevance=graded(b, t, doc, f, "valid"), history=history)


def ask_more_follow_ups(fb: Builder, t: Tenant) -> None:
    """followups.jsonl: second turns in five shapes, so that follow-up resolution is measured on more than two
    templates. The pronoun refers to the entity of the user's turn (unit, owner) or to the one the answer named
    (manager, source); "What about X?" repeats the last question for another field."""
    rng, short, d, who = fb.rng, t.short, fb.docs, askers(t)
    jobs = sorted(j.name for j in JOBS if j.schedule(t))
    for name in rng.sample(jobs, 3):
        team = TEAMS[short][JOB[name].area]
        history = [("user", f"Which team owns {name}?"), ("assistant", f"{name} is owned by {team.name} [1].")]
        fb.ask(f"followup-{short}-manager-{name}", "Who manages that team?", team.manager,
               [(d[f"{short}.team.{JOB[name].area}"], "manager")], who["ops"], history=history)
    for name in rng.sample(jobs, 3):
        job, team_doc = JOB[name], d[f"{short}.team.{JOB[name].area}"]
        history = [("user", f"When does {name} run?"), ("assistant", f"{job.schedule(t)[1]} [1].")]
        fb.ask(f"followup-{short}-owner-{name}", "Which team owns it?", TEAMS[short][job.area].name,
               [(d[f"{short}.job.{name}"], "owner")], who["ops"], relevance={d[f"{short}.job.{name}"]: 2, team_doc: 1},
               history=history)
    loaded = [f for f in FIELDS if f.system == "lab" and f.spec(t).table in TABLE_JOB]
    for f in rng.sample(loaded, 3):
        job = TABLE_JOB[f.spec(t).table]
        history = [("user", f"Which job loads {f.name} into the warehouse?"),
                   ("assistant", f"{job.name} loads it into {t.table(job.area, job.target)} [1].")]
        fb.ask(f"followup-{short}-source-{f.name.lower()}", "Where does it read its data from?",
               SOURCES[(short, job.area)], [(d[f"{short}.job.{job.name}"], "source")], who["ops"], history=history)
    numeric = [f for f in FIELDS if f.system != "billing" and f.spec(t).unit]
    for f in rng.sample([f for f in FIELDS if f.north.table != f.south.table and f.spec(t).unit], 3):
        doc = d[f"{short}.field.{f.name}"]
        history = [("user", f"Which source table holds {f.name} in {system_of(t, f.system)}?"),
                   ("assistant", f"{f.spec(t).table} [1].")]
        fb.ask(f"followup-{short}-unit-{f.name.lower()}", "In which unit is it stored?", f.spec(t).unit, [(doc, "unit")],
               field_asker(fb, t, f), relevance=graded(fb, t, doc, f, "unit"), history=history)
    for first, then in zip(*[iter(rng.sample(numeric, 6))] * 2):
        doc = d[f"{short}.field.{then.name}"]
        history = [("user", f"What unit is {first.name} in?"), ("assistant", f"{first.spec(t).unit} [1].")]
        fb.ask(f"followup-{short}-unit-{then.name.lower()}-after-{first.name.lower()}", f"What about {then.name}?",
               then.spec(t).unit, [(doc, "unit")], who["clinical"] if then.system == "lab" else who["lead"],
               relevance=graded(fb, t, doc, then, "unit"), history=history)


# ---------------------------------------------------------------------------------------------------------
# The whole set
# ---------------------------------------------------------------------------------------------------------


def build() -> Builder:
    b = Builder(SEED)
    fields, jobs = {}, {}
    for t in TENANTS:
        fields[t.short] = render_fields(b, t)
    superseded = [(s, render_superseded(b, s)) for s in SUPERSEDED]
    for t in TENANTS:
        render_release_notes(b, t)
        render_tables(b, t)
        jobs[t.short] = {j.name: render_job(b, t, j, [e for e in KNOWN_ERRORS if e.tenant is t and e.job == j.name])
                         for j in JOBS if j.schedule(t)}
        for area, team in TEAMS[t.short].items():
            render_team(b, t, area, team)
    errors = [(e, render_known_error(b, e)) for e in KNOWN_ERRORS]
    runbooks = [render_runbook(b, t, rb) for rb in RUNBOOKS for t in ((None,) if "shared" in rb.params else TENANTS)]
    policies = [render_policy(b, p) for p in POLICIES]
    for term, definition in GLOSSARY:
        render_glossary(b, term, definition)
    pages = [render_page(b, t, page) for page in COHORTS + REFERENCE_PAGES for t in TENANTS]

    for t in TENANTS:
        ask_fields(b, t, fields[t.short])
    ask_superseded(b, superseded)
    for t in TENANTS:
        ask_jobs(b, t, jobs[t.short])
    ask_known_errors(b, errors)
    ask_from_steps(b, runbooks, per_doc=2)
    ask_from_steps(b, policies + pages, per_doc=None)
    for t in TENANTS:
        ask_multi(b, t)
        ask_follow_ups(b, t)
    ask_cross_document(b)
    return b


def write_jsonl(path: Path, rows: Iterator[dict]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SHIPPED, help="folder to write (default: %(default)s)")
    args = parser.parse_args(argv)
    b = build()
    args.out.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out / "corpus.jsonl", b.corpus_rows())
    write_jsonl(args.out / "questions.jsonl", b.question_rows())
    follow_ups = Builder(SEED + 1)  # its own random stream: questions.jsonl stays as it was
    follow_ups.docs = b.docs
    for t in TENANTS:
        ask_more_follow_ups(follow_ups, t)
    write_jsonl(args.out / "followups.jsonl", follow_ups.question_rows())
    print(f"{args.out}: {len(b.docs)} documents, {len(b.questions)} questions, {len(follow_ups.questions)} more follow-ups")


if __name__ == "__main__":
    main()
