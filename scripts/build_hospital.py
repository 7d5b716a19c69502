#!/usr/bin/env python3
"""Generate evalsets/hospital/ (package data: the wheel carries it as ragopt/shipped/evalsets): the knowledge base of a hospital data-asset assistant, and questions about it.

    python scripts/build_hospital.py              # rewrites evalsets/hospital/*.jsonl
    python scripts/build_hospital.py --out DIR    # writes the files into DIR instead

The world: two hospitals of one group share a data team's assistant. North Hospital runs the HelixLab
laboratory system and the CareLedger records system and stores lab results in SI units; South Hospital runs
LabSphere and MedArchive in conventional units. The same field, job or runbook exists in both with different
values, old dictionary versions linger as deprecated pages, and similar fields (LAB_GLU_FAST, LAB_GLU_RAND,
LAB_GLU_POC) sit side by side, so that retrieval has to be precise and tenant-aware.

Every document is rendered from tables of facts (scripts/hospital/data/*.json, loaded by
scripts/hospital/world.py) through small templates (render.py, ask.py); each question points at
the exact character span that answers it, and the builder checks that the reference answer appears verbatim
in one of its spans and that the asker may see every evidence document. One fixed seed drives the few random
choices, so every run writes the same bytes (tests/data/test_shipped_evalset.py re-generates and compares).
Standard library only.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hospital.build import main  # noqa: E402

if __name__ == "__main__":
    main()
