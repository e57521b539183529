#!/usr/bin/env bash
# Builds the fuzz target if needed, writes the seed corpus (real encoded
# messages) and runs libFuzzer with the given limit, e.g.
#   tests/fuzz/run.sh -max_total_time=60     (the CTest test)
#   tests/fuzz/run.sh -runs=2000000          (scripts/fuzz.sh)
# Fails on any crash, sanitizer report, leak, out-of-memory or hang (an input
# taking over 10 s); the input that did it is kept and its path printed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=${CASTOR_FUZZ_BUILD_DIR:-$root/build/fuzz}
export CASTOR_FUZZ_BUILD_DIR=$build_dir
[ $# -gt 0 ] || set -- -max_total_time=60

mkdir -p "$build_dir"
"$root/tests/fuzz/build.sh" >"$build_dir/build.log" 2>&1 || {
  status=$?
  cat "$build_dir/build.log" >&2
  echo "fuzz: building the fuzz target failed (exit $status)" >&2
  exit 1
}

work=$(mktemp -d "$build_dir/run.XXXXXX")
mkdir -p "$work/corpus" "$work/seeds" "$work/artifacts"
CASTOR_FUZZ_WRITE_SEEDS="$work/seeds" "$build_dir/fuzz_messages" >/dev/null

echo "fuzz: running $build_dir/fuzz_messages $* (log: $work/fuzz.log)"
start=$(date +%s)
set +e
"$build_dir/fuzz_messages" "$@" -timeout=10 -max_len=4096 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$work/seeds" >"$work/fuzz.log" 2>&1
status=$?
set -e
elapsed=$(( $(date +%s) - start ))
runs=$(grep -oE '^stat::number_of_executed_units: *[0-9]+' "$work/fuzz.log" | grep -oE '[0-9]+$' || true)
if [ $status -ne 0 ] || grep -qE '^(==[0-9]+==ERROR|SUMMARY: |.*runtime error:)' "$work/fuzz.log"; then
  grep -vE '^#[0-9]+' "$work/fuzz.log" | tail -60 >&2
  echo "fuzz: FAILED (exit $status) after ${runs:-?} inputs in ${elapsed} s; the input is in $work/artifacts/:" >&2
  ls -l "$work/artifacts" >&2
  exit 1
fi
echo "fuzz: OK: ${runs:-?} inputs in ${elapsed} s, no crash, hang, leak or sanitizer report" \
     "($(ls "$work/corpus" | wc -l) new corpus inputs)"
rm -rf "$work"
