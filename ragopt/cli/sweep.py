"""`ragopt sweep`: chunk size x retriever x fusion x TopK against quality gates; exits 0 pass, 1 fail, 2 bad input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ragopt.cli import _common, _observe
from ragopt.cli.judge import add_judge_args, judge_flags


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("sweep", help="sweep configurations, pick the cheapest one that passes the gates")
    p.add_argument("--dataset", help="a BEIR folder or ragopt evaluation set (default: the shipped hospital set)")
    _common.add_docs_args(p)  # documents without questions: a set is generated from them first (ragopt synth)
    p.add_argument("--config", help="a sweep TOML, or a shipped config's name (`ragopt sweep --config hospital-citations`; "
                                    "default: hospital-sweep for the shipped set, the shipped config made for --dataset "
                                    "where there is one, e.g. cmrc-sweep)")
    p.add_argument("--out", default="runs/sweep", help="output folder (default: runs/sweep)")
    p.add_argument("--gate", action="append", default=[], metavar="EXPR", help="e.g. recall@10>=0.9 (repeatable; adds to the config's)")
    p.add_argument("--chunk-sizes", help="comma-separated token sizes and/or 'whole', e.g. 128,256,whole")
    p.add_argument("--chunkers", help="comma-separated chunkers tried at each size: tokens,recursive,semantic,whole "
                                      "(docs/chunking.md)")
    p.add_argument("--retrievers", help="comma-separated: dense,bm25,hybrid")
    p.add_argument("--top-k", help="comma-separated, e.g. 1,3,5,10")
    _common.add_runtime_arg(p)
    p.add_argument("--baseline", help="a previous results.json: fail on a significant regression")
    p.add_argument("--tolerance", type=float, default=None, help="allowed drop before a regression fails (default 0.02)")
    p.add_argument("--save-runs", action="store_true", help="write one TREC run file per trial under OUT/runs/")
    p.add_argument("--save-contexts", metavar="DIR",
                   help="write what reached each trial's prompt as DIR/TRIAL_ID.jsonl: a line per question, "
                        '{"id", "contexts": [{"doc_id", "start", "end"}, ...]} in prompt order')
    p.add_argument("--remeasure", action="store_true", help="run every stage again to re-measure latency instead of reusing an earlier run's")
    p.add_argument("--set", action="append", default=[], metavar="KIND.KNOB=V1,V2",
                   help="a stage knob's values, e.g. rerank.depth=0,20,50, the vector store's, e.g. "
                        "store.hnsw_ef=32,64,128, or the chunkers', e.g. chunker.percentile=80,95 (repeatable; see "
                        "`ragopt stages`, docs/vector-stores.md, docs/chunking.md)")
    p.add_argument("--select-split", help="select the configuration on this split (e.g. train) ...")
    p.add_argument("--report-split", help="... and report it, with bootstrap intervals, on this one (e.g. test)")
    p.add_argument("--holdout", type=float, help="no splits: select on a seeded random share of queries, report on the rest (e.g. 0.3)")
    p.add_argument("--search", choices=["grid", "optuna"], help="grid (every trial) or optuna (TPE, seeded, --max-trials)")
    p.add_argument("--max-trials", type=int, help="optuna: how many trials to sample")
    p.add_argument("--seed", type=int, help="seed of the sampler, the holdout split and bootstrap intervals")
    p.add_argument("--executor", choices=["local", "ray"],
                   help="local (default: trials in this process) or ray (trials as Ray tasks; pip install 'ragopt[ray]'). "
                        "Every Ray worker must read and write the workspace at the same path: on a cluster, "
                        "`ragopt --workspace DIR` on a shared file system (vectors may go to a Qdrant server: "
                        "[store] url)")
    p.add_argument("--address", "--ray-address", dest="address", metavar="ADDR",
                   help="with --executor ray: the Ray cluster, e.g. ray://HEAD:10001, or auto on a node of one started "
                        "with `ray start` (default: a new local Ray instance)")
    race = p.add_mutually_exclusive_group()
    race.add_argument("--race", dest="race", action="store_const", const="on",
                      help="race trials on growing question subsets, answering only those that can still win "
                           "(default: on when some trial answers with an LLM; docs/sweep.md)")
    race.add_argument("--no-race", dest="race", action="store_const", const="off", help="answer every question in every trial")
    p.add_argument("--race-confidence", type=float, metavar="C", help="how sure a race's drop must be, in (0, 1) (default 0.95)")
    p.add_argument("--race-schedule", metavar="S1,S2,...",
                   help="shares of the questions answered by the end of each round, ending at 1 (default 0.1,0.25,0.5,1)")
    p.add_argument("--race-min-questions", type=int, metavar="N", help="questions a round answers at least (default 20)")
    add_judge_args(p, model_flag="--judge-model")
    _observe.add_mlflow_arg(p)
    _observe.add_trace_args(p)
    p.add_argument("--no-progress", action="store_true")
    return p


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def load_config(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from ragopt.errors import InputError

    data, source = _config_data(args)
    flags = _apply_flags(args, data)
    data["gates"] = list(data.get("gates") or []) + list(args.gate)
    if args.baseline:
        data["baseline"] = {**(data.get("baseline") or {}), "path": args.baseline}
    if args.tolerance is not None:
        if not data.get("baseline"):
            raise InputError("--tolerance needs --baseline", field="--tolerance")
        data["baseline"]["tolerance"] = args.tolerance
    config = _validate_naming_flags(data, source, flags)
    _check_gate_metrics(config, len(data["gates"]) - len(args.gate), source)
    _common.require_runtime(config.embedder.runtime, flags.get("embedder", "embedder.runtime"),
                            None if "embedder" in flags else source)
    try:
        config.races(config.plans())  # --race with nothing to race
    except InputError as exc:
        raise InputError(exc.message, field=flags.get("race", "race"), path=None if "race" in flags else source) from None
    if config.executor == "ray":
        from ragopt.backends.ray_cluster import require_ray

        require_ray(field=flags.get("executor", "executor"), path=None if "executor" in flags else source)
    return config


def _check_gate_metrics(config: Any, from_config: int, source: str) -> None:
    """A gate on a metric no sweep makes, before any work (and any workspace): one line naming the file's `gates` or
    --gate. Whether this evaluation set makes the metric (spans, references) is checked later."""
    from ragopt.errors import InputError
    from ragopt.eval.gates import check_known
    from ragopt.eval.results import COST_NAMES

    for i, gate in enumerate(config.gates):
        try:
            check_known([gate], config.metric_names(True, True, True) + list(COST_NAMES))
        except InputError as exc:
            raise InputError(exc.message, field="gates" if i < from_config else "--gate", path=source if i < from_config else None) from None


def _config_data(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The sweep config before the flags: --config, else the shipped config for the dataset (the hospital one
    when none is given), else the defaults; with the dataset to sweep, a path relative to the config file
    resolved against it. Returns (the config's fields, where they came from)."""
    from ragopt.config import load_toml
    from ragopt.errors import InputError
    from ragopt.eval.sweep import SweepConfig
    from ragopt.shipped import default_config_for, resolve_config, shipped_config, shipped_dataset

    if args.docs and args.dataset:
        raise InputError("give --dataset (questions) or --docs (documents to generate them from), not both", field="--docs")
    config_path = resolve_config(args.config) if args.config else None
    if config_path is None and args.dataset:
        config_path = default_config_for(Path(args.dataset))
    elif config_path is None and not args.docs:
        config_path = shipped_config()
    data = SweepConfig().model_dump(mode="json") if config_path is None else load_toml(config_path, SweepConfig).model_dump(mode="json")
    source = str(config_path or "command line")
    if args.dataset or args.docs:
        data["dataset"] = args.dataset or args.docs  # --docs: replaced by the generated set's folder in run()
    elif not data.get("dataset"):
        data["dataset"] = str(shipped_dataset())
    elif config_path is not None and not Path(data["dataset"]).is_absolute():
        data["dataset"] = str((Path(config_path).parent / data["dataset"]).resolve())
    return data, source


