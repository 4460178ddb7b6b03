#!/bin/bash
# hang_test.sh HCOMMRUN MP_HANG: hangs and disagreements explain themselves
# (tests/core/mp_hang.c, 4 ranks, the last one misbehaves at call #2):
#   - skip (node and tcp paths): the error names both calls and the rank;
#   - skipend: rank 3 skips the last call: the timeout errors name it;
#   - root (node path: an error naming the rank that went past; tcp path:
#     a hang whose warning names the rank, the collective and the message
#     it already sent for the next one);
#   - sleep: HCOMM_WARN_AFTER warnings and the timeout error name the
#     operation (#2, count, dtype), the algorithm and step, rank 3 and its
#     process state;
#   - nb (tcp and node paths): non-blocking calls completed by hcomm_wait
#     (irecv, iallreduce) and a blocking rendezvous-size send to a sleeping
#     rank: the warnings name the call, the operation, the rank waited for
#     and "data" (the send: "rendezvous request sent, no answer");
#   - stop: rank 3 stopped beyond HCOMM_WARN_AFTER: the warnings name the
#     operation and its step, then rank 3 "stopped"; continued, the job ends
#     well;
#   - hcommrun --timeout and SIGUSR1: every rank's report, rank 3 named as
#     the one the others wait for, its process state when it cannot answer;
#     with HCOMM_WARN_AFTER=0 a wait that warns at HCOMM_WARN_AFTER=1 (the
#     sleep case) logs no warning at all.
set -u
run=${1:?hcommrun} prog=${2:?mp_hang}
work=$(mktemp -d /tmp/hc-hang.XXXXXX)
trap 'rm -rf "$work"; kill $(jobs -p) 2>/dev/null' EXIT
bad=0
fail() { echo "FAIL: $*"; bad=1; }
has() { # FILE PATTERN WHAT
    grep -Eq -- "$2" "$1" || { fail "$3: no line matching '$2' in:"; sed 's/^/    /' "$1" | head -40; }
}
hasnt() { # FILE PATTERN WHAT
    ! grep -Eq -- "$2" "$1" || { fail "$3: a line matches '$2':"; grep -E -- "$2" "$1" | sed 's/^/    /' | head -10; }
}
then_has() { # FILE PATTERN PEER_PATTERN WHAT: a line matching PATTERN whose own peer lines
    # (the indented lines after it) include one matching PEER_PATTERN
    awk -v a="$2" -v b="$3" '$0 ~ a {on = 1; next} on && /^  / && $0 ~ b {found = 1; exit}
        !/^  / {on = 0} END {exit !found}' "$1" ||
        { fail "$4: no line matching '$2' followed by a peer line matching '$3' in:"; sed 's/^/    /' "$1" | head -40; }
}

# skip: on the node path each side names the other's call
"$run" -n 4 --timeout 60 --env HCOMM_TIMEOUT=20 "$prog" skip >"$work/skip" 2>&1
has "$work/skip" "rank [012]: hcomm_allreduce: hcomm_allreduce .*#2: communicator rank 3 called hcomm_barrier" "skip (node)"
# tcp path: rank 3 meets the others' allreduce #2 messages, or one of them
# meets rank 3's barrier message first, names it, and gives up on the
# communicator: rank 3's error then names the rank that gave up (a race, 1
# run in 25 on a loaded host), and the job's output has the other side's
# line naming both calls
"$run" -n 4 --timeout 60 --env HCOMM_TIMEOUT=20 --env HCOMM_SHM=0 "$prog" skip >"$work/skip_tcp" 2>&1
has "$work/skip_tcp" "rank 3: hcomm_barrier: .*hcomm_barrier\(\) #2 on the world communicator \(4 ranks\): communicator rank [0-2] called hcomm_allreduce at this point|rank [0-2]: hcomm_allreduce: .*hcomm_allreduce\(count 256, float32, sum\) #2 on the world communicator \(4 ranks\): communicator rank 3 called hcomm_barrier at this point" "skip (tcp)"
has "$work/skip_tcp" "rank 3: hcomm_barrier: .*(called hcomm_allreduce at this point|communicator rank [0-2] gave up on this communicator)" "skip (tcp): rank 3's error"

