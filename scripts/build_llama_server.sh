#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the sources vendored in the pinned llama-cpp-python sdist, so the
# HTTP backend drives the same llama.cpp the in-process backend links. The binary is cached outside the
# repo; a second run is a no-op. Prints the binary's path on stdout (last line).
#   scripts/build_llama_server.sh            # build (or reuse) and print the path
#   JOBS=1 nice -n 19 scripts/build_llama_server.sh   # gentle on a shared machine
# Env: LLAMA_CPP_PYTHON_VERSION (default 0.3.36), RAGOPT_LLAMA_SERVER_CACHE (default ~/.cache/ragopt),
#      JOBS (parallel compile jobs, default: number of cores), PYTHON (default python3).
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache_root="${RAGOPT_LLAMA_SERVER_CACHE:-$HOME/.cache/ragopt}"
dest="$cache_root/llama-server-$version"
binary="$dest/bin/llama-server"
python="${PYTHON:-python3}"
jobs="${JOBS:-$(nproc)}"

if [ -x "$binary" ] && "$binary" --version >/dev/null 2>&1; then
    echo "$binary"
    exit 0
fi

for tool in cmake c++ tar; do
    command -v "$tool" >/dev/null || { echo "build_llama_server.sh: '$tool' is required" >&2; exit 2; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/llama-server-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "downloading the llama-cpp-python $version sdist..." >&2
"$python" -m pip download -q --no-deps --no-binary llama-cpp-python --dest "$work" "llama-cpp-python==$version" >&2
tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { echo "build_llama_server.sh: no vendored llama.cpp in the sdist" >&2; exit 1; }

echo "building llama-server with $jobs job(s)..." >&2
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$work/build" --target llama-server -j "$jobs" >&2

# Install atomically: a half-copied binary must never look cached.
mkdir -p "$cache_root"
staging="$(mktemp -d "$cache_root/.llama-server-$version.XXXXXX")"
mkdir -p "$staging/bin"
cp "$work/build/bin/llama-server" "$staging/bin/llama-server"
"$staging/bin/llama-server" --version >&2
rm -rf "$dest"
mv "$staging" "$dest"
echo "$binary"
