#!/bin/bash
# tcp_rails_lo.sh HCOMMRUN MP_TCP_RAILS: tcp rails without root (issue 37):
# HCOMM_SOCKET_IFNAME=lo,<the first other IPv4 interface that is up> gives
# every rank two rails on this host (both reach it; the kernel carries the
# second over loopback too), HCOMM_SHM=0, 2 ranks: 1..4 MiB allreduces and
# ring messages for 4 s, every byte checked, then the driver counters must
# show the rail header at work: both rails carried DATA (striping) and ACK
# frames were sent. Failover needs a link to take down: tests/netns
# rails_test.sh (root). Skips (77) on a host with no second interface.
set -u
run=$1 prog=$2
other=$(ip -4 -o addr show up 2>/dev/null | awk '$2 != "lo" { print $2; exit }')
[ -n "$other" ] || { echo "skipped: no IPv4 interface up besides lo"; exit 77; }
log=$(mktemp /tmp/tcp_rails_lo.XXXXXX)
trap 'rm -f "$log"' EXIT
HCOMM_SHM=0 HCOMM_NET=tcp HCOMM_SOCKET_IFNAME="=lo,=$other" HCOMM_LOG=info HCOMM_STATS=1 \
    HCOMM_STATS_LEVEL=2 "$run" -n 2 --timeout 100 "$prog" --min 1M --max 4M --seconds 4 >"$log" 2>&1
rc=$?
grep -E "FAIL|rail|passed|bytes:" "$log" | grep -v "^\[hcomm r[01]\]   driver" | cut -c1-200
[ $rc = 0 ] || { echo "FAIL: mp_tcp_rails exited $rc"; tail -n 30 "$log"; exit 1; }
counter() { grep "^\[hcomm r$1\]   driver tcp" "$log" | grep -o " $2 [0-9]*" | awk '{print $2}'; }
for r in 0 1; do
    t0=$(counter $r rail0_tx_bytes) t1=$(counter $r rail1_tx_bytes) acks=$(counter $r acks_sent)
    echo "rank $r: rail0_tx_bytes ${t0:-none} rail1_tx_bytes ${t1:-none} acks_sent ${acks:-none}"
    [ "${t0:-0}" -gt 1048576 ] && [ "${t1:-0}" -gt 1048576 ] ||
        { echo "FAIL: rank $r did not stripe over both rails"; exit 1; }
    [ "${acks:-0}" -gt 0 ] || { echo "FAIL: rank $r sent no ACK frame"; exit 1; }
done
echo PASS
