#!/usr/bin/env bash
# Configures and builds castor (Release, -j2) into ./build; used by demo.sh and test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${CASTOR_BUILD_DIR:-build}
jobs=${CASTOR_JOBS:-2}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" -j "$jobs"
