#!/usr/bin/env bash
# Fuzzes castor's two borders with the outside:
#  1. the door of a live world (Note [The door]): castor-door-fuzz opens
#     CASTOR_DOOR_CONNECTIONS (default 100,000) connections to a running
#     two-worker job, plain and then TLS, with mutated byte streams from a
#     recorded session; no worker may die, the job's calls must stay right;
#  2. message decoding (tests/fuzz, Note [Hostile input] in
#     messages/wire_checks.hpp) with libFuzzer, ASan and UBSan: builds the
#     target with clang into build/fuzz, then runs CASTOR_FUZZ_RUNS inputs
#     (default 2,000,000). Extra arguments go to libFuzzer, e.g.
#     scripts/fuzz.sh -runs=10000000 -jobs=2.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${CASTOR_BUILD_DIR:-build}
connections=${CASTOR_DOOR_CONNECTIONS:-100000}
runs=${CASTOR_FUZZ_RUNS:-2000000}
if [ ! -x "$build_dir/tests/castor-door-fuzz" ]; then
  ./scripts/build.sh
fi
"$build_dir/tests/castor-door-fuzz" --connections "$connections" --seed "${CASTOR_FUZZ_SEED:-7}"
"$build_dir/tests/castor-door-fuzz" --connections "$connections" --seed "${CASTOR_FUZZ_SEED:-8}" --tls
mkdir -p "$build_dir"
exec tests/fuzz/run.sh -runs="$runs" "$@"
