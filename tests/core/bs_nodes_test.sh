#!/bin/bash
# bs_nodes_test.sh HCOMMRUN INIT_PROBE FAKE_NODES
# hcomm_init's tables go by node (core/bootstrap_node.c): rank 0 sends
# each table to one rank per other node, the others read it from their
# node leader's file. Counted by rank 0's init line (HCOMM_LOG=info:
# "rank 0's bootstrap: sent M messages (B bytes)"): 3 (N - 1) messages
# (the handshake's CHALLENGE; each round's table, or the 24-byte word that
# it is in the node's file), and at most 200 bytes per rank plus the two
# tables per other node (the star: two tables per rank, 111,888 bytes at 8
# ranks). HCOMM_BOOTSTRAP_NODES=0 is the star. Every job leaves no file in
# /dev/shm. Fails without the tables by node.
set -u
run=$1 probe=$2 fake=$3
fail() { echo "FAIL: $*"; exit 1; }
before=$(ls /dev/shm | grep -c '^hcomm-ag-')
check() { # ranks nodes cmd...
    local n=$1 nodes=$2 star=0
    shift 2
    [ "$nodes" = star ] && star=1 nodes=1
    out=$(HCOMM_LOG=info HCOMM_SHM_SLOTS=8 HCOMM_TOPO_CACHE=none "$run" -n "$n" --timeout 60 "$@" 2>&1) ||
        { echo "$out" | tail -20; fail "$n ranks on $nodes node(s): the job failed"; }
    line=$(echo "$out" | grep -o "rank 0's bootstrap: sent [0-9]* messages ([0-9]* bytes)")
    [ -n "$line" ] || { echo "$out" | tail -20; fail "no init line from rank 0"; }
    sent=$(echo "$line" | awk '{print $5}') bytes=$(echo "$line" | awk '{print $7}' | tr -d '(')
    want=$((3 * (n - 1)))
    echo "$n ranks on $nodes node(s): rank 0 sent $sent messages, $bytes bytes"
    [ "$sent" = "$want" ] || fail "$n ranks on $nodes node(s): rank 0 sent $sent messages, want $want"
    echo "$out" | grep -q "init_probe: $n ranks" || fail "no result line"
    # a table: round 1's entry (under 700 bytes) and round 2's (1536) per rank
    local max=$((200 * (n - 1) + (nodes - 1) * n * 2300))
    [ $star = 1 ] && max=$((n * n * 2300))
    [ "$bytes" -le $max ] || fail "$n ranks on $nodes node(s): rank 0 sent $bytes bytes (> $max)"
    [ $star = 0 ] || [ "$bytes" -gt $(((n - 1) * n * 1536)) ] ||
        fail "the star sent $bytes bytes: fewer than its tables"
}
check 8 1 "$probe"
check 8 2 "$fake" 2 cyclic "$probe"
check 6 3 "$fake" 3 block "$probe"
check 2 1 "$probe"
HCOMM_BOOTSTRAP_NODES=0 check 8 star "$probe"
check 16 1 "$probe"
check 5 2 "$fake" 2 cyclic "$probe"
# The sweep: files a dead leader left are removed by the next leader's
# first publish; a live leader's, another pid namespace's, an older
# header's and another user's stay. In a pid namespace of its own where
# unshare can make one, so that a leader of a job running beside this test
# (ctest -j) cannot take the dead leader's file first (it skips files of
# other namespaces): then the removal must be this job's, and logged.
mkstale() { # name pid pidns owner_magic
    python3 - "$@" <<'PY'
import struct, sys
name, pid, ns, om = sys.argv[1], int(sys.argv[2], 0), int(sys.argv[3], 0), int(sys.argv[4], 0)
hdr = struct.pack('<QQQIiIiQ16s', 0x68636f6d6d41474e, 0x1234, 0, 1, 1, om, pid, ns, bytes(16))
with open('/dev/shm/' + name, 'wb') as f:
    f.write(hdr)
PY
    [ -f "/dev/shm/$1" ] || fail "could not write /dev/shm/$1"
    chmod 600 "/dev/shm/$1"
}
stale_case() { # own_ns: 1 when in a pid namespace of its own
    sh -c 'exit 0' &
    local dead=$! ns lead=0x4c656164 tag=$$.$RANDOM k out left
    wait $dead
    ns=$(stat -L -c %i /proc/self/ns/pid)
    mkstale "hcomm-ag-t$tag-dead" $dead "$ns" $lead
    mkstale "hcomm-ag-t$tag-live" $$ "$ns" $lead
    mkstale "hcomm-ag-t$tag-otherns" $dead $((ns + 1)) $lead
    mkstale "hcomm-ag-t$tag-old" $dead "$ns" 0
    mkstale "hcomm-ag-t$tag-user" $dead "$ns" $lead
    chown 65534 "/dev/shm/hcomm-ag-t$tag-user" 2>/dev/null || rm -f "/dev/shm/hcomm-ag-t$tag-user"
    out=$(HCOMM_LOG=info HCOMM_TOPO_CACHE=none "$run" -n 2 --timeout 60 "$probe" 2>&1) ||
        { echo "$out" | tail -20; fail "the job after the stale files failed"; }
    left=$(ls /dev/shm | grep "^hcomm-ag-t$tag-" | tr '\n' ' ')
    rm -f /dev/shm/hcomm-ag-t$tag-*
    echo "stale files after a job: $left"
    case " $left " in *" hcomm-ag-t$tag-dead "*) fail "a dead leader's file was not removed" ;; esac
    for k in live otherns old; do
        case " $left " in *" hcomm-ag-t$tag-$k "*) ;; *) fail "the $k file was removed" ;; esac
    done
    if [ "$(id -u)" = 0 ]; then
        case " $left " in *" hcomm-ag-t$tag-user "*) ;; *) fail "another user's file was removed" ;; esac
    fi
    if [ "$1" = 1 ]; then
        echo "$out" | grep -Eq "removed [0-9]+ node tables? from /dev/shm" || fail "no log line for the removal"
    fi
}
export -f mkstale stale_case fail
export run probe
if unshare -pf --mount-proc true 2>/dev/null; then
    unshare -pf --mount-proc bash -c 'stale_case 1' || exit 1
else
    echo "(no pid namespace of its own: unshare failed; the log line is not checked)"
    stale_case 0
fi
# (a job running beside this one may hold a file for a moment: look again
# for up to 3 s before calling one left)
for _ in 1 2 3 4 5 6; do
    after=$(ls /dev/shm | grep -c '^hcomm-ag-')
    [ "$after" -le "$before" ] && break
    sleep 0.5
done
[ "$after" -le "$before" ] || fail "files left in /dev/shm: $(ls /dev/shm | grep '^hcomm-ag-')"
echo "PASS"
