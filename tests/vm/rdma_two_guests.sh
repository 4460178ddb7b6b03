#!/bin/bash
# rdma_two_guests.sh BUILD_DIR: the verbs driver between two real nodes: two
# qemu guests at once (tests/vm/vm-run.sh, 1 CPU and 1.5 GiB each), joined by
# a qemu socket netdev on 127.0.0.1 (guest A listens, guest B connects), each
# with soft-RoCE on its virtio NIC (tests/vm/rxe-run.sh --netdev eth0):
# A 10.78.0.1/24, B 10.78.0.2/24.
#
#   1. perftest across the guests (ib_write_lat 8 B, A serves, B's client
#      retries until A is up): rxe works between the two kernels, whatever
#      hcomm does;
#   2. mp_tcp_check --coll --max HCOMM_VM_MAX (default 64M) at 1+1: rank 0
#      in A with HCOMM_BOOTSTRAP=tcp://10.78.0.1:PORT, rank 1 in B,
#      HCOMM_NET=verbs (HCOMM_VM_NET=tcp to prove the script without it).
#
# The guests share no files: they meet over the network only. Rank 1 retries
# its bootstrap connect (with backoff) until rank 0 listens, and rank 0 waits
# for rank 1's hello, each for at most HCOMM_TIMEOUT seconds (set to 150
# here: the two guests boot and bring rxe up at their own pace). Each guest
# names its own node (HCOMM_NODE_ID=guestA/guestB: both have the same host
# name and namespace ids). Each guest's output is printed, prefixed [A]/[B].
#
# Exit 0 both passed, 1 either failed, 77 skipped (no guests or no rxe here).
# Label slow (1.5-3 minutes with both guests emulated on 2 cores).
set -u
here=$(cd "$(dirname "$0")" && pwd)

if [ "${1:-}" = --guest ]; then
    # inside a guest, after rxe-run.sh: --guest A|B BUILD PORT
    who=$2 build=$3 port=$4
    NET=${HCOMM_VM_NET:-verbs}
    gid=${HCOMM_VM_RXE_GID:-1}
    echo "guest $who: rxe0 on eth0 ${HCOMM_VM_RXE_IP:-?}, GID index $gid, HCOMM_NET=$NET"
    pp=$((port + 1))
    if [ "$who" = A ]; then
        echo "== perftest: ib_write_lat server (B connects)"
        timeout -k 5 90 ib_write_lat -d rxe0 -x "$gid" -p "$pp" -F -s 8 -n 500 2>&1 | tail -3 ||
            echo "guest A: ib_write_lat server failed"
    else
        echo "== perftest: ib_write_lat client of 10.78.0.1"
        ok=0 t1=$SECONDS
        while ((SECONDS - t1 < 90)); do
            if timeout -k 5 60 ib_write_lat -d rxe0 -x "$gid" -p "$pp" -F -s 8 -n 500 10.78.0.1 >/tmp/wl.log 2>&1; then
                ok=1
                break
            fi
            sleep 2
        done
        if [ $ok = 1 ]; then
            awk '$1 == 8 {print "ib_write_lat across the guests: 8 B typical " $5 " us (avg " $6 ")"}' /tmp/wl.log
        else
            echo "guest B: ib_write_lat never reached 10.78.0.1 (rxe across the guests not working?):"
            tail -5 /tmp/wl.log
        fi
    fi
    r=0 node=guestA
    [ "$who" = B ] && r=1 node=guestB
    echo "== mp_tcp_check --coll --max ${HCOMM_VM_MAX:-64M}: rank $r of 2 on node $node"
    t0=$SECONDS
    env HCOMM_RANK=$r HCOMM_SIZE=2 HCOMM_LOCAL_RANK=0 HCOMM_LOCAL_SIZE=1 HCOMM_NODE_ID=$node \
        HCOMM_NET="$NET" HCOMM_BOOTSTRAP="tcp://10.78.0.1:$port" HCOMM_JOB_KEY="${HCOMM_VM_KEY:?}" \
        HCOMM_TIMEOUT="${HCOMM_TIMEOUT:-150}" HCOMM_LOG="${HCOMM_LOG:-warn}" \
        timeout -k 5 "${HCOMM_VM_RANK_LIMIT:-360}" "$build/bin/mp_tcp_check" --coll --max "${HCOMM_VM_MAX:-64M}" \
        >/tmp/rank.log 2>&1
    rc=$?
    tail -n 30 /tmp/rank.log
    echo "guest $who: rank $r exited with status $rc after $((SECONDS - t0)) s"
    exit $rc
