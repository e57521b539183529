#!/usr/bin/env bash
# Installs castor from BUILD_DIR into a temporary prefix, builds the consumer
# with find_package(castor), and runs it. Usage: run.sh SOURCE_DIR BUILD_DIR PORT
set -euo pipefail
src=$1 build=$2 port=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/consumer" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" -j2 >/dev/null
if [ "$port" = 0 ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
"$work/build/consumer" "$port"

# The user's own program through the installed `castor run` (Note [Launch
# variables]): every mode bounded, its output and exit code checked.
castor="$work/prefix/bin/castor"
launched="$work/build/launched"
expect() {  # expect WHAT EXPECTED_RC OUTPUT ACTUAL_RC PATTERN...
  local what=$1 want=$2 out=$3 rc=$4
  shift 4
  if [ "$rc" != "$want" ]; then
    printf '%s\n' "$out"
    echo "FAIL: $what exited with $rc, expected $want"
    exit 1
  fi
  for pattern in "$@"; do
    if ! grep -qF -- "$pattern" <<<"$out"; then
      printf '%s\n' "$out"
      echo "FAIL: $what: no line with '$pattern'"
      exit 1
    fi
  done
  echo "launched: $what: ok"
}
run() { timeout -k 5 180 "$castor" run "$@" 2>&1; }
set +e
out=$(run -n 3 "$launched" ok); rc=$?
expect "castor run -n 3 ./launched" 0 "$out" $rc "[worker0] launched: worker1 of 3 greets rank 0" \
  "[worker0] launched: worker2 of 3 greets rank 0" "[worker0] launched: done after 0 restart(s)"
out=$(cd "$work/build" && PATH="$work/build:$PATH" timeout -k 5 180 "$castor" run --workers 2 launched ok 2>&1); rc=$?
expect "castor run --workers 2 launched (from PATH)" 0 "$out" $rc "[worker0] launched: worker1 of 2 greets rank 0"
out=$(run -n 2 "$launched" fail); rc=$?
expect "a rank whose code fails" 3 "$out" $rc "[worker1] launched: rank 1 fails on purpose" \
  "exited with 3; stopping the others"
out=$(run -n 2 --max-restarts 1 "$launched" die-once); rc=$?
expect "a rank SIGKILLed, --max-restarts 1" 0 "$out" $rc \
  "[launch] worker1 died (killed by signal 9): starting it again (restart 1 of 1 for worker1); it rejoins under incarnation 2" \
  "[worker0] launched: worker1 of 2 greets rank 0" "[worker0] launched: done after 0 restart(s) and "
out=$(run -n 2 "$launched" die-once); rc=$?
# rank 0's app hears of the death (its call or its shutdown fails) and fails.
expect "a rank SIGKILLed without restarts" 3 "$out" $rc \
  "[launch] worker1 (killed by signal 9) died; the job goes on: rank 0's app decides" \
  "[worker0] launched: " "worker worker1 is unreachable"
out=$(run -n 2 "$work/build/no-such-program"); rc=$?
expect "a program that is not there" 2 "$out" $rc "castor run: '$work/build/no-such-program' is not an executable file"
out=$(run -n 0 "$launched"); rc=$?
expect "-n 0" 2 "$out" $rc "castor run: -n (--workers) must be at least 1, got 0"
out=$(env -u RANK -u WORLD_SIZE -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK timeout 60 "$launched" ok 2>&1); rc=$?
expect "started without a launcher" 3 "$out" $rc "launched: init_rpc_from_env: no launcher's variables found"
# A cluster file's "program" through castor launch (V0 of Note [Launch variables]).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cat >"$work/job.json" <<JSON
{"program": "$launched", "args": ["ok"],
 "workers": [{"name": "ps", "host": "127.0.0.1", "port": $(free_port)},
             {"name": "trainer", "host": "127.0.0.1", "port": $(free_port)}]}
JSON
out=$(timeout -k 5 180 "$castor" launch "$work/job.json" --local 2>&1); rc=$?
expect "castor launch of a cluster file's program" 0 "$out" $rc "[ps] launched: trainer of 2 greets rank 0" \
  "[ps] launched: done after 0 restart(s)"
cat >"$work/both.json" <<JSON
{"workers": [{"name": "ps", "host": "127.0.0.1", "port": 1, "app": "rpc-tour", "program": "$launched"}]}
JSON
out=$(timeout -k 5 60 "$castor" launch "$work/both.json" --local 2>&1); rc=$?
expect "a worker with an app and a program" 2 "$out" $rc \
  "workers[0].program: give \"app\" (an app compiled into castor) or \"program\" (your own), not both"
set -e

# examples/remote_linear, the README's "Write your own app": built as its
# README says (its own project, find_package(castor)) and run through the
# installed castor on 2 processes; the loss must fall.
cmake -S "$src/examples/remote_linear" -B "$work/example" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/example" -j2 >/dev/null
set +e
out=$(run -n 2 "$work/example/remote_linear" --steps 150); rc=$?
expect "examples/remote_linear on 2 processes" 0 "$out" $rc "[worker0] the layer lives on worker1" \
  "[worker0] step 1: loss " "[worker0] step 150: loss "
set -e
first=$(sed -n 's/.*step 1: loss \([0-9.]*\).*/\1/p' <<<"$out")
last=$(sed -n 's/.*step 150: loss \([0-9.]*\).*/\1/p' <<<"$out")
if ! python3 -c "import sys; sys.exit(0 if float('$last') < 0.1 * float('$first') else 1)"; then
  printf '%s\n' "$out"
  echo "FAIL: examples/remote_linear: the loss went from $first to $last, not below a tenth"
  exit 1
fi
echo "examples/remote_linear: loss $first -> $last: ok"
