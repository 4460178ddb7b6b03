#!/bin/bash
# config_env_test.sh HCOMMRUN MP_P2P HCOMM_INFO ALLREDUCE_BW TESTLIB_DIR: what
# users see of the configuration, once per job and where they asked:
#   - a misspelled HCOMM_ variable: one warning (rank 0) naming the nearest
#     knob (HCOMM_LGO: HCOMM_LOG), on a 4-rank job;
#   - RLIMIT_MEMLOCK (lowered to 1 MiB here): no word of it from a shm/tcp
#     job, hcomm_info, hcomm_info -h/-c; one warning per job (rank 0), naming
#     the driver and docs/install.md, when a driver registers memory (the
#     test library's fake driver, as verbs/mlx5/dpdk do);
#   - HCOMM_LOG_SUBSYS=bogus fails hcomm_init listing the subsystems;
#   - bad values fail hcomm_init naming the variable (HCOMM_ALGO=bogus);
#   - HCOMM_LOG_FILE=dir/log.%r: each rank's lines in its file, none on stderr;
#   - HCOMM_LOG_SUBSYS=tcp shows tcp's info lines and no others; ^tcp the reverse;
#   - hcomm_info -c lists the variables the bootstrap and the kernels read,
#     and flags HCOMM_TIMOUT as hcomm_init does; hcomm_info --version;
#   - allreduce_bw -h prints its usage with no warning.
set -u
run=${1:?hcommrun} prog=${2:?mp_p2p} info=${3:?hcomm_info} arbw=${4:?allreduce_bw}
testlib=${5:?test library folder}
work=$(mktemp -d /tmp/hc-cfg.XXXXXX)
trap 'rm -rf "$work"' EXIT
bad=0
fail() { echo "FAIL: $*"; bad=1; }

out=$("$run" -n 4 --env HCOMM_LGO=info "$prog" 2>&1) || fail "HCOMM_LGO job failed: $out"
n=$(echo "$out" | grep -c "HCOMM_LGO is not an hcomm variable (ignored): did you mean HCOMM_LOG?")
[ "$n" = 1 ] || fail "HCOMM_LGO: $n warnings, want 1: $(echo "$out" | grep LGO)"

# Locked memory: a limit below the pool's (512M) is said only where it matters.
ulimit -S -l 1024 || fail "cannot lower ulimit -l"
for cmd in "$info" "$info -h" "$info -c" "$run -n 2 $prog" "$run -n 2 --env HCOMM_SHM=0 $prog"; do
    out=$($cmd 2>&1 >/dev/null) || fail "$cmd failed: $out"
    echo "$out" | grep -qi "memlock\|mlock" && fail "$cmd (no driver registers memory): $out"
done
out=$(LD_LIBRARY_PATH=$testlib "$run" -n 4 --env HCOMM_NET=fake --env HCOMM_SHM=0 "$prog" 2>&1 >/dev/null) ||
    fail "fake-driver job failed: $out"
n=$(echo "$out" | grep -c "RLIMIT_MEMLOCK")
[ "$n" = 1 ] || fail "RLIMIT_MEMLOCK with a registering driver: $n warnings on 4 ranks, want 1: $out"
echo "$out" | grep "RLIMIT_MEMLOCK" | grep -q '^\[hcomm r0\] warn: .*fake registers memory.*docs/install.md, "Locked memory"' ||
    fail "the memlock warning: not rank 0's, or names no driver or doc: $out"
grep -q '^## Locked memory' "$(dirname "$0")/../../docs/install.md" ||
    fail "docs/install.md has no \"Locked memory\" section"
ulimit -S -l "$(ulimit -H -l)"

out=$("$run" -n 2 --env HCOMM_LOG_SUBSYS=core,bogus "$prog" 2>&1) && fail "HCOMM_LOG_SUBSYS=bogus: the job succeeded"
echo "$out" | grep -q 'HCOMM_LOG_SUBSYS="core,bogus": "bogus" is not a subsystem; the subsystems are .*mlx5 dpdk' ||
    fail "HCOMM_LOG_SUBSYS=core,bogus: $(echo "$out" | head -3)"