def _apply_flags(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, str]:
    """Puts the sweep flags given into the config's fields. Returns config key -> the flag that set it, so an
    error names what the user typed."""
    flags = {}
    if args.chunk_sizes:
        data["chunk_sizes"] = [s if s == "whole" else _int(s, "--chunk-sizes") for s in _split(args.chunk_sizes)]
        flags["chunk_sizes"] = "--chunk-sizes"
    if args.chunkers:
        data["chunkers"] = _split(args.chunkers)
        flags["chunkers"] = "--chunkers"
    if args.retrievers:
        data["retrievers"] = _split(args.retrievers)
        flags["retrievers"] = "--retrievers"
    if args.top_k:
        data["top_k"] = [_int(k, "--top-k") for k in _split(args.top_k)]
        flags["top_k"] = "--top-k"
    if args.embedder_runtime:
        data["embedder"] = {**(data.get("embedder") or {}), "runtime": args.embedder_runtime}
        flags["embedder"] = "--embedder-runtime"
    _apply_stage_settings(args.set, data, flags)
    for name in ("select_split", "report_split", "holdout", "search", "max_trials", "seed"):
        if getattr(args, name) is not None:
            data[name] = getattr(args, name)
            flags[name] = "--" + name.replace("_", "-")
    _apply_race_flags(args, data, flags)
    if args.executor is not None:
        data["executor"], flags["executor"] = args.executor, "--executor"
    if args.address is not None:
        data["ray_address"], flags["ray_address"] = args.address, "--address"
    judge = judge_flags(args)
    if judge:
        data["judge"] = {**(data.get("judge") or {}), **judge}
        flags["judge"] = "--judge"
    return flags


