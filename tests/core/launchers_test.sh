#!/bin/bash
# launchers_test.sh BINDIR: hcomm jobs started by other launchers, with no
# hand-set variable:
#   - mpiexec.hydra (MPICH's; PMI-1 on PMI_FD): 2 and 4 ranks of mp_coll_vector
#     and mp_p2p, one job each (not N jobs of one rank);
#   - Open MPI's mpirun (PMIx): 2 and 4 ranks of mp_coll_vector;
#   - PMI_RANK/PMI_SIZE saying "2 ranks" without a PMI_FD: an error naming it,
#     never a silent job of one;
#   - torchrun (torch.distributed.run, whose agent holds MASTER_PORT): 2 ranks;
#   - no "unauthenticated" warning from launchers that could not give a key.
# A launcher that is not installed is skipped (said), the test fails only on
# what ran.
set -u
# ASan builds: libpmix's own process-lifetime allocations are not leaks of ours
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")/.." && pwd)/lib/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
bin=${1:?bindir}
bad=0 ran=0
fail() { echo "FAIL: $*"; bad=1; }
work=$(mktemp -d /tmp/hc-launch.XXXXXX)
trap 'rm -rf "$work"' EXIT

if command -v mpiexec.hydra >/dev/null; then
    for np in 2 4; do
        timeout 120 mpiexec.hydra -n $np "$bin/mp_coll_vector" >"$work/hydra$np" 2>&1 ||
            { fail "mpiexec.hydra -n $np mp_coll_vector: rc $?"; sed 's/^/    /' "$work/hydra$np" | tail -20; }
        grep -q "mp_coll_vector: $np ranks, every dtype, all checks passed" "$work/hydra$np" ||
            fail "hydra -n $np: not one job of $np ranks: $(grep -v MEMLOCK "$work/hydra$np" | head -3)"
        grep -q "unauthenticated" "$work/hydra$np" && fail "hydra: an unauthenticated warning (PMI gives the key)"
    done
    timeout 60 mpiexec.hydra -n 3 "$bin/mp_p2p" >"$work/hydra_p2p" 2>&1 ||
        { fail "mpiexec.hydra -n 3 mp_p2p: rc $?"; tail -5 "$work/hydra_p2p"; }
    ran=1
else
    echo "skipped: mpiexec.hydra is not installed (apt-get install mpich)"
fi

if command -v mpirun.openmpi >/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    for np in 2 4; do
        timeout 120 mpirun.openmpi --oversubscribe -n $np "$bin/mp_coll_vector" >"$work/ompi$np" 2>&1 ||
            { fail "mpirun.openmpi -n $np mp_coll_vector: rc $?"; sed 's/^/    /' "$work/ompi$np" | tail -20; }
        grep -q "mp_coll_vector: $np ranks, every dtype, all checks passed" "$work/ompi$np" ||
            fail "mpirun -n $np: not one job of $np ranks (PMIx): $(grep -v MEMLOCK "$work/ompi$np" | head -3)"
        grep -q "unauthenticated" "$work/ompi$np" && fail "mpirun: an unauthenticated warning (PMIx gives the key)"
    done
    ran=1
else
    echo "skipped: mpirun.openmpi is not installed (apt-get install openmpi-bin)"
fi

# launcher variables that say "2 ranks" with no rendezvous: an error
out=$(env -u PMI_FD PMI_RANK=1 PMI_SIZE=2 timeout 30 "$bin/mp_p2p" 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q "PMI_FD" ||
    fail "PMI_RANK/PMI_SIZE without PMI_FD: rc $rc, output: $(echo "$out" | head -3)"

if /usr/bin/python3 -c "import torch.distributed.run" 2>/dev/null; then
    # (Debian's torch 1.13 on Python 3.11 needs --redirects/--tee of 1 or 2:
    # its Std enum loses 0 and 3)
    timeout 120 /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 --master_port 29631 \
        --redirects 2 --tee 2 --log_dir "$work/tl" --no_python "$bin/mp_p2p" >"$work/torch" 2>&1 ||
        { fail "torchrun 2 x mp_p2p: rc $?"; grep -v MEMLOCK "$work/torch" | tail -15; }
    grep -q "mp_p2p: passed" "$work/torch" || fail "torchrun: mp_p2p did not pass"
    grep -q "unauthenticated" "$work/torch" && fail "torchrun: an unauthenticated warning"
    ran=1
else
    echo "skipped: torch.distributed.run is not importable (apt-get install python3-torch)"
fi
[ $bad = 0 ] && echo "launchers: all checks that ran passed"
[ $bad = 0 ] && [ $ran = 0 ] && exit 77
exit $bad
