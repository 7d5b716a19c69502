"""scripts/requantize_gguf.py: a real llama.cpp re-encoding of the tiny test model, and its bad inputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "requantize_gguf.py"


def requantize(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_writes_a_copy_whose_weights_llama_cpp_loads_as_q4_0(tiny_gguf, tmp_path):
    from gguf import GGUFReader

    out = tmp_path / "tiny-q4_0.gguf"
    done = requantize("--model", str(tiny_gguf), "--type", "q4_0", "--out", str(out))
    assert done.returncode == 0, done.stderr
    types = {t.name: t.tensor_type.name for t in GGUFReader(out).tensors}
    assert types["blk.0.ffn_up.weight"] == "Q4_0" and types["blk.0.attn_norm.weight"] == "F32"
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize("args, flag", [
    (["--type", "q4_0", "--out", "{tmp}/no/such/folder/x.gguf"], "[--out]"),
    (["--model", "{model}", "--type", "q4_0", "--out", "{model}"], "[--out]"),
    (["--type", "q4_0", "--out", "{tmp}/x.gguf", "--model", "{tmp}/missing.gguf"], "[--model]"),
])
def test_a_bad_argument_is_one_line_naming_it(tiny_gguf, tmp_path, args, flag):
    done = requantize(*[a.format(tmp=tmp_path, model=tiny_gguf) for a in args])
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and flag in lines[0], done.stderr
    assert not (tmp_path / "x.gguf").exists()