out=$("$run" -n 1 --env HCOMM_NET=bogus "$prog" 2>&1) && fail "HCOMM_NET=bogus: the job succeeded"
echo "$out" | grep -q "HCOMM_NET=bogus is not a network driver" || fail "HCOMM_NET=bogus: $(echo "$out" | head -3)"
out=$("$run" -n 2 --env HCOMM_ALGO=bogus "$prog" 2>&1) && fail "HCOMM_ALGO=bogus: the job succeeded"
echo "$out" | grep -q "HCOMM_ALGO=bogus is not an algorithm" || fail "HCOMM_ALGO=bogus: $(echo "$out" | head -3)"

"$run" -n 2 --env HCOMM_LOG=info --env "HCOMM_LOG_FILE=$work/log.%r" "$prog" >"$work/out" 2>"$work/err" ||
    fail "HCOMM_LOG_FILE job failed"
for r in 0 1; do
    grep -q "\[hcomm r$r\] info: rank $r of 2 up" "$work/log.$r" 2>/dev/null ||
        fail "log.$r lacks rank $r's info lines: $(ls "$work")"
done
grep -q "\] info:" "$work/err" && fail "HCOMM_LOG_FILE: info lines still on stderr"

"$run" -n 2 --env HCOMM_LOG=info --env HCOMM_SHM=0 --env HCOMM_LOG_SUBSYS=tcp "$prog" >/dev/null 2>"$work/sub" ||
    fail "HCOMM_LOG_SUBSYS job failed"
grep -q "info: tcp: " "$work/sub" || fail "HCOMM_LOG_SUBSYS=tcp: no tcp line"
grep "\] info:" "$work/sub" | grep -qv "info: tcp: " && fail "HCOMM_LOG_SUBSYS=tcp: other info lines: $(grep '] info:' "$work/sub" | grep -v 'info: tcp: ' | head -2)"
"$run" -n 2 --env HCOMM_LOG=info --env HCOMM_SHM=0 --env "HCOMM_LOG_SUBSYS=^tcp" "$prog" >/dev/null 2>"$work/sub2" ||
    fail "HCOMM_LOG_SUBSYS=^tcp job failed"
grep -q "info: tcp: " "$work/sub2" && fail "HCOMM_LOG_SUBSYS=^tcp: tcp lines shown"
grep -q "\] info:" "$work/sub2" || fail "HCOMM_LOG_SUBSYS=^tcp: no other info line"

for v in HCOMM_BOOTSTRAP HCOMM_JOB_KEY HCOMM_RANK HCOMM_SIZE HCOMM_LOCAL_RANK HCOMM_LOCAL_SIZE \
    HCOMM_REDUCE_ISA HCOMM_LOG_FILE HCOMM_LOG_SUBSYS HCOMM_CONTROL_FD; do
    env -i "$info" -c | grep -q "^$v " || fail "hcomm_info -c does not list $v"
done
# hcomm_info flags what hcomm_init would, and says its version
out=$(env HCOMM_TIMOUT=5 "$info" -c 2>&1 >/dev/null) || fail "hcomm_info -c with HCOMM_TIMOUT failed"
echo "$out" | grep -q "HCOMM_TIMOUT is not an hcomm variable (ignored): did you mean HCOMM_TIMEOUT?" ||
    fail "hcomm_info -c does not flag HCOMM_TIMOUT: $out"
"$info" --version | grep -Eq '^hcomm [0-9]+\.[0-9]+\.[0-9]+ \(drivers:' || fail "hcomm_info --version: $("$info" --version 2>&1)"
out=$("$arbw" -h 2>&1 >/dev/null)
[ -z "$out" ] || fail "allreduce_bw -h wrote to stderr: $out"
"$arbw" -h | grep -q "^usage:" || fail "allreduce_bw -h printed no usage"
[ $bad = 0 ] && echo "config_env: all checks passed"
exit $bad