fi

build=$(cd "${1:?build dir}" && pwd) || exit 1
[ -x "$build/bin/mp_tcp_check" ] || { echo "FAIL: $build/bin/mp_tcp_check not built"; exit 1; }
command -v ss >/dev/null || { echo "skipped: ss (iproute2) not installed"; exit 77; }
work=$(mktemp -d /tmp/hcomm-2g.XXXXXX) || exit 1
pa='' pb=''
cleanup() {
    local p
    for p in $pa $pb; do kill -TERM "$p" 2>/dev/null; done
    for p in $pa $pb; do wait "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# a free port for the socket netdev (the bootstrap uses another inside)
for _ in $(seq 20); do
    port=$((20000 + RANDOM % 12000))
    ss -Htan "( sport = :$port )" 2>/dev/null | grep -q . || break
done
HCOMM_VM_KEY=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export HCOMM_VM_KEY
export HCOMM_TIMEOUT=${HCOMM_TIMEOUT:-150}
limit=${HCOMM_VM_TIMEOUT:-420}
bport=$((port + 10))
t0=$SECONDS

bash "$here/vm-run.sh" --cpus 1 --mem 1536 --timeout "$limit" --net "socket-listen:$port" \
    --mac 52:54:00:78:00:01 -- bash "$here/rxe-run.sh" --netdev eth0 --ip 10.78.0.1/24 \
    bash "$here/rdma_two_guests.sh" --guest A "$build" "$bport" >"$work/A.log" 2>&1 &
pa=$!
# B may connect only once A's qemu listens
for _ in $(seq 300); do
    ss -Hltn "( sport = :$port )" 2>/dev/null | grep -q . && break
    kill -0 "$pa" 2>/dev/null || break
    sleep 0.1
done
if ! ss -Hltn "( sport = :$port )" 2>/dev/null | grep -q .; then
    wait "$pa"
    rc=$?
    sed 's/^/[A] /' "$work/A.log"
    [ $rc = 77 ] && exit 77
    echo "FAIL: guest A's qemu never listened on 127.0.0.1:$port"
    exit 1
fi
bash "$here/vm-run.sh" --cpus 1 --mem 1536 --timeout "$limit" --net "socket-connect:$port" \
    --mac 52:54:00:78:00:02 -- bash "$here/rxe-run.sh" --netdev eth0 --ip 10.78.0.2/24 \
    bash "$here/rdma_two_guests.sh" --guest B "$build" "$bport" >"$work/B.log" 2>&1 &
pb=$!
wait "$pa"
ra=$?
wait "$pb"
rb=$?
pa='' pb=''
sed 's/^/[A] /' "$work/A.log"
sed 's/^/[B] /' "$work/B.log"
echo "guest A exit $ra, guest B exit $rb, $((SECONDS - t0)) s in all"
if [ $ra = 77 ] || [ $rb = 77 ]; then
    # one guest could not run: the other's failure (a rank alone) follows from it
    echo "skipped: guest $([ $ra = 77 ] && echo A || echo B) could not run (its output is above)"
    exit 77
fi
if [ $ra != 0 ] || [ $rb != 0 ]; then
    echo "FAIL (two guests, HCOMM_NET=${HCOMM_VM_NET:-verbs}): guest A $ra, guest B $rb"
    exit 1
fi
echo "PASS (two guests, HCOMM_NET=${HCOMM_VM_NET:-verbs}): mp_tcp_check --coll at 1+1 across guest A and guest B"
exit 0