# skipend: rank 3 skips the last allreduce: the others time out naming it
# (the first rank to time out gives up on the communicator, the others then
# fail with that; the warnings before it show who waits for rank 3).
# Rank 3 is silent from the moment it skips: with HCOMM_CONN_FAIL_TIMEOUT
# as short as HCOMM_TIMEOUT (its default follows it) the silence could fail
# rank 3 first on a loaded host; that is another case.
"$run" -n 4 --timeout 60 --env HCOMM_TIMEOUT=3 --env HCOMM_WARN_AFTER=1 --env HCOMM_SHM=0 \
    --env HCOMM_CONN_FAIL_TIMEOUT=30 "$prog" skipend >"$work/skipend" 2>&1
has "$work/skipend" "rank [012]: hcomm_allreduce: hcomm_allreduce: timed out after 3 s \(HCOMM_TIMEOUT\): .*#3 .*waiting for data from rank [0-3]" "skipend: timeout error"
has "$work/skipend" "r[012]\] warn: hcomm_allreduce has waited 1\.[0-9] s \(HCOMM_WARN_AFTER=1\): .*#3 .*waiting for data from rank 3" "skipend: rank 3 named"

# root: broadcast with another root. Node path: rank 1 publishes its
# signature as a receiver, which rank 3 (taking it for the root) compares.
"$run" -n 4 --timeout 60 --env HCOMM_TIMEOUT=20 "$prog" root >"$work/root" 2>&1
has "$work/root" "rank 3: hcomm_broadcast: hcomm_broadcast .*root 1\) #2: communicator rank 1 (called hcomm_broadcast here with other arguments|went past this collective)" "root (node)"
# tcp path: rank 2's message of #2 (it forwards root 0's data down the
# tree) or rank 1's next message (of allreduce #3: it went past #2 without
# sending rank 3 anything) proves the disagreement: an error at once, not a
# wait for the timeout (HCOMM_TIMEOUT=20, HCOMM_WARN_AFTER=3: no warning;
# 3 s, not 1, so that a loaded host's scheduling is not taken for a wait)
"$run" -n 4 --timeout 60 --env HCOMM_TIMEOUT=20 --env HCOMM_WARN_AFTER=3 --env HCOMM_SHM=0 \
    "$prog" root >"$work/root_tcp" 2>&1
has "$work/root_tcp" "rank 3: hcomm_broadcast: .*hcomm_broadcast\(count 256, float32, root 1\) #2 .*communicator rank (1 went past this collective without sending this rank its part \(its next message is of a later hcomm_allreduce, #3\)|[0-2] called hcomm_broadcast here with other arguments)" "root (tcp)"
hasnt "$work/root_tcp" "r3\] warn: hcomm_broadcast has waited" "root (tcp): no wait"

