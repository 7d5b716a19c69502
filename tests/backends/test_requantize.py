"""ragopt.backends.requantize: cached copies of a model in another weight type, made by llama.cpp's quantizer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

from ragopt.backends.requantize import cached_copy, engine_model  # noqa: E402
from ragopt.errors import InputError  # noqa: E402


def weight_types(path: Path) -> dict[str, str]:
    from gguf import GGUFReader

    return {t.name: t.tensor_type.name for t in GGUFReader(path).tensors}


def test_a_q8_0_copy_is_made_once_in_the_model_cache_and_reused(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("RAGOPT_MODEL_CACHE", str(tmp_path / "models"))
    copy = engine_model(tiny_gguf, "q8_0")
    assert copy.parent == tmp_path / "models" and copy != tiny_gguf
    assert weight_types(copy)["blk.0.ffn_up.weight"] == "Q8_0"
    assert weight_types(tiny_gguf)["blk.0.ffn_up.weight"] != "Q8_0"
    made = copy.stat().st_mtime_ns
    assert engine_model(tiny_gguf, "q8_0") == copy and copy.stat().st_mtime_ns == made  # not written again
    assert [p.name for p in (tmp_path / "models").iterdir()] == [copy.name]  # no partial file left behind


def test_an_edited_model_gets_its_own_copy(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("RAGOPT_MODEL_CACHE", str(tmp_path / "models"))
    edited = tmp_path / tiny_gguf.name
    shutil.copy(tiny_gguf, edited)
    first = cached_copy(edited, "q8_0")
    with open(edited, "ab") as f:
        f.write(b"\0" * 32)  # GGUF tensor data is aligned: trailing padding keeps the file loadable
    assert cached_copy(edited, "q8_0") != first


def test_weights_file_is_the_model_itself(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("RAGOPT_MODEL_CACHE", str(tmp_path / "models"))
    assert engine_model(tiny_gguf, "file") == tiny_gguf
    assert not (tmp_path / "models").exists()


def test_a_cache_folder_that_cannot_be_made_is_one_input_error_naming_it(tiny_gguf, tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("RAGOPT_MODEL_CACHE", str(tmp_path / "a-file" / "models"))
    with pytest.raises(InputError, match="RAGOPT_MODEL_CACHE") as err:
        engine_model(tiny_gguf, "q8_0")
    assert err.value.path == str(tmp_path / "a-file" / "models")
