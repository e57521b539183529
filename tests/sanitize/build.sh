#!/usr/bin/env bash
# Configures and builds the failure-path tests (test_endings, test_deaths,
# test_supervision and the worker they start) with AddressSanitizer and
# UBSan into build/sanitize (or $CASTOR_SANITIZE_BUILD_DIR). A unity build
# at -O1: on CI's 2 cores it takes a fraction of the Release build's time,
# where an ordinary sanitizer build would take as long again.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=${CASTOR_SANITIZE_BUILD_DIR:-$root/build/sanitize}
jobs=${CASTOR_JOBS:-2}
# UBSan halts on the first report through UBSAN_OPTIONS (tests/sanitize/run.sh),
# not -fno-sanitize-recover: suppressions (ubsan.supp) apply only to
# recoverable checks.
flags="-fsanitize=address,undefined -fno-omit-frame-pointer"
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 -DCASTOR_SANITIZE_TESTS=OFF >/dev/null
fi
cmake --build "$build_dir" -j "$jobs" --target castor_test_worker test_endings test_deaths test_supervision
