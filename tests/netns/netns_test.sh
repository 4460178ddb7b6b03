#!/bin/bash
# Multi-node tcp tests: ranks launched by hand in network namespaces (as an
# external launcher would: HCOMM_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE, a
# rendezvous on node 0 at 10.77.0.1, a job key), one case per call:
#
#   netns_test.sh CASE MP_TCP_CHECK
#
#   p2p_1x1   2 nodes x 1 rank: p2p up to 64 MiB
#   p2p_2x2   2 nodes x 2 ranks (shm inside, tcp between), p2p up to 16 MiB
#   coll_2x2  2 nodes x 2 ranks: p2p + collectives (--coll)
#   coll_1x1  2 nodes x 1 rank: p2p + collectives
#   groups_2x2 2 nodes x 2 ranks: grouped (fused) collectives matrix
#   coll_3x1  3 nodes x 1 rank (bridge): p2p + collectives
#   sigstop   2x2: one rank stopped 5 s mid-run, then continued: all pass
#   sigkill   2x2: one rank killed: the others report HCOMM_ERR_PEER_FAILED
#   blame     2x2 allreduce loop, rank 1 killed, survivors leave at once:
#             each names rank 1 (not a survivor that left before it)
#             naming it within 5 s
#   netem     2x1 with 1% loss + 1 ms delay on the link: all pass
#   loss_nft  2x1 with 1% of TCP segments dropped by nftables (for kernels
#             without netem): all pass
#   idle      3 nodes x 1 rank, HCOMM_CONN_IDLE_TIMEOUT=1: mp_tcp_idle (next
#             to MP_TCP_CHECK): connections over veth close when idle and
#             reopen, data intact; every rank logs idle closes
#   garbage   2x1: junk and a silent client on rank 1's data port: both
#             dropped and logged, job passes
#   inject    3 nodes x 1 rank: node 2 only listens (a raw socket on the
#             bridge port of node 0) while rank 0 opens a connection to
#             rank 1, then, once it was idle-closed, replays the recorded
#             hello with a forged message, the same hello on socket index
#             9, and one with a higher counter: all refused and logged,
#             nothing delivered
#             (tcp_inject.py; mp_tcp_check --inject-wait)
#   send_compute_gap  2x1: rank 0 sends on a new connection and computes
#             60 s before it waits for the answer, then again after an idle
#             close (HCOMM_CONN_IDLE_TIMEOUT=2): nobody is failed
#   lanes     2x1: mp_coll_lanes (next to MP_TCP_CHECK) over the veth: a
#             large allreduce on one communicator, small ones and p2p on
#             another, every byte checked; the two communicators' lanes went
#             on different sockets (docs/lanes.md), and HCOMM_LOG=info
#             logged what each socket carried at finalize
#
# Exit 0 pass, 1 fail, 77 skipped (not root, no netns, no netem).
set -u
case_=${1:?case}
prog=${2:?path to mp_tcp_check}
# shellcheck source=tests/netns/jobs.sh
. "$(cd "$(dirname "$0")" && pwd)/jobs.sh"

# shellcheck source=tests/lib/wait_for_log.sh
. "$here/../lib/wait_for_log.sh"

case "$case_" in
p2p_1x1)
    "$netns" up 2 || fail "netns setup"
    launch 2 1
    wait_all 120
    ;;
p2p_2x2)
    "$netns" up 2 || fail "netns setup"
    launch 2 2 --max 16M
    wait_all 150
    ;;
coll_2x2)
    "$netns" up 2 || fail "netns setup"
    launch 2 2 --max 16M --coll
    wait_all 150
    ;;
groups_2x2)
    # Fused groups across nodes: shm inside, tcp between (the garbage
    # results of fusion over the network driver).
    "$netns" up 2 || fail "netns setup"
    prog=$(dirname "$prog")/mp_coll_matrix
    launch 2 2 --groups --counts 0,1,7,1023,65537
    wait_all 150
    ;;
coll_1x1)
    "$netns" up 2 || fail "netns setup"
    launch 2 1 --max 4M --coll
    wait_all 150
    ;;
