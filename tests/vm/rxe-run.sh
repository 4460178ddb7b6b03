#!/bin/bash
# Runs inside a tests/vm/vm-run.sh guest: brings up one soft-RoCE (rdma_rxe)
# device, exports HCOMM_IB_HCA for it, runs COMMAND and returns its status.
#
#   vm-run.sh -- tests/vm/rxe-run.sh [--netdev IF --ip ADDR/PFX] [--] COMMAND [ARGS...]
#
# Default: a veth pair (veth0 10.77.0.1/24, veth1 up, no address) and rxe0 on
# veth0. Every rank of a one-guest job uses that one device (ranks on
# different "nodes" reach each other through the device's loopback: two rxe
# devices on the two ends of a veth pair in one namespace hang perftest).
# With --netdev: rxe0 on that interface instead (the virtio NIC of a
# two-guest run, tests/vm/rdma_two_guests.sh), given ADDR/PFX; virtio_net is
# loaded first when IF does not exist yet.
#
# Exports HCOMM_IB_HCA=rxe0, HCOMM_VM_RXE_IP (the device's IPv4 address) and
# HCOMM_VM_RXE_GID (the GID index of that IPv4 address, for perftest's -x).
# Raises the locked-memory limit (RDMA registrations pin memory).
#
# Exit 77 "skipped: <why>" when the guest cannot have a soft-RoCE device: no
# rdma tool (iproute2), no rdma_rxe module, the device never becomes ACTIVE.
# Every step runs under `timeout`: a wedged module or tool fails the run
# instead of hanging the guest.
set -u
netdev='' ip_addr=''
while (($#)); do
    case $1 in
    --netdev) netdev=$2; shift 2 ;;
    --ip) ip_addr=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
    esac
done
(($#)) || { echo "rxe-run.sh: no command given" >&2; exit 2; }

skip() { echo "skipped: $*"; exit 77; }
die() { echo "rxe-run.sh: $*" >&2; exit 1; }
t() { timeout -k 2 "${T_STEP:-20}" "$@"; }

[ "$(id -u)" = 0 ] || skip "rxe-run.sh needs root (run it inside tests/vm/vm-run.sh)"
command -v rdma >/dev/null || skip "the rdma tool (iproute2) is not installed"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"
command -v modprobe >/dev/null || skip "modprobe (kmod) is not installed"
t modprobe rdma_rxe 2>&1 || skip "cannot load the rdma_rxe module (kernel $(uname -r) lacks soft-RoCE?)"

if [ -n "$netdev" ]; then
    [ -n "$ip_addr" ] || die "--netdev $netdev needs --ip ADDR/PFX"
    if ! ip link show "$netdev" >/dev/null 2>&1; then
        t modprobe virtio_net || die "cannot load virtio_net for $netdev"
        for _ in $(seq 50); do ip link show "$netdev" >/dev/null 2>&1 && break; sleep 0.1; done
        ip link show "$netdev" >/dev/null 2>&1 || die "no interface $netdev after loading virtio_net: $(ip -br link)"
    fi
    t ip addr add "$ip_addr" dev "$netdev" || die "ip addr add $ip_addr dev $netdev"
    t ip link set "$netdev" up || die "ip link set $netdev up"
else
    netdev=veth0 ip_addr=10.77.0.1/24
    t ip link add veth0 type veth peer name veth1 || skip "cannot create a veth pair"
    t ip addr add "$ip_addr" dev veth0 || die "ip addr add $ip_addr dev veth0"
    { t ip link set veth0 up && t ip link set veth1 up; } || die "cannot bring the veth pair up"
fi
t rdma link add rxe0 type rxe netdev "$netdev" || skip "rdma link add rxe0 type rxe netdev $netdev failed"

# The port is ACTIVE once the netdev has carrier; the IPv4 GID appears a
# moment after the address.
dev_ip=${ip_addr%/*}
gid_index=
for _ in $(seq 100); do
    if rdma link show rxe0/1 2>/dev/null | grep -q "state ACTIVE"; then
        for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
            case $(cat "$g" 2>/dev/null) in
            0000:0000:0000:0000:0000:ffff:*)
                gid_index=${g##*/}
                break
                ;;
            esac
        done
        [ -n "$gid_index" ] && break
    fi
    sleep 0.1
done
rdma link show rxe0/1 2>/dev/null | grep -q "state ACTIVE" ||
    skip "rxe0 never became ACTIVE: $(rdma link show 2>&1)"
[ -n "$gid_index" ] || die "rxe0 has no IPv4 GID for $dev_ip: $(cat /sys/class/infiniband/rxe0/ports/1/gids/* 2>&1 | head -4)"

ulimit -l unlimited 2>/dev/null || echo "rxe-run.sh: cannot raise RLIMIT_MEMLOCK (now $(ulimit -l) kB)"
export HCOMM_IB_HCA=rxe0 HCOMM_VM_RXE_IP=$dev_ip HCOMM_VM_RXE_GID=$gid_index
echo "rxe-run.sh: rxe0 on $netdev ($ip_addr, IPv4 GID index $gid_index) ACTIVE, kernel $(uname -r)"
"$@"
