#!/usr/bin/env bash
# A real Slurm launch of a castor program on a one-node cluster.
#
# castor::init_rpc_from_env reads Slurm's variables (SLURM_PROCID,
# SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST, SLURM_JOB_ID; Note [Launch
# variables] in config/init_from_env.cpp). Its unit tests feed it made-up
# environments; this test lets Slurm itself set them. It starts, as plain
# background processes (no systemd), Debian's slurm-wlm and munge from a temp
# dir: munged on its own socket and key, slurmctld and slurmd on free ports
# with a generated slurm.conf (SLURM_CONF) naming this host as the only node.
# Then it runs, each bounded by `timeout`,
#   A. srun -n 3 --overcommit PROGRAM ok without MASTER_PORT: the ranks agree
#      on the port derived from the job id (FirstJobId is chosen so that this
#      port is a free one),
#   B. the same with MASTER_PORT set to a free port,
# and checks the exit code and the lines rank 0 prints (srun --label: each
# line carries its task's number; tasks' lines interleave, so lines are
# looked for, never their order). Every daemon, and anything still running
# under this cluster's configuration, is stopped on exit, also on HUP, INT,
# PIPE or TERM (not on SIGKILL: then only what dies with this script goes).
#
# Usage: slurm_test.sh PROGRAM [WORK_DIR]
#   PROGRAM is tests/consumer/launched.cpp built (castor_test_launched).
# Needs root, slurm-wlm and munge (scripts/setup.sh installs them). When those
# are missing, or the daemons cannot start here, it says why (with the
# daemon's log) and exits 77, which CTest reports as skipped. Every wait is
# bounded.
set -euo pipefail

program=${1:?usage: slurm_test.sh PROGRAM [WORK_DIR]}
program=$(readlink -f "$program")
work=${2:-}

skip() {
  echo "SKIP: $*" >&2
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

[ -x "$program" ] || fail "no program at $program (build castor_test_launched)"
[ "$(id -u)" -eq 0 ] || skip "needs root: slurmd runs every task's user, and munged and the daemons run as root here"
for tool in munged mungekey munge unmunge slurmctld slurmd srun scontrol sinfo timeout; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (apt-get install slurm-wlm munge; scripts/setup.sh does)"
done

# Nothing of an enclosing Slurm job (ctest run inside an allocation) or of
# another launcher may reach this cluster's srun or the program.
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM_|OMPI_)' || true)
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT CASTOR_CLUSTER_FILE CASTOR_WORKER CASTOR_LOCAL CASTOR_RESTART

host=$(hostname -s)
# castor's rank 0 listens on the first host of SLURM_JOB_NODELIST, this node's name.
getent hosts "$host" >/dev/null || skip "this host's name '$host' does not resolve (getent hosts): castor's ranks could not find rank 0"
cpus=$(nproc)

if [ -z "$work" ]; then
  work=$(mktemp -d /tmp/castor-slurm.XXXXXX)
  remove_work=1
else
  rm -rf "$work" && mkdir -p "$work"
  remove_work=0
fi
# munged wants its socket's directory searchable by all and its key's
# directory writable by none but its owner.
chmod 711 "$work"
conf="$work/slurm.conf"
export SLURM_CONF="$conf"

daemons=() # "name:pid", stopped in reverse order

show_logs() {
  local f
  for f in "$@"; do
    [ -s "$f" ] || continue
    echo "---- last lines of $f"
    tail -n 25 "$f"
  done
}

alive() { kill -0 "$1" 2>/dev/null; }

# Stops one process: TERM, up to 10 s, then KILL.
stop() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    alive "$pid" || break
    sleep 0.1
  done
  alive "$pid" && kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
}