coll_3x1)
    "$netns" up 3 || fail "netns setup"
    launch 3 1 --max 4M --coll
    wait_all 150
    ;;
node_id)
    # Two namespaces that claim one node: init must fail at once, naming
    # HCOMM_NODE_ID (it used to wait out HCOMM_TIMEOUT on the node segment).
    "$netns" up 2 || fail "netns setup"
    t0=$SECONDS
    HCOMM_NODE_ID=same-node launch 2 1 --max 1M --coll
    for i in "${!pids[@]}"; do
        while kill -0 "${pids[$i]}" 2>/dev/null && ((SECONDS - t0 < 20)); do sleep 0.2; done
        kill -0 "${pids[$i]}" 2>/dev/null && fail "rank $i still running after 20 s"
        wait "${pids[$i]}" && fail "rank $i expected to fail hcomm_init"
    done
    pids=()
    ((SECONDS - t0 < 10)) || fail "init failure expected within 10 s took $((SECONDS - t0)) s"
    grep -q "HCOMM_NODE_ID" "$work/r0.log" "$work/r1.log" || fail "expected a message naming HCOMM_NODE_ID"
    grep -h "HCOMM_NODE_ID" "$work"/r*.log | head -1
    ;;
sigstop)
    "$netns" up 2 || fail "netns setup"
    HCOMM_LOG=info launch 2 2 --max 1M --duration 14
    wait_for_log "$work/r2.log" "tcp: listening" 20 || fail "rank 2 never started"
    sleep 3
    kill -STOP "${pids[2]}"
    sleep 5
    kill -CONT "${pids[2]}"
    wait_all 90
    grep -h "suspect\|speaks again" "$work"/r*.log | head -4
    ;;
sigkill)
    "$netns" up 2 || fail "netns setup"
    launch 2 2 --until-fail 40
    wait_for_log "$work/r3.log" "exchanging" 20 || fail "rank 3 never started exchanging"
    sleep 2
    t_kill=$(date +%s.%N)
    kill -KILL "${pids[3]}"
    victim=${pids[3]}
    pids=("${pids[@]:0:3}")
    wait "$victim" 2>/dev/null
    wait_all 20
    for r in 0 1 2; do
        line=$(grep "peer failure reported" "$work/r$r.log") || fail "rank $r reported no failure"
        echo "$line" | grep -q "rank 3" || fail "rank $r did not name rank 3: $line"
        t=$(echo "$line" | sed -n 's/.*at T=\([0-9.]*\).*/\1/p')
        dt=$(echo "$t - $t_kill" | bc)
        echo "rank $r: failure seen after ${dt} s: $line"
        [ "$(echo "$dt < 5" | bc)" = 1 ] || fail "rank $r took ${dt} s to notice"
    done
    ;;
blame)
    # A training loop of allreduces on 2 nodes x 2 ranks; rank 1 (a
    # non-hub rank of node 0) is killed. Survivors leave as soon as their
    # collective fails, so each also sees other survivors go: every one must
    # still name rank 1 as the rank that failed, quickly.
    "$netns" up 2 || fail "netns setup"
    launch 2 2 --coll-until-fail 40
    for r in 0 1 2 3; do
        wait_for_log "$work/r$r.log" "exchanging" 20 || fail "rank $r never started"
    done
    sleep 1
    t_kill=$(date +%s.%N)
    kill -KILL "${pids[1]}"
    victim=${pids[1]}
    pids=("${pids[0]}" "${pids[2]}" "${pids[3]}")
    wait "$victim" 2>/dev/null
    wait_all 20
    for r in 0 2 3; do
        line=$(grep "peer failure reported" "$work/r$r.log") || fail "rank $r reported no failure"
        echo "$line" | grep -q "peer rank 1 (world) failed" || fail "rank $r did not name rank 1: $line"
        t=$(echo "$line" | sed -n 's/.*at T=\([0-9.]*\).*/\1/p')
        dt=$(echo "$t - $t_kill" | bc)
        echo "rank $r: failure seen after ${dt} s: $line"
        [ "$(echo "$dt < 2" | bc)" = 1 ] || fail "rank $r took ${dt} s to notice"
    done
    ;;
