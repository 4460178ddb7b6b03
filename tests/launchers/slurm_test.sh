#!/usr/bin/env bash
# A real single-node Slurm cluster (Debian's slurm-wlm): this script starts a
# private munged, slurmctld and slurmd (own config, key, socket, ports, state
# and log dirs in a temp dir; the system's /etc/slurm and munge are not used),
# waits for the node to be idle, then runs hcomm jobs with srun alone (no
# HCOMM_* variable: core/bootstrap_env.c derives the rendezvous from the step):
#   srun -n 2 mp_coll_vector, srun -n 4 mp_coll_vector (4 tasks on however
#   many cores: --overcommit), srun -n 2 mp_p2p, srun -n 2 mp_coll_vector with
#   its derived port held by another listener, and srun --mpi=pmix and
#   --mpi=pmi2 -n 2 mp_coll_vector where the plugins exist
# Each must report one job of N ranks (the pass line exactly once), not N jobs
# of one. Every daemon is stopped at the end and the temp dir removed.
#   slurm_test.sh BINDIR     exit 0 passed, 1 failed, 77 skipped (no Slurm)
# With --torch PYTHON SCRIPT it runs one job instead: srun -n 2 PYTHON
# SCRIPT --rank slurm (tests/python/torchrun_job.py: Slurm's variables
# mapped to env://, init_process_group("hcomm"), collectives and DDP
# against gloo), with no HCOMM_* variable in its environment.
#   slurm_test.sh BINDIR --torch PYTHON SCRIPT
set -uo pipefail
# ASan builds: libpmix's own process-lifetime allocations are not leaks of ours
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")/.." && pwd)/lib/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
bindir=${1:?usage: slurm_test.sh BINDIR}
bindir=$(cd "$bindir" && pwd) || exit 1
torch_py= torch_script=
if [[ ${2:-} == --torch ]]; then
    torch_py=${3:?--torch PYTHON SCRIPT} torch_script=${4:?--torch PYTHON SCRIPT}
    "$torch_py" -c "import torch, hcomm.torch" 2>/dev/null ||
        { echo "skipped: torch or hcomm.torch not importable by $torch_py"; exit 77; }
fi

missing=()
for c in slurmctld slurmd srun sinfo scontrol munged; do
    command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done
