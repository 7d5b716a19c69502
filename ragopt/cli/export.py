"""`ragopt export`: a sweep trial's plan as TOML, for `ragopt serve --plan`, `ragopt ask --plan` and ragopt.plan.load_plan."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "export", help="write a sweep trial's plan (the selected one, or --trial) as TOML",
        description="Writes the plan a sweep measured (chunker, embedder, retrieval, every stage; trained models as "
                    "their folders) with what it was measured on (dataset and corpus fingerprint, model fingerprints, "
                    "ragopt version), so serve and ask can refuse it when those change.",
    )
    p.add_argument("--from", dest="from_results", required=True, metavar="RESULTS", help="a sweep's results.json")
    p.add_argument("--trial", default=None, help="this trial instead of the selected one")
    p.add_argument("--out", required=True, metavar="PLAN.toml")
    return p


def run(args: argparse.Namespace) -> int:
    from ragopt.plan import export_toml, load_plan

    saved = load_plan(args.from_results, args.trial)
    out = export_toml(saved, args.out)
    prov = saved.provenance
    print(f"plan of trial {prov.trial if prov else '?'} written to {out}", file=sys.stderr)
    return 0
