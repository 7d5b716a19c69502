"""`ragopt eval --save-contexts FILE` and `ragopt sweep --save-contexts DIR` write what reached each prompt; a scorer
written here from Chroma's definitions alone (sets of characters, nothing of ragopt's) reads those files and agrees
with ragopt's chars_* metrics."""

from __future__ import annotations

import json
from pathlib import Path

from fixtures.cli import one_line_error, ragopt

HOSPITAL = Path(__file__).resolve().parents[2] / "evalsets" / "hospital"


def _evidence() -> dict[str, list[tuple[str, int, int]]]:
    out = {}
    for line in (HOSPITAL / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        out[q["id"]] = [(e["doc_id"], e["start"], e["end"]) for e in q.get("evidence", []) if e.get("start") is not None]
    return out


def independent_scores(contexts_file: Path, evidence: dict[str, list[tuple[str, int, int]]], k: int) -> dict[str, float]:
    """Chroma's recall, precision and IoU in characters, means over the questions with evidence spans: each
    character a (doc id, offset) pair; retrieved characters summed over passages (an overlap counts twice)."""
    sums, n = {"recall": 0.0, "precision": 0.0, "iou": 0.0}, 0
    for line in contexts_file.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        gold = {(doc, i) for doc, s, e in evidence[row["id"]] for i in range(s, e)}
        if not gold:
            continue
        top = row["contexts"][:k]
        seen = {(c["doc_id"], i) for c in top for i in range(c["start"], c["end"])}
        covered = len(gold & seen)
        retrieved = sum(c["end"] - c["start"] for c in top)
        sums["recall"] += covered / len(gold)
        sums["precision"] += covered / retrieved if retrieved else 0.0
        sums["iou"] += covered / (retrieved + len(gold) - covered)
        n += 1
    return {name: total / n for name, total in sums.items()}


def test_eval_contexts_scored_independently_match_its_chars_metrics(tmp_path: Path) -> None:
    out = tmp_path / "contexts.jsonl"
    done = ragopt("eval", "--dataset", str(HOSPITAL), "--retriever", "bm25", "--chunk-size", "64", "--chunk-overlap", "16",
                  "--json", "--save-contexts", str(out), workspace=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    metrics = json.loads(done.stdout)["metrics"]
    evidence = _evidence()
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == list(evidence)  # a line per question, in the set's order
    assert all(set(c) == {"doc_id", "start", "end"} for r in rows for c in r["contexts"])
    for k in (5, 10):
        mine = independent_scores(out, evidence, k)
        for name, value in mine.items():
            assert abs(metrics[f"chars_{name}@{k}"] - value) <= 0.002, (name, k, metrics[f"chars_{name}@{k}"], value)
    assert 0 < metrics["chars_iou@5"] < metrics["chars_recall@5"] < 1


def test_sweep_writes_one_contexts_file_per_trial_scored_as_its_metrics(tmp_path: Path) -> None:
    config = tmp_path / "sweep.toml"
    config.write_text('chunk_sizes = [64, 128]\nchunk_overlaps = [0]\nretrievers = ["bm25"]\ntop_k = [3, 5]\n'
                      'gates = ["chars_iou@5>=0.01"]\n', encoding="utf-8")
    contexts = tmp_path / "contexts"
    done = ragopt("sweep", "--config", str(config), "--dataset", str(HOSPITAL), "--out", str(tmp_path / "out"),
                  "--save-contexts", str(contexts), "--no-progress", workspace=tmp_path / "ws")
    assert done.returncode in (0, 1), done.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    evidence = _evidence()
    assert sorted(p.stem for p in contexts.glob("*.jsonl")) == sorted(t["id"] for t in results["trials"])
    for trial in results["trials"]:
        file = contexts / f"{trial['id']}.jsonl"
        assert all(len(json.loads(line)["contexts"]) <= trial["params"]["top_k"] for line in file.read_text().splitlines())
        mine = independent_scores(file, evidence, 5)
        for name, value in mine.items():
            assert abs(trial["metrics"][f"chars_{name}@5"] - value) <= 0.002, (trial["id"], name)
    assert all(v["metric"] == "chars_iou@5" for vs in results["verdicts"].values() for v in vs)
    summary = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    csv_head = (tmp_path / "out" / "results.csv").read_text(encoding="utf-8").splitlines()[0]
    assert "chars_iou@5" in summary and "chars_precision@5" in csv_head


def test_bad_contexts_targets_are_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "taken"
    a_file.write_text("", encoding="utf-8")
    line = one_line_error(ragopt("sweep", "--dataset", str(HOSPITAL), "--save-contexts", str(a_file), workspace=tmp_path / "ws"),
                          "sweep")
    assert "[--save-contexts]" in line and "is a file" in line
    line = one_line_error(ragopt("eval", "--dataset", str(HOSPITAL), "--retriever", "bm25", "--save-contexts", "/nonexistent/c.jsonl",
                                 workspace=tmp_path / "ws"), "eval")
    assert "[--save-contexts]" in line and not (tmp_path / "ws").exists()