netem)
    "$netns" up 2 || fail "netns setup"
    ip netns exec "hcn-$HCN_JOB-1" tc qdisc add dev eth0 root netem loss 1% delay 1ms 2>/dev/null ||
        skip "tc netem unavailable (sch_netem module?)"
    ip netns exec "hcn-$HCN_JOB-br" tc qdisc add dev h1 root netem loss 1% delay 1ms ||
        fail "netem on the bridge side"
    launch 2 1 --max 16M
    wait_all 170
    ip netns exec "hcn-$HCN_JOB-1" tc -s qdisc show dev eth0 | grep -o "dropped [0-9]*" | head -1
    # The delay is really there: an 8-byte pingpong's one-way latency
    # (half the round trip, 1 ms each way) is at least 1 ms.
    prog_saved=$prog
    prog=$(dirname "$prog")/pingpong
    launch 2 1 -b 8 -e 8 -n 20 -w 2
    wait_all 60
    prog=$prog_saved
    lat=$(awk '$1 == 8 {print $3}' "$work/r0.log")
    echo "8 B one-way latency through netem: ${lat:-?} us (p50)"
    [ -n "$lat" ] && [ "$(echo "$lat >= 1000" | bc)" = 1 ] ||
        fail "expected an 8 B one-way latency of at least 1000 us with 1 ms netem delay, got ${lat:-nothing}"
    ;;
loss_nft)
    # The same loss without netem (kernels built without sch_netem): nftables
    # drops 1% of the TCP segments entering and leaving node 1. No delay.
    command -v nft >/dev/null || skip "nft (nftables) not installed"
    "$netns" up 2 || fail "netns setup"
    n1="hcn-$HCN_JOB-1"
    ip netns exec "$n1" nft add table inet hcl 2>/dev/null || skip "nftables unavailable in this kernel"
    for hook in input output; do
        ip netns exec "$n1" nft "add chain inet hcl $hook { type filter hook $hook priority 0; }" &&
            ip netns exec "$n1" nft add rule inet hcl "$hook" meta l4proto tcp numgen random mod 100 0 \
                counter drop || fail "nft rule for $hook"
    done
    launch 2 1 --max 16M
    wait_all 170
    ip netns exec "$n1" nft list table inet hcl | grep -o "packets [0-9]*" | tr '\n' ' '
    echo "(segments dropped in, out)"
    ;;
garbage)
    "$netns" up 2 || fail "netns setup"
    # A socket waits for its hello HCOMM_TIMEOUT (a connector may compute
    # before it writes one): 6 s here, so that the silent client is dropped
    # while the job still runs (14 s: on a loaded host the client may
    # connect seconds after the job started).
    HCOMM_TIMEOUT=6 HCOMM_LOG=info launch 2 1 --max 4M --duration 14
    wait_for_log "$work/r1.log" "tcp: listening on" 20 || fail "rank 1 never listened"
    port=$(sed -n 's/.*tcp: listening on 10\.77\.0\.2:\([0-9]*\).*/\1/p' "$work/r1.log" | head -1)
    [ -n "$port" ] || fail "no data port in rank 1's log"
    # junk right away, and a client that connects and says nothing
    "$netns" run 0 bash -c "exec 3<>/dev/tcp/10.77.0.2/$port; head -c 8192 /dev/urandom >&3; sleep 1" 2>/dev/null
    "$netns" run 0 bash -c "exec 3<>/dev/tcp/10.77.0.2/$port; sleep 9" 2>/dev/null &
    silent=$!
    wait_all 90
    wait "$silent" 2>/dev/null
    grep "dropped a connection from 10.77.0.1" "$work/r1.log" || fail "rank 1 did not log the drops"
    [ "$(grep -c "dropped a connection from 10.77.0.1" "$work/r1.log")" -ge 2 ] ||
        fail "expected both the junk and the silent client to be dropped"
    ;;