def _apply_race_flags(args: argparse.Namespace, data: dict[str, Any], flags: dict[str, str]) -> None:
    from ragopt.errors import InputError

    for name in ("race", "race_confidence", "race_min_questions"):
        if getattr(args, name) is not None:
            data[name], flags[name] = getattr(args, name), "--" + name.replace("_", "-")
    if args.race_schedule is not None:
        try:
            data["race_schedule"] = [float(share) for share in _split(args.race_schedule)]
        except ValueError:
            raise InputError(f"expected shares such as 0.1,0.25,0.5,1, got {args.race_schedule!r}", field="--race-schedule") from None
        flags["race_schedule"] = "--race-schedule"


def _apply_stage_settings(assignments: list[str], data: dict[str, Any], flags: dict[str, str]) -> None:
    """--set KIND.KNOB=V1,V2 into the config's stages, then each kind's settings checked together."""
    from ragopt.errors import InputError
    from ragopt.plan import validate_stage_values

    for assignment in assignments:
        kind, knob, values = _stage_setting(assignment)
        if kind in ("store", "chunker"):  # the vector store's knobs (STORE_KNOBS), the chunkers': checked with the config
            data.setdefault(kind, {})[knob] = values if len(values) > 1 else values[0]
            flags[kind] = "--set"
            continue
        data.setdefault("stages", {}).setdefault(kind, {})[knob] = values if len(values) > 1 else values[0]
        flags["stages"] = "--set"
    for kind in {_stage_setting(a)[0] for a in assignments} - {"store", "chunker"}:
        try:
            validate_stage_values(kind, data["stages"][kind], "--set")
        except InputError as exc:  # named as the flag names it: KIND.KNOB
            named = f"{kind}.{exc.field.rpartition('.')[2]}: " if exc.field and exc.field != "--set" else ""
            raise InputError(named + exc.message, field="--set") from None


def _validate_naming_flags(data: dict[str, Any], source: str, flags: dict[str, str]):  # type: ignore[no-untyped-def]
    """The SweepConfig, or its validation error, naming the flag that set the faulty field where a flag did."""
    from ragopt.config import validate
    from ragopt.errors import InputError
    from ragopt.eval.sweep import SweepConfig

    try:
        return validate(SweepConfig, data, source)
    except InputError as exc:
        # a rule across keys names its key in the message ("store.hnsw_ef: ...")
        flag = flags.get((exc.field or "").split(".")[0]) or flags.get(exc.message.split(".", 1)[0])
        if flag is None:
            raise
        raise InputError(exc.message.removeprefix("Value error, "), field=flag) from None


