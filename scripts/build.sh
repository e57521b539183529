#!/usr/bin/env bash
# Configures and builds castor (Release, -j2) into ./build, and the fuzz target
# (clang, into ./build/fuzz) when clang is installed; used by demo.sh and test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${CASTOR_BUILD_DIR:-build}
jobs=${CASTOR_JOBS:-2}
# -Werror: a new warning is a defect, so it fails the build (and CI) at once.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DCASTOR_WERROR=ON >/dev/null
cmake --build "$build_dir" -j "$jobs"
# The fuzz test builds it itself if needed (and fails naming what is missing);
# building it here keeps that out of the test's time.
if command -v clang++ >/dev/null; then
  case "$build_dir" in /*) fuzz_dir=$build_dir/fuzz ;; *) fuzz_dir=$PWD/$build_dir/fuzz ;; esac
  CASTOR_FUZZ_BUILD_DIR="$fuzz_dir" CASTOR_JOBS="$jobs" tests/fuzz/build.sh
else
  echo "build: clang++ not found, the fuzz target is not built (scripts/setup.sh installs it)" >&2
fi
# The failure-path tests under ASan and UBSan (tests/sanitize): built here
# too, so that the CTest that runs them spends its time testing.
case "$build_dir" in /*) sanitize_dir=$build_dir/sanitize ;; *) sanitize_dir=$PWD/$build_dir/sanitize ;; esac
CASTOR_SANITIZE_BUILD_DIR="$sanitize_dir" CASTOR_JOBS="$jobs" tests/sanitize/build.sh