lanes)
    prog="$(dirname "$prog")/mp_coll_lanes"
    [ -x "$prog" ] || fail "mp_coll_lanes not built next to mp_tcp_check"
    "$netns" up 2 || fail "netns setup"
    HCOMM_LOG=info launch 2 1 --expect lanes
    wait_all 150
    for r in 0 1; do
        grep -q "passed\|comm A's collectives on lane" "$work/r$r.log" || fail "rank $r: no verdict"
        n=$(grep -c "info: tcp: socket [0-9]*: sent" "$work/r$r.log")
        echo "rank $r: $n sockets logged at finalize"
        [ "$n" -ge 2 ] || fail "rank $r logged $n sockets' counters, expected at least 2"
    done
    ;;
inject)
    # Issue 30.5: the job key must not be a replayable password. The victim
    # job runs on nodes 0 and 1; node 2 recorded the handshake bytes.
    "$netns" up 3 || fail "netns setup"
    py="$here/tcp_inject.py"
    ip netns exec "hcn-$HCN_JOB-br" python3 "$py" sniff h0 10.77.0.1 10.77.0.2 "$work/cap.json" 30 \
        >"$work/sniff.log" 2>&1 &
    sniffer=$!
    wait_for_log "$work/sniff.log" "ready" 10 || fail "the sniffer did not start"
    job_env=(HCOMM_CONN_IDLE_TIMEOUT=2 HCOMM_TOPO_PROBE=0)
    launch 2 1 --max 1K --inject-wait 20
    wait "$sniffer" || fail "nothing recorded: $(cat "$work/sniff.log")"
    sleep 5 # no traffic meanwhile: the connection idle-closes
    "$netns" run 2 python3 "$py" attack "$work/cap.json" 10.77.0.2 >"$work/attack.log" 2>&1
    cat "$work/sniff.log" "$work/attack.log"
    wait_all 90
    for a in replay index9; do
        grep -q "attempt $a: refused" "$work/attack.log" || fail "the stranger's $a was accepted"
    done
    grep "tcp: dropped a connection from 10.77.0.3" "$work/r1.log"
    grep -q "from 10\.77\.0\.3:.*a replayed hello" "$work/r1.log" || fail "rank 1 did not log the replay"
    grep -q "from 10\.77\.0\.3:.*socket index 9" "$work/r1.log" ||
        fail "rank 1 did not log the unconfigured socket index"
    grep -q "attempt bumped: refused" "$work/attack.log" || fail "the stranger's bumped counter"
    grep -q "from 10\.77\.0\.3:.*does not prove the job key" "$work/r1.log" ||
        fail "rank 1 did not log the hello that failed its proof"
    ;;
send_compute_gap)
    "$netns" up 2 || fail "netns setup"
    job_env=(HCOMM_CONN_IDLE_TIMEOUT=2)
    HCOMM_TIMEOUT=120 HCOMM_LOG=info launch 2 1 --max 64K --send-compute 60 --idle-first 5 \
        --check-closed
    wait_all 280
    for what in "on a new connection," "after an idle close,"; do
        grep -q "rank 0: $what a 60 s computation after a send: ok" "$work/r0.log" ||
            fail "rank 0 did not get its answer ($what)"
    done
    grep -q "idle-closed" "$work/r0.log" || fail "rank 0 logged no idle close"
    ;;
idle)
    idle_prog="$(dirname "$prog")/mp_tcp_idle"
    [ -x "$idle_prog" ] || fail "mp_tcp_idle not built next to $prog"
    prog=$idle_prog
    "$netns" up 3 || fail "netns setup"
    HCOMM_CONN_IDLE_TIMEOUT=1 HCOMM_LOG=info launch 3 1 --cycles 2 --idle 2.5
    wait_all 90
    for r in 0 1 2; do
        n=$(grep -c "idle-closed" "$work/r$r.log")
        echo "rank $r: $n idle closes"
        [ "$n" -ge 2 ] || fail "rank $r logged $n idle closes, expected at least 2"
    done
    ;;
*)
    echo "unknown case $case_" >&2
    exit 2
    ;;
esac
echo "PASS ($case_)"
exit 0
