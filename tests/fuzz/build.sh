#!/usr/bin/env bash
# Configures and builds the fuzz target with clang into build/fuzz (or
# $CASTOR_FUZZ_BUILD_DIR). Fails with the reason when clang or libFuzzer is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=${CASTOR_FUZZ_BUILD_DIR:-$root/build/fuzz}
jobs=${CASTOR_JOBS:-2}
cxx=${CASTOR_FUZZ_CXX:-}
if [ -z "$cxx" ]; then
  for c in clang++ clang++-14 clang++-15 clang++-16; do
    if command -v "$c" >/dev/null; then cxx=$(command -v "$c"); break; fi
  done
fi
if [ -z "$cxx" ]; then
  echo "fuzz: clang++ not found; install clang and libclang-rt-14-dev (scripts/setup.sh does)" >&2
  exit 2
fi
# libFuzzer ships in the compiler-rt package: check before a long configure.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>"$probe/err"; then
  echo "fuzz: $cxx cannot link with -fsanitize=fuzzer,address,undefined (libFuzzer runtime missing?" \
       "install libclang-rt-14-dev, scripts/setup.sh does):" >&2
  cat "$probe/err" >&2
  exit 2
fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S "$root/tests/fuzz" -B "$build_dir" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build_dir" -j "$jobs"
