#!/usr/bin/env bash
# Build llama.cpp's llama-server from the llama-cpp-python sdist on PyPI (which vendors llama.cpp),
# into a per-machine cache: ${XDG_CACHE_HOME:-~/.cache}/sweeper/llama.cpp/<version>/bin/llama-server.
# It builds once per machine (GGML_NATIVE targets this CPU, so never commit the binary); later runs
# print the cached path and exit. Nothing is fetched but the PyPI sdist (and ninja from PyPI when
# neither Debian's ninja nor cmake's is there). About 7 minutes on 2 cores.
#
#   scripts/build_llama_server.sh            # build (or reuse); prints the binary's path last
#   scripts/build_llama_server.sh --path     # only print where the binary is (or will be)
#   LLAMA_CPP_PYTHON_VERSION=0.3.36 JOBS=4 scripts/build_llama_server.sh
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
JOBS="${JOBS:-$(nproc)}"
PYTHON="${PYTHON:-python3}"
ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/sweeper/llama.cpp/${VERSION}"
BIN="${ROOT}/bin/llama-server"

if [ "${1:-}" = "--path" ]; then
    echo "${BIN}"
    exit 0
fi

if [ -x "${BIN}" ]; then
    echo "${BIN}"
    exit 0
fi

command -v cmake >/dev/null || { echo "cmake is missing: apt-get install cmake (or pip install cmake)" >&2; exit 2; }
GENERATOR=()
if command -v ninja >/dev/null; then
    GENERATOR=(-G Ninja)
fi

WORK="${ROOT}/work"
rm -rf "${WORK}"
mkdir -p "${WORK}" "${ROOT}/bin"

echo "downloading llama-cpp-python==${VERSION} sdist from PyPI" >&2
"${PYTHON}" -m pip download --quiet --no-deps --no-binary llama-cpp-python --dest "${WORK}" "llama-cpp-python==${VERSION}"
tar -xzf "${WORK}"/llama_cpp_python-"${VERSION}".tar.gz -C "${WORK}"
SRC="${WORK}/llama_cpp_python-${VERSION}/vendor/llama.cpp"

echo "configuring ${SRC}" >&2
cmake -S "${SRC}" -B "${WORK}/build" "${GENERATOR[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DGGML_NATIVE=ON >&2

echo "building llama-server with ${JOBS} jobs" >&2
cmake --build "${WORK}/build" --target llama-server -j "${JOBS}" >&2

install -m 0755 "${WORK}/build/bin/llama-server" "${BIN}.tmp"
mv "${BIN}.tmp" "${BIN}"
rm -rf "${WORK}"
"${BIN}" --version >&2 || true
echo "${BIN}"
