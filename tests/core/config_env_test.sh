#!/bin/bash
# config_env_test.sh HCOMMRUN MP_P2P HCOMM_INFO ALLREDUCE_BW: what users see of
# the configuration, once per job and where they asked:
#   - a misspelled HCOMM_ variable: one warning (rank 0) naming the nearest
#     knob (HCOMM_LGO: HCOMM_LOG), on a 4-rank job;
#   - the RLIMIT_MEMLOCK warning (when the limit is low here) once per job;
#   - bad values fail hcomm_init naming the variable (HCOMM_ALGO=bogus);
#   - HCOMM_LOG_FILE=dir/log.%r: each rank's lines in its file, none on stderr;
#   - HCOMM_LOG_SUBSYS=tcp shows tcp's info lines and no others; ^tcp the reverse;
#   - hcomm_info -c lists the variables the bootstrap and the kernels read;
#   - allreduce_bw -h prints its usage with no warning.
set -u
run=${1:?hcommrun} prog=${2:?mp_p2p} info=${3:?hcomm_info} arbw=${4:?allreduce_bw}
work=$(mktemp -d /tmp/hc-cfg.XXXXXX)
trap 'rm -rf "$work"' EXIT
bad=0
fail() { echo "FAIL: $*"; bad=1; }

out=$("$run" -n 4 --env HCOMM_LGO=info "$prog" 2>&1) || fail "HCOMM_LGO job failed: $out"
n=$(echo "$out" | grep -c "HCOMM_LGO is not an hcomm variable (ignored): did you mean HCOMM_LOG?")
[ "$n" = 1 ] || fail "HCOMM_LGO: $n warnings, want 1: $(echo "$out" | grep LGO)"
if [ "$(ulimit -l)" != unlimited ] && [ "$(ulimit -l)" -lt 524288 ]; then
    n=$(echo "$out" | grep -c "RLIMIT_MEMLOCK")
    [ "$n" = 1 ] || fail "RLIMIT_MEMLOCK: $n warnings on 4 ranks, want 1"
fi
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
out=$("$arbw" -h 2>&1 >/dev/null)
[ -z "$out" ] || fail "allreduce_bw -h wrote to stderr: $out"
"$arbw" -h | grep -q "^usage:" || fail "allreduce_bw -h printed no usage"
[ $bad = 0 ] && echo "config_env: all checks passed"
exit $bad
