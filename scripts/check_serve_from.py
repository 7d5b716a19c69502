"""Does `ragopt serve --from RESULTS` retrieve what the sweep measured? For every question of a split, the hits
(ids and order) and retrieval stages `/v1/ask` returns against the sweep's trial runner on the same plan, and
nDCG@10 of those outcomes beside the figure results.json recorded for that split.

Usage (from the folder the sweep ran in, with its workspace):
    python scripts/check_serve_from.py --results runs/scifact/results.json --config pipelines/scifact-sweep.toml --split test
Prints one JSON object; exit 1 when any question's hits or stages differ.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


SERVE_STARTUP_S = 1800  # serve loads the sweep's index before it answers; this script used to wait without a limit


def served(results: str, port: int, questions: list[str], workdir: Path) -> list[dict]:
    import httpx

    from ragopt.backends.child_server import served
    from ragopt.errors import ChildServerError

    keys = workdir / "keys.json"
    keys.write_text(json.dumps({"check": {"tenant": "public", "scopes": []}}))
    # the plan is served as measured (a retrieval-only plan answers extractively): no engine flag goes with --from
    cmd = ["ragopt", "serve", "--from", results, "--api-keys", str(keys), "--port", str(port), "--no-cache"]
    try:
        with served(cmd, f"http://127.0.0.1:{port}/healthz", timeout_s=SERVE_STARTUP_S, log=workdir / "serve.log",
                    name="serve", interval_s=1, grace_s=30):
            return [httpx.post(f"http://127.0.0.1:{port}/v1/ask", json={"question": q, "stream": False},
                               headers={"Authorization": "Bearer check"}, timeout=120).json()["trace"] for q in questions]
    except ChildServerError as exc:
        sys.exit(f"check_serve_from: {exc}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", required=True)
    p.add_argument("--config", required=True, help="the sweep TOML the results came from")
    p.add_argument("--split", default="test")
    p.add_argument("--port", type=int, default=8123)
    args = p.parse_args()

    from ragopt.data import load_evalset
    from ragopt.eval.metrics import mean
    from ragopt.eval.scoring import rank_scores
    from ragopt.eval.sweep import SweepConfig
    from ragopt.eval.trials import TrialRunner
    from ragopt.plan import load_plan
    from ragopt.resources import Resources
    from ragopt.workspace import workspace_dir

    from ragopt.config import load_toml
    from ragopt.errors import InputError

    try:  # every input checked before serve starts: one line and exit 2, as ragopt's own commands do
        try:
            saved = load_plan(args.results)
        except InputError as exc:  # load_plan names serve's flag
            raise InputError(exc.message, path=exc.path, line=exc.line, field="--results") from None
        try:
            sweep_config = load_toml(args.config, SweepConfig)
        except InputError as exc:
            raise InputError(exc.message, path=exc.path, line=exc.line, field="--config") from None
        if not sweep_config.dataset:
            raise InputError("the sweep config names no dataset", path=Path(args.config), field="--config")
        dataset = str((Path(args.config).parent / sweep_config.dataset).resolve())  # relative to the config, as sweep reads it
        sweep_config = sweep_config.model_copy(update={"dataset": dataset})
        evalset = load_evalset(dataset, split=args.split)
    except InputError as exc:
        print(f"check_serve_from: {exc}", file=sys.stderr)
        return 2
    with Resources() as resources:
        runner = TrialRunner(evalset, sweep_config, workspace_dir(None), resources, progress=False, remeasure=False)
        outcomes, _ = runner.run(saved.plan, [q.query for q in evalset.queries], "check")
        runner.close()
    recorded = json.loads(Path(args.results).read_text(encoding="utf-8"))
    held = recorded["held_out"]["metrics"] if (recorded.get("held_out") or {}).get("split") == args.split else None
    with tempfile.TemporaryDirectory() as tmp:
        traces = served(args.results, args.port, [q.query.text for q in evalset.queries], Path(tmp))
    same_hits = sum(t["hits"] == [r[0] for r in o.ranking] for t, o in zip(traces, outcomes))
    retrieval = [n for n in outcomes[0].stage_ms if n != "prompt"]  # the sweep's prompt stage only counted tokens
    same_stages = sum([s["name"] for s in t["spans"] if not s["skipped"]][:len(retrieval)] == retrieval for t in traces)
    print(json.dumps({"trial": saved.provenance.trial if saved.provenance else None, "questions": len(traces),
                      "same_hits": same_hits, "same_stages": same_stages, "retrieval_stages": retrieval,
                      "ndcg@10": mean(rank_scores(outcomes, evalset, ["ndcg@10"])["ndcg@10"]),
                      "recorded_ndcg@10": held["ndcg@10"] if held else None}))
    return 0 if same_hits == same_stages == len(traces) else 1


if __name__ == "__main__":
    sys.exit(main())
