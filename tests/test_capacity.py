"""KV capacity arithmetic, `ragopt capacity`, and agreement with the KV size llama.cpp itself allocates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fixtures.tiny_gguf import HEAD_DIM, KV_BYTES_PER_TOKEN_F16, N_HEAD, N_HEAD_KV, N_LAYER

from ragopt import capacity as cap
from ragopt.cli import main
from ragopt.errors import AdmissionError
from ragopt.gguf_meta import model_shape, read_metadata

WORKED = cap.ModelShape(n_layer=32, n_head_kv=8, head_dim=128, n_head=32)


def test_worked_example_numbers():
    assert cap.kv_bytes_per_token(WORKED, "f16") == 128 * 1024
    assert cap.kv_bytes(WORKED, 8192, "f16") == 2**30
    assert cap.kv_bytes_per_token(WORKED, "f32") == 256 * 1024
    assert cap.kv_bytes_per_token(WORKED, "q8_0") == 32 * 8 * 128 * 2 * 34 / 32  # 68 KiB


def test_worked_example_cli(capsys):
    assert main(["capacity", "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--dtype", "f16", "--seq", "8192"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"KV per token:\s+128 KiB", out), out
    assert re.search(r"KV per sequence:\s+1 GiB at 8192 tokens", out), out


def test_gqa_and_mqa_scale_with_kv_heads_not_query_heads():
    mha = cap.ModelShape(n_layer=32, n_head_kv=32, head_dim=128, n_head=32)
    mqa = cap.ModelShape(n_layer=32, n_head_kv=1, head_dim=128, n_head=32)
    assert cap.kv_bytes_per_token(mha) == 4 * cap.kv_bytes_per_token(WORKED) == 32 * cap.kv_bytes_per_token(mqa)
    assert WORKED.gqa_ratio == 4 and mqa.gqa_ratio == 32


def test_per_layer_kv_heads_and_separate_v_type():
    shape = cap.ModelShape(n_layer=3, n_head_kv=(2, 0, 4), head_dim=64)
    assert cap.kv_bytes_per_token(shape, "f16") == (2 + 0 + 4) * 64 * 4
    assert cap.kv_bytes_per_token(shape, "f16", "q8_0") == 6 * 64 * (2 + 34 / 32)
    with pytest.raises(cap.InputError):
        cap.ModelShape(n_layer=2, n_head_kv=(1, 2, 3), head_dim=64)
    with pytest.raises(cap.InputError):
        cap.dtype_bytes("f12")


def test_budget_concurrency_littles_law_replicas():
    budget = cap.MemoryBudget(total_bytes=80 * cap.GiB, weights_bytes=16 * cap.GiB, reserve_bytes=2 * cap.GiB, margin_fraction=0.10)
    assert budget.kv_bytes == pytest.approx(54 * cap.GiB)
    per_seq = cap.kv_bytes(WORKED, 8192)  # 1 GiB
    assert cap.max_concurrent_sequences(budget, per_seq) == 54
    assert cap.littles_law_in_flight(20, 3.0) == 60
    assert cap.replicas_needed(60, 54) == 2
    assert cap.replicas_needed(54, 54) == 1
    assert cap.replicas_needed(0, 54) == 0
    assert cap.replicas_needed(10, 0) is None
    tight = cap.MemoryBudget(total_bytes=20 * cap.GiB, weights_bytes=19 * cap.GiB)
    assert cap.max_concurrent_sequences(tight, per_seq) == 0  # negative room: nothing fits
    report = cap.plan(WORKED, 8192, budget=budget, rate_per_s=20, latency_s=3)
    assert (report.max_sequences, report.in_flight, report.replicas) == (54, 60, 2)


def test_capacity_cli_budget_and_rate(capsys):
    argv = ["capacity", "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--seq", "8192",
            "--memory", "80GiB", "--weights", "16GiB", "--reserve", "2GiB", "--rate", "20", "--latency", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "max concurrent:   54 sequences" in out
    assert "60.00 requests in flight" in out
    assert "replicas needed:  2" in out


def test_capacity_cli_bad_input_exits_2(capsys):
    assert main(["capacity", "--layers", "32", "--kv-heads", "8"]) == 2
    assert main(["capacity", "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--dtype", "f7"]) == 2
    assert main(["capacity", "--model", "/no/such/model.gguf"]) == 2
    err = capsys.readouterr().err
    assert "go together" in err and "unknown KV cache type" in err and "not found" in err


def test_admission_refuses_clearly():
    assert cap.admit(WORKED, 1000, 24, budget_bytes=2**30) == 1024 * 128 * 1024
    with pytest.raises(AdmissionError, match="over the KV budget"):
        cap.admit(WORKED, 8000, 500, budget_bytes=2**30)


def test_format_and_parse_bytes():
    assert cap.format_bytes(128 * 1024) == "128 KiB"
    assert cap.format_bytes(2**30) == "1 GiB"
    assert cap.format_bytes(45.5 * 2**20) == "45.50 MiB"
    assert cap.parse_bytes("80GiB") == 80 * 2**30
    assert cap.parse_bytes("24 GB") == 24e9
    assert cap.parse_bytes("512m") == 512 * 2**20
    with pytest.raises(cap.InputError):
        cap.parse_bytes("lots")


def test_shape_from_gguf_metadata(tiny_gguf, capsys):
    shape = model_shape(tiny_gguf)
    assert (shape.n_layer, shape.n_head_kv, shape.head_dim, shape.n_head) == (N_LAYER, N_HEAD_KV, HEAD_DIM, N_HEAD)
    assert shape.weights_bytes and shape.weights_bytes < tiny_gguf.stat().st_size
    assert cap.kv_bytes_per_token(shape) == KV_BYTES_PER_TOKEN_F16
    meta = read_metadata(tiny_gguf)
    assert meta["general.architecture"] == "llama" and meta["tokenizer.ggml.tokens.count"] > 256
    assert main(["capacity", "--model", str(tiny_gguf), "--seq", "512"]) == 0
    assert "KV per sequence:  128 KiB at 512 tokens" in capsys.readouterr().out


def _llama_cpp_kv_mib(path: Path, n_ctx: int, capfd) -> float:
    """Load with verbose=True and read llama.cpp's own `llama_kv_cache: size = X MiB` line."""
    llama_cpp = pytest.importorskip("llama_cpp")
    capfd.readouterr()
    llm = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_threads=1, verbose=True)
    llm.close()
    err = capfd.readouterr().err
    m = re.search(r"llama_kv_cache: size =\s*([\d.]+) MiB", err)
    assert m, err[-2000:]
    return float(m.group(1))


def test_matches_llama_cpp_kv_size_on_tiny_model(tiny_gguf, capfd):
    reported = _llama_cpp_kv_mib(tiny_gguf, 4096, capfd)
    ours = cap.kv_bytes(model_shape(tiny_gguf), 4096) / cap.MiB
    assert f"{ours:.2f}" == f"{reported:.2f}" == "1.00"


def test_smollm2_capacity_matches_llama_cpp(smollm2, capfd):
    assert main(["capacity", "--model", str(smollm2), "--seq", "2048"]) == 0
    out = capfd.readouterr().out
    assert "45.00 MiB" in out, out
    shape = model_shape(smollm2)
    assert (shape.n_layer, shape.n_head_kv, shape.head_dim) == (30, 3, 64)
    assert _llama_cpp_kv_mib(smollm2, 2048, capfd) == pytest.approx(45.00)