def _stage_setting(assignment: str) -> tuple[str, str, list[Any]]:
    """"rerank.depth=0,20,50" -> ("rerank", "depth", [0, 20, 50]); values parsed as JSON where they can be."""
    from ragopt.errors import InputError

    target, sep, raw = assignment.partition("=")
    kind, dot, knob = target.partition(".")
    if not (sep and dot and kind and knob and raw):
        raise InputError(f"expected KIND.KNOB=V1,V2, got {assignment!r}", field="--set")
    values = []
    for item in _split(raw):
        try:
            values.append(json.loads(item))
        except json.JSONDecodeError:
            values.append(item)
    return kind, knob, values


def _int(value: str, flag: str) -> int:
    from ragopt.errors import InputError

    try:
        return int(value)
    except ValueError:
        raise InputError(f"expected an integer, got {value!r}", field=flag) from None


def judge_lines(results: Any) -> list[str]:
    """Per judged trial: each judged metric with its 95% bootstrap interval, and what the judging cost."""
    from ragopt.eval.report_common import fmt_interval, judge_cost_text, judged_trials

    lines = []
    for t, intervals, costs in judged_trials(results):
        figures = ", ".join(f"{name} {fmt_interval(iv)}" for name, iv in intervals.items()) or "no judged answers"
        lines.append(f"  judged {t.id}: {figures}; {judge_cost_text(costs)}")
    return lines


def _evalsets(config):  # type: ignore[no-untyped-def]
    """(selection set, report set or None, report split's name or None), as the config's splits or holdout say."""
    from ragopt.data import load_evalset
    from ragopt.eval.heldout import split_holdout

    if config.select_split:
        return (load_evalset(config.dataset, split=config.select_split),
                load_evalset(config.dataset, split=config.report_split), config.report_split)
    evalset = load_evalset(config.dataset, split=config.split)
    if config.holdout:
        evalset, report_set = split_holdout(evalset, config.holdout, config.seed)
        return evalset, report_set, f"holdout {config.holdout:g} (seed {config.seed})"
    return evalset, None, None


def _say(text: str, file: Any = None) -> None:
    """One line of notes, wrapped to the terminal's width (continuation lines indented)."""
    import textwrap

    from ragopt.eval.report_terminal import TABLE_WIDTH

    print(textwrap.fill(text, TABLE_WIDTH, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False),
          file=file)


def _print_selection(results) -> int:  # type: ignore[no-untyped-def]
    """The selected trial, or why none passes (exit 1); the held-out split's intervals; noise and baseline notes."""
    import sys

    from ragopt.eval.report import closest_trial

    code = 0
    if results.selected:
        print(f"selected: {results.selected}  (* selected, + passes every gate)")
    else:
        code = 1
        print("no trial passes every gate:", file=sys.stderr)
        best = closest_trial(results)
        for v in results.verdicts[best.id]:
            if not v.passed:
                _say(f"  closest trial {best.id}: {v.message}", file=sys.stderr)
        for gate in results.gates:
            passing = sum(1 for t in results.trials if any(v.gate == gate and v.passed for v in results.verdicts[t.id]))
            print(f"  {gate}: passed by {passing} of {len(results.trials)} trials", file=sys.stderr)
    if results.held_out is not None:
        h = results.held_out
        print(f"held out ({h.split}, {h.n_queries} queries; selected on {h.selection_split}):")
        for name, interval in h.intervals.items():
            chosen = h.selection_intervals.get(name)
            flag = "  OVERFIT: outside the selection interval" if h.overfit.get(name) else ""
            sel = f"  (selection {chosen.mean:.4f} [{chosen.low:.4f}, {chosen.high:.4f}])" if chosen else ""
            print(f"  {name:<14} {interval.mean:.4f} [{interval.low:.4f}, {interval.high:.4f}]{sel}{flag}")
    for v in results.verdicts.get(results.selected or "", []):
        if v.within_noise:
            _say(f"note: gate {v.gate} passes only within noise: {v.message}")
    if results.baseline is not None:
        for v in results.baseline.verdicts:
            _say(f"baseline: {v.message}")
        if results.baseline.regressed:
            code = 1
            print("regression against the baseline beyond the tolerance", file=sys.stderr)
    return code


