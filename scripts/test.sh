#!/usr/bin/env bash
# Installs what is missing, builds, then runs the whole test suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
build_dir=${CASTOR_BUILD_DIR:-build}
cd "$build_dir"
ctest --output-on-failure --timeout 600 -j "${CASTOR_TEST_JOBS:-2}" "$@"
