"""ragopt/stages/completion.py: the completion settings both LLM generators extend, with their one rule (room for a
prompt) holding for each."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragopt.stages.generate_http import HttpGeneratorConfig
from ragopt.stages.generate_llama import GeneratorConfig

GENERATORS = {"llama": GeneratorConfig, "http": lambda **kw: HttpGeneratorConfig(base_url="http://127.0.0.1:9", **kw)}


@pytest.mark.parametrize("generator", list(GENERATORS))
def test_an_output_budget_that_leaves_no_room_for_a_prompt_is_refused(generator: str) -> None:
    make = GENERATORS[generator]
    assert make(n_ctx=300, max_tokens=100).prompt_budget == 200
    with pytest.raises(ValidationError, match=r"max_tokens \(300\) must be smaller than n_ctx \(300\)"):
        make(n_ctx=300, max_tokens=300)


def test_both_generators_default_to_the_same_output_budget() -> None:
    assert HttpGeneratorConfig(base_url="http://127.0.0.1:9").max_tokens == GeneratorConfig().max_tokens
