#!/usr/bin/env bash
# Fuzzes castor's message decoding (tests/fuzz, Note [Hostile input] in
# messages/wire_checks.hpp) with libFuzzer, ASan and UBSan: builds the target
# with clang into build/fuzz, then runs at least 1,000,000 inputs. Extra
# arguments go to libFuzzer, e.g. scripts/fuzz.sh -runs=10000000 -jobs=2.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${CASTOR_FUZZ_RUNS:-2000000}
mkdir -p build
exec tests/fuzz/run.sh -runs="$runs" "$@"