if ((${#missing[@]})); then
    echo "skipped: ${missing[*]} not installed (Debian: apt-get install slurm-wlm munge, or scripts/install-deps.sh --test)"
    exit 77
fi
if [[ $(id -u) != 0 ]]; then
    echo "skipped: slurmd must run as root to launch tasks (running as uid $(id -u))"
    exit 77
fi
for p in mp_coll_vector mp_p2p; do
    [[ -x $bindir/$p ]] || { echo "FAIL: $bindir/$p not built"; exit 1; }
done

tmp=$(mktemp -d /tmp/hcomm-slurm.XXXXXX) || exit 1
chmod 700 "$tmp"
pids=()
dump_logs() {
    local f
    for f in "$tmp"/log/*; do
        [[ -f $f ]] || continue
        echo "----- $(basename "$f") (last 40 lines) -----"
        tail -n 40 "$f"
    done
}
cleanup() {
    local p i
    # jobs left by a failure: cancel them in our private cluster first, so
    # that no slurmstepd outlives slurmd
    if [[ -n ${SLURM_CONF:-} ]] && kill -0 "${pids[1]:-0}" 2>/dev/null; then
        timeout 10 scancel --quiet --user=root 2>/dev/null
        for ((i = 0; i < 50; i++)); do
            [[ -z $(timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
            sleep 0.2
        done
    fi
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do # slurmd, slurmctld, munged
        p=${pids[i]}
        kill -TERM "$p" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# Only srun may describe the job: drop what an outer launcher (or an outer
# Slurm job) would have set. HCOMM_TIMEOUT / HCOMM_TOPO_CACHE from ctest stay.
unset HCOMM_BOOTSTRAP HCOMM_JOB_KEY HCOMM_RANK HCOMM_SIZE HCOMM_LOCAL_RANK HCOMM_LOCAL_SIZE
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
unset PMI_RANK PMI_SIZE PMI_FD MPI_LOCALRANKID MPI_LOCALNRANKS
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM_|SRUN_|SALLOC_|SBATCH_|OMPI_)')

host=$(hostname -s)
ncpu=$(nproc)
mkdir -p "$tmp"/{log,state,spool,run} || exit 1

# munge: a private key, socket, pid, seed and log
dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 status=none && chmod 400 "$tmp/munge.key"
munged --foreground --force --socket="$tmp/run/munge.sock" --key-file="$tmp/munge.key" \
    --pid-file="$tmp/run/munged.pid" --seed-file="$tmp/run/munged.seed" \
    --log-file="$tmp/log/munged.log" >>"$tmp/log/munged.out" 2>&1 &
pids+=($!)

# two free ports near a random base, for slurmctld and slurmd
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
base=$((40000 + RANDOM % 10000))
while ! port_free $base || ! port_free $((base + 1)); do base=$((base + 2)); done

# a random first job id: the rendezvous port hcomm derives from the job id
# differs from run to run (and the ids are not all one digit)
first_job=$((1000 + RANDOM % 50000))
export SLURM_CONF=$tmp/slurm.conf
cat >"$SLURM_CONF" <<CONF
ClusterName=hcommtest
FirstJobId=$first_job
SlurmctldHost=$host
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/run/munge.sock
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MailProg=/bin/true
ReturnToService=2
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/run/slurmctld.pid
SlurmdPidFile=$tmp/run/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$ncpu State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=10 State=UP OverSubscribe=FORCE:4
CONF

# munged must answer before slurm asks it anything
for _ in $(seq 100); do [[ -S $tmp/run/munge.sock ]] && break; sleep 0.1; done
if [[ ! -S $tmp/run/munge.sock ]]; then
    echo "FAIL: munged did not create its socket"; dump_logs; exit 1
fi
slurmctld -D -i -f "$SLURM_CONF" >>"$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >>"$tmp/log/slurmd.out" 2>&1 &
pids+=($!)

state=
for _ in $(seq 60); do
    state=$(timeout 5 sinfo -h -n "$host" -o %t 2>/dev/null | head -n 1)
    [[ $state == idle ]] && break
    for p in "${pids[@]}"; do
        kill -0 "$p" 2>/dev/null || { echo "FAIL: a daemon (pid $p) exited"; dump_logs; exit 1; }
    done
    sleep 0.5
done
if [[ $state != idle ]]; then
    echo "FAIL: node $host not idle after 30 s (sinfo says '${state:-nothing}')"
    timeout 5 scontrol show node "$host"
    dump_logs
    exit 1
fi
echo "slurm: node $host idle, $ncpu CPUs (slurmctld port $base)"

# what srun tells a task, for the log (rank 0 of a 2-task step)
timeout 60 srun -n 2 --overcommit bash -c \
    '[[ $SLURM_PROCID == 0 ]] && env | grep -E "^SLURM_(JOB_ID|STEP_ID|STEP_NODELIST|JOB_NODELIST|STEP_TASKS_PER_NODE|TASKS_PER_NODE|NODEID|PROCID|LOCALID|NTASKS|STEP_NUM_TASKS|CLUSTER_NAME)=" | sort | sed "s/^/srun env: /"; exit 0'

fails=0
if [[ -n $torch_py ]]; then
    while read -r v; do unset "$v"; done < <(compgen -e | grep '^HCOMM_')
    must=
fi
run_job() { # run_job NAME PASSLINE srun-args...
    local name=$1 pass=$2 out rc n t0
    shift 2
    t0=$SECONDS
    out=$(timeout 120 srun "$@" 2>&1)
    rc=$?
    n=$(grep -cxF -- "$pass" <<<"$out")
    # $must (when set): a line the job's output must also hold
    if [[ -n ${must:-} ]] && ! grep -qF -- "$must" <<<"$out"; then
        echo "FAIL: $name: no line with \"$must\" in its output"
        n=0
    fi
    if ((rc == 0 && n == 1)); then
        echo "PASS: $name ($((SECONDS - t0)) s)"
    else
        echo "FAIL: $name: srun exit $rc, pass line \"$pass\" seen $n times (want 1)"
        sed 's/^/    /' <<<"$out"
        fails=$((fails + 1))
    fi
}
if [[ -n $torch_py ]]; then
    run_job "srun -n 2 python torchrun_job.py --rank slurm (torch, no HCOMM_* variable)" \
        "rank 0 of 2: torchrun job passed" -n 2 --overcommit "$torch_py" "$torch_script" --rank slurm
    ((fails)) && { dump_logs; exit 1; }
    echo "slurm_test: the torch job passed"
    exit 0
fi
run_job "srun -n 2 mp_coll_vector" "mp_coll_vector: 2 ranks, every dtype, all checks passed" \
    -n 2 --overcommit "$bindir/mp_coll_vector"
run_job "srun -n 4 mp_coll_vector" "mp_coll_vector: 4 ranks, every dtype, all checks passed" \
    -n 4 --overcommit "$bindir/mp_coll_vector"
run_job "srun -n 2 mp_p2p" "rank 0: mp_p2p: passed (0 failures on this rank, 0 in all)" \
    -n 2 --overcommit "$bindir/mp_p2p"
# The port derived from the job id held by something that accepts and never
# answers (another job's rank 0 or a service would do the same): rank 0
# listens on the next port of the span, the ranks pass the silent one (no
# CHALLENGE) and find it. Job ids count up: the next job is this one's + 1.
last=$(timeout 30 srun -n 1 bash -c 'echo $SLURM_JOB_ID')
if [[ $last =~ ^[0-9]+$ ]]; then
    dport=$((20000 + ((last + 1) * 64) % 40000))
    /usr/bin/python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(64); time.sleep(150)' "$dport" &
    holder=$!
    for _ in $(seq 100); do ! port_free "$dport" && break; sleep 0.05; done
    must="port $dport is in use, trying $((dport + 1))" HCOMM_LOG=info \
        run_job "srun -n 2 mp_coll_vector, its derived port $dport held by a silent listener" \
        "mp_coll_vector: 2 ranks, every dtype, all checks passed" \
        -n 2 --overcommit "$bindir/mp_coll_vector"
    kill "$holder" 2>/dev/null
    wait "$holder" 2>/dev/null
else
    echo "FAIL: srun -n 1 printed no job id ('$last')"
    fails=$((fails + 1))
fi
# the PMI flavours srun offers: PMIx (hcomm's rendezvous through it) and
# PMI-2 (PMI_FD speaks PMI-2, not PMI-1: hcomm falls back to srun's variables)
for mpi in pmix pmi2; do
    if srun --mpi=list 2>&1 | grep -qw "$mpi"; then
        run_job "srun --mpi=$mpi -n 2 mp_coll_vector" \
            "mp_coll_vector: 2 ranks, every dtype, all checks passed" \
            --mpi=$mpi -n 2 --overcommit "$bindir/mp_coll_vector"
    else
        echo "skipped: srun --mpi=$mpi (this Slurm lacks the plugin)"
    fi
done

if ((fails)); then
    dump_logs
    echo "slurm_test: $fails job(s) failed"
    exit 1
fi
echo "slurm_test: all jobs passed"
exit 0
