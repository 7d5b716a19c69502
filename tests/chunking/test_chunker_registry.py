"""The chunker registry (ragopt/chunking/registry.py) and ChunkerConfig: one module per chunker, the names the
config accepts; knobs of another chunker, overlap >= size and an unknown chunker are errors naming the key; `mode`,
the field's name before, still loads (results.json, plans, manifests written then)."""

from __future__ import annotations

import pytest

from ragopt.chunking import chunker_spec, chunker_specs
from ragopt.config import CHUNKERS, ChunkerConfig, chunker_knobs, validate
from ragopt.errors import InputError


def test_every_chunker_the_config_names_has_a_module() -> None:
    assert sorted(chunker_specs()) == sorted(CHUNKERS)
    assert {name: spec.name for name, spec in chunker_specs().items()} == {n: n for n in CHUNKERS}
    with pytest.raises(InputError) as err:
        chunker_spec("sentences")
    assert err.value.field == "chunker.chunker"


@pytest.mark.parametrize(("values", "key", "detail"), [
    ({"chunker": "paragraphs"}, "chunker", "'recursive'"),
    ({"chunker": "tokens", "percentile": 80}, "(top level)", "chunker.percentile: the tokens chunker has no knob"),
    ({"chunker": "whole", "size": 64}, "(top level)", "chunker.size"),
    ({"chunker": "recursive", "size": 64, "overlap": 64}, "(top level)", "smaller than size"),
    ({"chunker": "semantic", "percentile": 101}, "percentile", "100"),
    ({"chunker": "recursive", "colour": "red"}, "colour", "Extra inputs"),
    ({"mode": "tokens", "chunker": "recursive"}, "(top level)", "disagree"),
])
def test_a_bad_chunker_config_names_its_key(values: dict, key: str, detail: str) -> None:
    with pytest.raises(InputError) as err:
        validate(ChunkerConfig, values, "plan.toml")
    assert err.value.field == key and detail in err.value.message, err.value


def test_mode_still_loads_and_each_chunker_lists_its_knobs() -> None:
    assert ChunkerConfig.model_validate({"mode": "tokens", "size": 64, "overlap": 16}) == ChunkerConfig(chunker="tokens", size=64, overlap=16)
    assert chunker_knobs("whole") == ["headers"]
    assert set(chunker_knobs("semantic")) == {"size", "tokenizer", "min_size", "percentile", "threshold", "headers"}
    assert [ChunkerConfig(chunker=c).label for c in CHUNKERS] == ["256/0", "recursive 256/0", "semantic 256 p90", "whole"]
