"""A plan kept apart from the run that chose it: a sweep trial read from results.json (the selected one, or one
named), written to TOML (`ragopt export`) and read back, always with what it was measured on (dataset path and
corpus fingerprint, model fingerprints, ragopt version). `check_saved` refuses, before anything is built, a
plan whose dataset, models or ragopt version no longer match: one line naming what differs.

results.json is read through ragopt.plan.results_file (the one reader, which checks its schema version; the
full model lives in ragopt.eval, a room above this one); only the fields a rebuild needs are used.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragopt.config import StrictModel, validate
from ragopt.errors import InputError
from ragopt.plan.model import PlanConfig
from ragopt.plan.results_file import read_results
from ragopt.types import Document


class ModelRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    fingerprint: str


class Provenance(StrictModel):
    """What a plan was measured on."""

    trial: str
    dataset: str = Field(description="the evaluation set's path, absolute")
    corpus_fingerprint: str
    ragopt: str = Field(description="the ragopt version that measured it")
    models: dict[str, ModelRef] = Field(default_factory=dict, description="by role: embedder, then each stage's (rerank, generator, ...)")


class SavedPlan(StrictModel):
    plan: PlanConfig
    provenance: Provenance | None = None
    source: str | None = Field(None, exclude=True, description="the file it was read from, for messages")


def plan_models(plan: PlanConfig, embedder_fingerprint: str) -> dict[str, ModelRef]:
    """The models a plan's answers depend on, each by the fingerprint of its files: the embedder (as the index
    was built with it), then every model file a stage of the plan loads, as its spec names them (a reranker's
    folder, the generator's GGUF, the rewrite's and history's GGUF in llm mode, ...)."""
    from ragopt.plan.registry import spec_for

    models = {"embedder": ModelRef(name=plan.embedder.model, fingerprint=embedder_fingerprint)}
    for kind in sorted(plan.stages):
        spec = spec_for(kind)
        if spec.models is not None:
            for role, file in spec.models(plan.stage_config(kind)).items():
                models[role] = ModelRef(name=file.name, fingerprint=file.fingerprint)
    return models


def from_results(path: str | Path, trial: str | None = None) -> SavedPlan:
    """The selected trial of a sweep's results.json (or the one named `trial`), with its provenance."""
    path = Path(path)
    data = read_results(path, flag="--from")
    wanted = trial or data.get("selected")
    if wanted is None:
        raise InputError("no trial passed the sweep's gates; name one with --trial ID", path=path, field="--trial")
    found = next((t for t in data.get("trials", []) if t.get("id") == wanted), None)
    if found is None:
        known = ", ".join(t.get("id", "?") for t in data.get("trials", [])[:5])
        raise InputError(f"no trial {wanted!r} (trials: {known}{', ...' if len(data.get('trials', [])) > 5 else ''})",
                         path=path, field="--trial")
    if not found.get("plan"):
        raise InputError("this results.json records no plan per trial (made before ragopt recorded them): run the sweep again",
                         path=path, field="--from")
    plan = validate(PlanConfig, found["plan"], path)  # a bad plan names its key, e.g. trials' retrieval.fusion
    dataset = data["dataset"]
    try:
        return SavedPlan(
            plan=plan, source=str(path),
            provenance=Provenance(trial=wanted, dataset=_dataset_path(dataset["path"], path),
                                  corpus_fingerprint=dataset["fingerprint"].split(":")[0],
                                  ragopt=data["versions"]["ragopt"], models=found.get("models", {})),
        )
    except (ValidationError, KeyError) as exc:
        raise InputError(f"not a results.json of this ragopt: {exc}".splitlines()[0], path=path, field="--from") from None


def _dataset_path(recorded: str, results: Path) -> str:
    """A recorded relative dataset path is taken from where the sweep ran, else from beside results.json."""
    candidate = Path(recorded)
    if not candidate.is_absolute() and not candidate.exists():
        candidate = results.parent / recorded
    return str(candidate.resolve())


def check_saved(saved: SavedPlan, documents: Sequence[Document] | None, embedder_fingerprint: str) -> None:
    """Refuse a plan measured on other data, models or code than this process has. `documents`: the plan's own
    dataset as it is now (see `load_documents`), compared with the corpus the sweep measured; None when the
    plan is applied to other documents on purpose (`--docs`), which nothing here can compare."""
    prov = saved.provenance
    if prov is None:
        return
    from ragopt import __version__
    from ragopt.index import corpus_fingerprint

    where = saved.source
    if prov.ragopt != __version__:
        raise InputError(f"measured by ragopt {prov.ragopt}, this is ragopt {__version__}: run the sweep again", path=where,
                         field="ragopt")
    if documents is not None and corpus_fingerprint(documents) != prov.corpus_fingerprint:
        raise InputError(f"the corpus of {prov.dataset} changed since trial {prov.trial} was measured "
                         f"(fingerprint {corpus_fingerprint(documents)[:12]}, measured {prov.corpus_fingerprint[:12]})",
                         path=where, field="dataset")
    now = plan_models(saved.plan, embedder_fingerprint)
    for role, ref in prov.models.items():
        current = now.get(role)
        if current is None or current.fingerprint != ref.fingerprint:
            got = "missing" if current is None else f"fingerprint {current.fingerprint[:12]}"
            raise InputError(f"the {role} model {ref.name} is not the one measured ({got}, measured {ref.fingerprint[:12]})",
                             path=where, field=f"models.{role}")


def load_documents(saved: SavedPlan) -> list[Document]:
    """The documents of the dataset the plan was measured on (a missing dataset is one line)."""
    if saved.provenance is None:
        raise InputError("this plan names no dataset: give --dataset or --docs", path=saved.source)
    from ragopt.data import load_evalset

    dataset = Path(saved.provenance.dataset)
    if not dataset.exists():
        raise InputError(f"the dataset trial {saved.provenance.trial} was measured on is gone", path=dataset, field="dataset")
    return load_evalset(dataset).documents


def export_toml(saved: SavedPlan, out: str | Path) -> Path:
    """Write the plan (and its provenance) as TOML; reading it back must give the same plan, or nothing is written."""
    out = Path(out)
    data = saved.model_dump(mode="json", exclude_none=True)
    text = "# ragopt plan: `ragopt serve --plan` / `ragopt ask --plan` / ragopt.plan.load_plan rebuild it\n" + _toml(data)
    if PlanConfig.model_validate(tomllib.loads(text)["plan"]) != saved.plan:
        raise InputError("this plan holds a value TOML cannot write (a None where a default is not None)", field="--out")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


def load_plan_toml(path: str | Path) -> SavedPlan:
    """A plan written by `export_toml` (or by hand: a [plan] table, optionally [provenance])."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("plan file not found", path=path, field="--plan") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"invalid TOML: {exc}", path=path, field="--plan") from None
    saved = validate(SavedPlan, data, str(path))
    return saved.model_copy(update={"source": str(path)})


def load_plan(path: str | Path, trial: str | None = None) -> SavedPlan:
    """A saved plan from a sweep's results.json (the selected trial, or `trial`) or from a plan TOML."""
    if Path(path).suffix == ".toml":
        if trial is not None:
            raise InputError("--trial goes with a results.json, not a plan file", field="--trial")
        return load_plan_toml(path)
    return from_results(path, trial)


def open_saved(saved: SavedPlan, workspace: str | Path, *, documents: Sequence[Document] | None = None,
               resources: Any = None, store: Any = None, progress: bool = False, cache_queries: bool = True) -> tuple[Any, Any]:
    """The saved plan's pipeline over its own dataset (or over `documents`), after `check_saved`; returns
    (pipeline, index build report). Nothing is built when the check refuses.

        from ragopt.plan import load_plan, open_saved
        pipeline, _ = open_saved(load_plan("runs/main/results.json"), ".ragopt")
        print(pipeline.run(Query(text="...")).answer.text)
    """
    from ragopt.index import make_embedder
    from ragopt.plan.assemble import open_plan

    own = documents is None
    documents = load_documents(saved) if own else documents
    embedder = make_embedder(workspace, saved.plan.embedder, resources)
    check_saved(saved, documents if own else None, embedder.fingerprint)
    return open_plan(saved.plan, documents, Path(workspace), store=store, resources=resources, progress=progress,
                     cache_queries=cache_queries)


def _toml(data: dict[str, Any], prefix: str = "") -> str:
    """Tables after plain keys, nested tables as [a.b]; None values are left out."""
    plain = {k: v for k, v in data.items() if not isinstance(v, dict) and v is not None}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    lines = [f"{_key(k)} = {_value(v)}" for k, v in plain.items()]
    out = (f"\n[{prefix}]\n" if prefix and (plain or not tables) else "") + "".join(line + "\n" for line in lines)
    for k, v in tables.items():
        out += _toml(v, f"{prefix}.{_key(k)}" if prefix else _key(k))
    return out


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise InputError(f"cannot write {value!r} as TOML", field="--out")
