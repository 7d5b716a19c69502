"""Provenance names every model file a plan's stages load, as their specs say: the generator's GGUF, and the
rewrite's and history's in llm mode too, so `serve --from` notices when any of them changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.errors import InputError
from ragopt.gguf_meta import model_fingerprint
from ragopt.plan import PlanConfig
from ragopt.plan.saved import ModelRef, Provenance, SavedPlan, check_saved, plan_models


def _plan(gguf: Path, llm_mode: bool = True) -> PlanConfig:
    llm = {"llm": {"model": str(gguf)}}
    return PlanConfig(stages={"rewrite": {"mode": "llm" if llm_mode else "rules", **llm},
                              "history": {"mode": "llm" if llm_mode else "extractive", **llm},
                              "generate": {"generator": "llama", "model": str(gguf)}})


def test_every_model_file_a_stage_loads_is_recorded(tiny_gguf: Path) -> None:
    models = plan_models(_plan(tiny_gguf), "emb-fingerprint")
    assert set(models) == {"embedder", "rewrite", "history", "generator"}
    assert {m.fingerprint for role, m in models.items() if role != "embedder"} == {model_fingerprint(tiny_gguf)}
    assert set(plan_models(_plan(tiny_gguf, llm_mode=False), "emb-fingerprint")) == {"embedder", "generator"}


def test_a_changed_rewrite_model_is_refused(tiny_gguf: Path) -> None:
    plan = _plan(tiny_gguf)
    models = plan_models(plan, "emb-fingerprint")
    recorded = {**models, "rewrite": ModelRef(name=str(tiny_gguf), fingerprint="0" * 16)}
    saved = SavedPlan(plan=plan, provenance=Provenance(trial="t", dataset="/d", corpus_fingerprint="c",
                                                       ragopt=__import__("ragopt").__version__, models=recorded))
    with pytest.raises(InputError, match="the rewrite model .* is not the one measured"):
        check_saved(saved, None, "emb-fingerprint")
    check_saved(saved.model_copy(update={"provenance": saved.provenance.model_copy(update={"models": models})}), None,
                "emb-fingerprint")  # the same files pass
