"""The tool questions of the hospital set, and the runs the collection-status service serves (docs/tools.md).

Written beside the set's corpus.jsonl by `python scripts/build_hospital.py`:
- collection_runs.jsonl: three ingestion runs per (tenant, job) the corpus names ("loaded by JOB"), the latest one
  failed for about half the jobs (the reason in Chinese for some of South Hospital's), with the sensitive fields
  a run log carries (patient_id, operator, notes) that redaction must keep out of every prompt, trace and log;
- tool_questions.jsonl: for up to two field documents per (tenant, job), a question that needs the document (the
  field's data type: `answer`, with its evidence span) and the job's latest run (why it failed, or how many rows it
  loaded: `live_answer`); some in Chinese.
Templates, failure reasons and names are data (data/tool_questions.json); the output is deterministic.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
JOB = re.compile(r"loaded by ([A-Za-z0-9_]+)")
TYPE = (re.compile(r"^Type: (.+)$", re.M), re.compile(r"^\| Data type \| (.+?) \|$", re.M))
SYSTEM = (re.compile(r"^System: ([^,\n]+)", re.M), re.compile(r"^\| System \| ([^,|]+)", re.M))
TABLE = (re.compile(r"^Source table: (\S+)", re.M), re.compile(r"^\| Source table \| (\S+) \|", re.M))
PER_JOB = 2
SEED = 41


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> re.Match[str]:
    return next(m for p in patterns if (m := p.search(text)))


def field_docs(corpus: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Current field documents by (tenant, job), at most PER_JOB each, in corpus order."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for d in corpus:
        m = JOB.search(d["text"])
        if m and d.get("metadata", {}).get("kind") == "field":
            docs = out.setdefault((d["tenant"], m.group(1)), [])
            if len(docs) < PER_JOB:
                docs.append(d)
    return out


def runs_for(tenant: str, job: str, docs: list[dict[str, Any]], rng: random.Random, data: dict[str, Any],
             zh: bool) -> list[dict[str, Any]]:
    """Three nightly runs, the last failed two times in three."""
    table = _first(TABLE, docs[0]["text"]).group(1)
    column = re.search(r"^(?:Field: |\| Field name \| )(\S+)", docs[0]["text"], re.M).group(1)
    runs = []
    for day in (1, 2, 3):
        failed = day == 3 and rng.random() < 2 / 3
        reason = rng.choice(data["failure_reasons"]["zh" if zh else "en"]).format(table=table, column=column)
        runs.append({
            "run_id": f"{tenant}:{job}:2026-12-0{day}", "job": job, "tenant": tenant,
            "started_at": f"2026-12-0{day}T0{rng.randint(1, 5)}:{rng.randint(10, 59)}:00+00:00",
            "status": "failed" if failed else "succeeded",
            "rows_loaded": 0 if failed else rng.randint(1200, 98000),
            "failure_reason": reason if failed else None,
            "patient_id": f"{'SH' if tenant.startswith('south') else 'NH'}{rng.randint(1000000, 9999999)}-R{day}",
            "operator": rng.choice(data["operators"]),
            "notes": rng.choice(data["notes"]) if failed else None,
        })
    return runs


def question(doc: dict[str, Any], latest: dict[str, Any], lang: str, n: int, data: dict[str, Any]) -> dict[str, Any]:
    typ = _first(TYPE, doc["text"])
    field = doc["id"].split(".")[-1]
    system = _first(SYSTEM, doc["text"]).group(1).strip()
    templates = data["questions"][lang][latest["status"]]
    live = latest["failure_reason"] if latest["status"] == "failed" else str(latest["rows_loaded"])
    return {
        "id": f"tool-{doc['tenant'].split('-')[0]}-{field.lower()}",
        "question": templates[n % len(templates)].format(field=field, system=system),
        "answer": typ.group(1), "live_answer": live,
        "evidence": [{"doc_id": doc["id"], "start": typ.start(1), "end": typ.end(1)}],
        "relevance": {doc["id"]: 2}, "tenant": doc["tenant"], "scopes": doc["scopes"][:1],
    }


def build(folder: Path) -> tuple[int, int]:
    data = json.loads((DATA / "tool_questions.json").read_text(encoding="utf-8"))
    corpus = [json.loads(line) for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line]
    rng = random.Random(SEED)
    runs, questions = [], []
    for i, ((tenant, job), docs) in enumerate(sorted(field_docs(corpus).items())):
        zh = tenant.startswith("south") and i % 2 == 0  # some of South Hospital's jobs log in Chinese
        job_runs = runs_for(tenant, job, docs, rng, data, zh)
        runs += job_runs
        for n, doc in enumerate(docs):
            questions.append(question(doc, job_runs[-1], "zh" if zh and n == 0 else "en", i + n, data))
    for name, rows in (("collection_runs.jsonl", runs), ("tool_questions.jsonl", questions)):
        with open(folder / name, "w", encoding="utf-8", newline="\n") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return len(runs), len(questions)
