#!/usr/bin/env bash
# Runs the failure-path tests built with ASan and UBSan (tests/sanitize/build.sh
# builds them if needed): every kind of live state at every ending, a worker
# killed at each protocol point, supervision. Fails on any sanitizer report
# (in the test or in a worker process it starts) or failed check.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=${CASTOR_SANITIZE_BUILD_DIR:-$root/build/sanitize}
export CASTOR_SANITIZE_BUILD_DIR=$build_dir
mkdir -p "$build_dir"
"$root/tests/sanitize/build.sh" >"$build_dir/build.log" 2>&1 || {
  status=$?
  tail -40 "$build_dir/build.log" >&2
  echo "sanitize: building the sanitizer tests failed (exit $status)" >&2
  exit 1
}
# Leaks are not checked: a worker left with a call stuck in user code parks
# its runtime on purpose (Note [Shutdown bound], B3), and libtorch's and
# CAF's singletons live until exit.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=86
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=87:suppressions=$root/tests/sanitize/ubsan.supp
log=$build_dir/run.log
: >"$log"
status=0
for t in test_endings test_deaths test_supervision; do
  echo "sanitize: $t" | tee -a "$log"
  "$build_dir/tests/$t" >>"$log" 2>&1 || { status=$?; echo "sanitize: $t failed (exit $status)" | tee -a "$log"; }
done
if [ $status -ne 0 ] || grep -qE '^(==[0-9]+==ERROR|SUMMARY: (Address|Undefined)|.*runtime error:)' "$log"; then
  grep -E -B2 -A30 '^(==[0-9]+==ERROR|.*runtime error:)' "$log" | head -120 >&2 || true
  grep -E 'ERROR: |Status: |test cases:' "$log" >&2 || true
  echo "sanitize: FAILED (log: $log)" >&2
  exit 1
fi
grep -E '^\[doctest\] test cases:' "$log"
echo "sanitize: OK: no sanitizer report"