# sleep: warnings then the timeout error, naming rank 3
"$run" -n 4 --timeout 60 --env HCOMM_TIMEOUT=3 --env HCOMM_WARN_AFTER=1 "$prog" sleep 8 >"$work/sleep" 2>&1
has "$work/sleep" "r0\] warn: hcomm_allreduce has waited 1\.[0-9] s \(HCOMM_WARN_AFTER=1\): hcomm_allreduce\(count 256, float32, sum\) #2 on the world communicator \(4 ranks\), algorithm node[a-z-]*, step: .*waiting for rank 3: its flag" "sleep warning"
has "$work/sleep" "^  rank 3 \(node .*, pid [0-9]+\): .*its process is sleeping" "sleep: rank 3's line"
# rank 3 took part in allreduce #1 over the node's shared region: not "nothing received"
hasnt "$work/sleep" "rank 3 .*nothing received from it since init" "sleep: rank 3's shm traffic"
has "$work/sleep" "^  rank 3 \(node .*\): (last heard [0-9.]+ s ago|no message from it since init).*in the node's shared region it last started collective #[0-9]+ of communicator" "sleep: what rank 3's line says was heard (its messages, and the node region)"
has "$work/sleep" "hcomm_allreduce has waited 2\.[0-9] s \(HCOMM_WARN_AFTER=1\)" "sleep: the warning repeats"
has "$work/sleep" "rank [012]: hcomm_allreduce: hcomm_allreduce: timed out after 3 s \(HCOMM_TIMEOUT\): hcomm_allreduce has waited .*waiting for rank 3" "sleep: timeout error"
# over tcp: the p2p path's words
"$run" -n 4 --timeout 60 --env HCOMM_TIMEOUT=3 --env HCOMM_WARN_AFTER=1 --env HCOMM_SHM=0 "$prog" sleep 8 >"$work/sleep_tcp" 2>&1
has "$work/sleep_tcp" "warn: hcomm_allreduce has waited 1\.[0-9] s \(HCOMM_WARN_AFTER=1\): hcomm_allreduce\(count 256, float32, sum\) #2 .*algorithm [a-z]+, step: .*waiting for data from rank 3: a message of 1024 bytes for collective #2 \(allreduce\), none has arrived" "sleep (tcp) warning"
has "$work/sleep_tcp" "^  rank 3 \(node .*\): last heard [0-9.]+ s ago" "sleep (tcp): last heard"

# nb over tcp: rank 0's irecv + hcomm_wait, then its rendezvous send (8 MiB)
# to rank 3, then everyone's iallreduce + hcomm_wait; rank 3 sleeps 3 s
# before each of its parts (the warnings come at 1 s: 2 s of margin for a
# rank that a loaded host starts late)
"$run" -n 4 --timeout 60 --env HCOMM_TIMEOUT=20 --env HCOMM_WARN_AFTER=1 --env HCOMM_SHM=0 \
    "$prog" nb 3 >"$work/nb_tcp" 2>&1 || fail "nb (tcp): the job failed (rc $?)"
nb_recv="r0\] warn: hcomm_wait\(recv\) has waited 1\.[0-9] s \(HCOMM_WARN_AFTER=1\): a receive on the world communicator: waiting for data from rank 3: a message of 1024 bytes with tag 7, none has arrived"
nb_send="r0\] warn: hcomm_send has waited 1\.[0-9] s \(HCOMM_WARN_AFTER=1\): a send on the world communicator: waiting for rank 3 to take a message of 8388608 bytes: its matching receive is not posted \(rendezvous request sent, no answer\)"
nb_coll="r[012]\] warn: hcomm_wait\(collective\) has waited [0-9.]+ s \(HCOMM_WARN_AFTER=1\): hcomm_allreduce\(count 256, float32, sum\) #2 on the world communicator \(4 ranks\), algorithm [a-z-]+, step: .*waiting for data from rank 3: a message of 1024 bytes for collective #2 \(allreduce\), none has arrived"
then_has "$work/nb_tcp" "$nb_recv" "^  rank 3 .*its process is sleeping" "nb (tcp): irecv + hcomm_wait"
then_has "$work/nb_tcp" "$nb_send" "^  rank 3 .*its process is sleeping" "nb (tcp): rendezvous send"
then_has "$work/nb_tcp" "$nb_coll" "^  rank 3 \(node " "nb (tcp): iallreduce + hcomm_wait"
# the node path (shared memory): the same words for the p2p parts
"$run" -n 4 --timeout 60 --env HCOMM_TIMEOUT=20 --env HCOMM_WARN_AFTER=1 \
    "$prog" nb 3 >"$work/nb" 2>&1 || fail "nb (node): the job failed (rc $?)"
then_has "$work/nb" "$nb_recv" "^  rank 3 .*its process is sleeping" "nb (node): irecv + hcomm_wait"
then_has "$work/nb" "$nb_send" "^  rank 3 .*its process is sleeping" "nb (node): rendezvous send"
has "$work/nb" "r[012]\] warn: hcomm_wait\(collective\) has waited [0-9.]+ s \(HCOMM_WARN_AFTER=1\): hcomm_allreduce\(count 256, float32, sum\) #2 .*waiting for rank 3: its flag" "nb (node): iallreduce + hcomm_wait"