def _print_results(results) -> None:  # type: ignore[no-untyped-def]
    """The objective, the gates and the key columns of the trials (the rest: results.csv, summary.md, report.html)."""
    from ragopt.eval.race import race_lines
    from ragopt.eval.report_terminal import TABLE_ROWS, table_lines

    if results.dataset.generated:
        print(f"figures from a generated set: {results.dataset.generated}")
    _say(f"objective: {results.objective}")
    print(f"gates: {', '.join(results.gates) or '(none)'}")
    more = len(results.trials) - TABLE_ROWS
    hidden = [f"  ... {more} more {'trial' if more == 1 else 'trials'} in results.csv"] if more > 0 else []
    for line in [*table_lines(results), *hidden, *judge_lines(results), *(race_lines(results.race) if results.race else [])]:
        print(line)


def run(args: argparse.Namespace) -> int:
    import sys

    from ragopt.config import needs_vectors
    from ragopt.eval.bootstrap import compare_to_baseline
    from ragopt.eval.report import write_outputs
    from ragopt.eval.results import SweepResults
    from ragopt.eval.sweep import confirm, run_sweep
    from ragopt.backends.embeddings import language_warning

    config = load_config(args)
    if args.save_contexts and Path(args.save_contexts).exists() and not Path(args.save_contexts).is_dir():
        from ragopt.errors import InputError

        raise InputError("is a file, expected a folder", path=args.save_contexts, field="--save-contexts")
    baseline = SweepResults.load(config.baseline.path) if config.baseline else None  # read before any work
    mlflow = _observe.mlflow_uri(args)
    tracing = _observe.tracing(args, "sweep")
    if args.docs:
        config = config.model_copy(update={"dataset": str(_common.generated_set(args, config.seed, not args.no_progress))})
    evalset, report_set, report_name = _evalsets(config)
    out = Path(args.out)
    workspace = _common.workspace(args)
    dense = any(map(needs_vectors, config.retrievers))
    warning = language_warning([e.model for e in config.embedder_configs()], (d.text for d in evalset.documents)) if dense else None
    if warning:
        _say(warning, file=sys.stderr)
    outcome = run_sweep(
        evalset, config, workspace, progress=not args.no_progress,
        runs_dir=out / "runs" if args.save_runs else None, remeasure=args.remeasure,
        contexts_dir=Path(args.save_contexts) if args.save_contexts else None,
        on_trial=_observe.trial_exporter(tracing, {q.query.id: q.query.text for q in evalset.queries}) if tracing else None,
    )
    if tracing is not None:
        tracing.shutdown()  # the trials' traces are all queued: send them
    if not config.gates:
        _say("warning: no quality gates, so every trial passes and the cheapest (smallest K) is selected; "
             "add --gate, e.g. --gate 'recall@10>=0.9'", file=sys.stderr)
    results = outcome.results
    if report_set is not None:
        confirm(outcome, report_set, workspace, split=report_name, selection_split=config.select_split or "selection",
                progress=not args.no_progress)
    paths = write_outputs(results, out, outcome.latencies)  # written before any comparison can fail
    if baseline is not None:
        results.baseline = compare_to_baseline(
            results, baseline, config.baseline.tolerance, baseline_path=config.baseline.path, metrics=config.baseline.metrics
        )
        paths = write_outputs(results, out, outcome.latencies)

    print(f"{evalset.name}: {len(evalset.documents)} documents, {len(evalset.queries)} queries, "
          f"{len(results.trials)} trials in {outcome.seconds:.1f} s")
    _print_results(results)
    _say(f"outputs in {out}: {', '.join(p.name for p in paths.values())}")
    if mlflow is not None:
        _observe.log_sweep(mlflow, results, paths)
    return _print_selection(results)