# Sets strays to the processes whose environment names this cluster's
# slurm.conf, other than this shell, the daemons and their own children
# (slurmctld's slurmscriptd): job steps (slurmstepd, whose parent is init)
# and their tasks, which inherit slurmd's or srun's SLURM_CONF. Reads /proc
# from this shell (no subshell, no process per entry).
find_strays() {
  local e p v entry vars mine stat fields
  strays=()
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}
    p=${p%/environ}
    [ "$p" = "$$" ] && continue
    read -r stat 2>/dev/null <"/proc/$p/stat" || continue
    read -ra fields <<<"${stat##*) }"  # after "pid (comm) ": state, ppid, ...
    mine=0
    for entry in "${daemons[@]}"; do
      [ "${entry#*:}" = "$p" ] || [ "${entry#*:}" = "${fields[1]}" ] && mine=1
    done
    [ "$mine" = 1 ] && continue
    mapfile -d '' vars 2>/dev/null <"$e" || continue
    for v in "${vars[@]}"; do
      if [ "$v" = "SLURM_CONF=$conf" ]; then
        strays+=("$p")
        break
      fi
    done
  done
}

cleanup() {
  local rc=$? i entry p
  set +e
  # A step's slurmstepd outlives srun by a moment: let it finish (up to 5 s)
  # while slurmd still answers it, then stop the daemons, newest first.
  for ((i = 0; i < 50; i++)); do
    find_strays
    [ ${#strays[@]} -eq 0 ] && break
    sleep 0.1
  done
  for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do
    entry=${daemons[i]}
    stop "${entry#*:}"
  done
  find_strays
  for p in "${strays[@]}"; do kill -KILL "$p" 2>/dev/null; done
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ]; then
    [ "$remove_work" = 1 ] && rm -rf "$work"
  else
    echo "logs kept in $work"
  fi
  exit "$rc"
}
trap cleanup EXIT
# A signal ends it through cleanup too (a closed pipe as well: `| head`).
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 141' PIPE
trap 'exit 143' TERM

# A daemon that could not start: why, then skip.
cannot_start() {
  echo "SKIP: $1 could not start on this machine; its log:"
  shift
  show_logs "$@"
  exit 77
}

# -- free ports ---------------------------------------------------------------
# Picked from 20000-29999: below Linux's ephemeral range (32768-60999), so no
# outgoing connection takes one meanwhile; each is checked by binding it.
taken=" "
port_free() {
  if command -v python3 >/dev/null; then
    python3 -c 'import socket, sys
s = socket.socket()
try:
    s.bind(("", int(sys.argv[1])))
except OSError:
    sys.exit(1)' "$1"
  else
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 1; fi  # something listens
  fi
}
# Sets `port` (not in a subshell: `taken` must keep what earlier calls took).
free_port() {
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + RANDOM % 10000))
    [[ $taken == *" $p "* ]] && continue
    if port_free "$p"; then
      taken+="$p "
      port=$p
      return 0
    fi
  done
  fail "no free port in 20000-29999 after 200 tries"
}
free_port; ctld_port=$port
free_port; slurmd_port=$port
free_port; derived_port=$port
free_port; master_port=$port
# castor derives 10000 + job id % 20000 (port_from_job_id): the first job's
# id is chosen to give derived_port.
first_job=$((derived_port - 10000))

# -- munge ----------------------------------------------------------------------
mungekey --create --keyfile="$work/munge.key" >"$work/mungekey.out" 2>&1 ||
  cannot_start "mungekey" "$work/mungekey.out"
chmod 400 "$work/munge.key"
socket="$work/munge.socket"
munged --foreground --socket="$socket" --key-file="$work/munge.key" --pid-file="$work/munged.pid" \
  --log-file="$work/munged.log" --seed-file="$work/munged.seed" >"$work/munged.out" 2>&1 &
daemons+=("munged:$!")
munge_ok=0
for ((i = 0; i < 100; i++)); do  # up to 10 s
  if munge -n --socket="$socket" 2>/dev/null | unmunge --socket="$socket" >/dev/null 2>&1; then
    munge_ok=1
    break
  fi
  alive "${daemons[-1]#*:}" || break
  sleep 0.1
done
[ "$munge_ok" = 1 ] || cannot_start "munged" "$work/munged.out" "$work/munged.log"