# stop: rank 3 stopped for ~3 s, then continued
"$run" -n 4 --timeout 60 --env HCOMM_TIMEOUT=30 --env HCOMM_WARN_AFTER=1 "$prog" stop >"$work/stop" 2>&1 &
runner=$!
for i in $(seq 1 100); do # the stopped rank
    pid=$(ps -eo pid,stat,args | awk -v p="$prog" '$2 ~ /^T/ && $3 == p {print $1; exit}')
    [ -n "$pid" ] && break
    sleep 0.1
done
[ -n "$pid" ] || fail "stop: no stopped rank seen"
sleep 3
[ -n "$pid" ] && kill -CONT "$pid"
wait $runner; rc=$?
[ $rc = 0 ] || fail "stop: the job did not end well after SIGCONT (rc $rc)"
has "$work/stop" "^  rank 3 .*its process is stopped \(SIGSTOP or a debugger\)" "stop: warning"
then_has "$work/stop" "r[012]\] warn: hcomm_allreduce has waited [0-9.]+ s \(HCOMM_WARN_AFTER=1\): hcomm_allreduce\(count 256, float32, sum\) #2 on the world communicator \(4 ranks\), algorithm [a-z-]+, step: state [0-9]+, phase [0-9]+, round [0-9]+.*waiting for rank 3" \
    "^  rank 3 .*its process is stopped \(SIGSTOP or a debugger\)" "stop: the warning names the operation and step"

# hcommrun --timeout: the reports, rank 3 waited for and not answering (the
# others must be in allreduce #2 by then: 8 s leaves a loaded host's init
# time; rank 3 sleeps 30)
"$run" -n 4 --timeout 8 --env HCOMM_TIMEOUT=60 --env HCOMM_WARN_AFTER=0 "$prog" sleep 30 >"$work/report" 2>&1
rc=$?
[ $rc = 124 ] || fail "report: hcommrun exit $rc, want 124"
has "$work/report" "hcommrun: hang report \(timeout\), 3 of 4 live ranks answered" "report header"
has "$work/report" "most waited for: rank 3 \(3 ranks wait for it\)" "report: most waited for"
has "$work/report" "rank 3 \(pid [0-9]+\) \[waited for\]: no report: sleeping outside hcomm" "report: rank 3"
has "$work/report" "rank 0 \(pid [0-9]+\): hcomm_allreduce has waited .* #2 .*waiting for rank 3" "report: rank 0"

# SIGUSR1: a report while the job goes on, and it still ends well; rank 3
# sleeps 10 s with HCOMM_WARN_AFTER=0 (the same sleep warns at 1, above):
# not one warning about the wait. The signal goes once a second until a
# report finds rank 3 asleep: a fixed 2 s after the start could come
# before it got there on a loaded host (4 of 4 answered).
"$run" -n 4 --timeout 60 --env HCOMM_WARN_AFTER=0 "$prog" sleep 10 >"$work/usr1" 2>&1 &
runner=$!
for _ in 1 2 3 4 5 6 7 8 9; do
    sleep 1
    grep -q "hang report (SIGUSR1), 3 of 4" "$work/usr1" && break
    kill -USR1 $runner 2>/dev/null || break
done
wait $runner; rc=$?
[ $rc = 0 ] || fail "SIGUSR1: the job failed (rc $rc)"
has "$work/usr1" "hcommrun: hang report \(SIGUSR1\), 3 of 4 live ranks answered" "SIGUSR1 report"
has "$work/usr1" "most waited for: rank 3" "SIGUSR1: rank 3"
hasnt "$work/usr1" "warn: .*(has waited|HCOMM_WARN_AFTER)" "HCOMM_WARN_AFTER=0 (10 s wait)"
hasnt "$work/report" "warn: .*(has waited|HCOMM_WARN_AFTER)" "HCOMM_WARN_AFTER=0 (hcommrun --timeout)"
[ $bad = 0 ] && echo "hang_reports: all checks passed"
exit $bad