# -- slurm.conf -------------------------------------------------------------------
mkdir -p "$work/state" "$work/spool"
: >"$work/plugstack.conf"  # not the system's /etc/slurm/plugstack.conf
cat >"$conf" <<EOF
# A one-node cluster for castor's tests (tests/slurm/slurm_test.sh).
ClusterName=castortest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$work/plugstack.conf
# No cgroups: processes tracked by their parents, tasks not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
FirstJobId=$first_job
MailProg=/bin/true
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=castor Nodes=$host Default=YES MaxTime=10 State=UP
EOF

# -- the daemons ------------------------------------------------------------------
slurmctld -D -c >"$work/slurmctld.out" 2>&1 &
daemons+=("slurmctld:$!")
ctld_logs=("$work/slurmctld.out")  # in the foreground (-D) it logs to stderr as well
up=0
for ((i = 0; i < 60; i++)); do  # up to 30 s
  if scontrol ping 2>/dev/null | grep -q 'is UP'; then
    up=1
    break
  fi
  alive "${daemons[-1]#*:}" || break
  sleep 0.5
done
[ "$up" = 1 ] || cannot_start "slurmctld" "${ctld_logs[@]}"

slurmd -D -N "$host" >"$work/slurmd.out" 2>&1 &
daemons+=("slurmd:$!")
slurmd_logs=("$work/slurmd.out")
state=""
for ((i = 0; i < 60; i++)); do  # up to 30 s
  state=$(sinfo -h -N -n "$host" -o %T 2>/dev/null || true)
  [ "$state" = idle ] && break
  alive "${daemons[-1]#*:}" || break
  sleep 0.5
done
if [ "$state" != idle ]; then
  echo "node $host is '${state:-unknown}', not idle:"
  scontrol show node "$host" 2>&1 | sed 's/^/  /' || true
  cannot_start "slurmd" "${slurmd_logs[@]}" "${ctld_logs[@]}"
fi
echo "slurm: one-node cluster up ($host, $cpus CPUs; slurmctld :$ctld_port, slurmd :$slurmd_port)"

# -- the launches -----------------------------------------------------------------
# run NAME [VAR=VALUE...]: srun -n 3 of the program in mode ok; sets out and rc.
run() {
  local name=$1
  shift
  out=$(env "$@" timeout -k 5 45 srun --label -n 3 --overcommit --kill-on-bad-exit=1 -t 2 -J "$name" \
    "$program" ok </dev/null 2>&1) && rc=0 || rc=$?
}

# expect WHAT: exit code 0 and rank 0's lines.
expect() {
  local what=$1 line missing=()
  for line in "0: launched: worker1 of 3 greets rank 0" "0: launched: worker2 of 3 greets rank 0" \
    "0: launched: done after 0 restart(s) and 0 rejoin(s)"; do
    grep -qxF "$line" <<<"$out" || missing+=("$line")
  done
  if [ "$rc" -ne 0 ] || [ ${#missing[@]} -ne 0 ]; then
    echo "FAIL: $what: exit code $rc (expected 0 and rank 0's lines)"
    for line in "${missing[@]}"; do echo "  missing line: $line"; done
    echo "---- its output"
    echo "${out:-(none)}"
    show_logs "${slurmd_logs[@]}" "${ctld_logs[@]}"
    exit 1
  fi
  echo "slurm: $what: ok"
}

# A: the first job gets FirstJobId; its ranks meet on the port derived from it.
run castor-derived-port
expect "srun -n 3 --overcommit, port from job id $first_job (:$derived_port)"
job=$(scontrol show job "$first_job" 2>/dev/null | grep -o 'JobName=[^ ]*' || true)
[ "$job" = "JobName=castor-derived-port" ] ||
  fail "job $first_job is '${job:-not found}', not the first launch: the port it derived is not the one checked free"

# B: MASTER_PORT wins over the job id.
run castor-master-port MASTER_PORT="$master_port"
expect "srun -n 3 --overcommit, MASTER_PORT=$master_port"

echo "slurm: all launches ok"
