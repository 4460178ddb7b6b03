#!/bin/bash
# Runs one command inside a throw-away qemu guest that boots Debian's own
# kernel (linux-image-amd64) with this host's root filesystem shared
# read-only over 9p: the same binaries, the same paths, but a kernel with the
# modules this host's kernel lacks (sch_netem for `tc netem`; rdma_rxe for
# soft-RoCE later). The guest's root is that share under a RAM overlay, with
# fresh /proc, /sys, /run and /dev/shm, so the command can write anywhere and
# create network namespaces and qdiscs freely; nothing it does reaches the
# host.
#
#   vm-run.sh [--mem MiB] [--cpus N] [--timeout S] [--net socket-listen:PORT |
#             --net socket-connect:PORT] [--mac MAC] -- COMMAND [ARGS...]
#
# By default the guest has no NIC (only lo). --net gives it one virtio-net NIC
# (eth0 once the command loads virtio_net: the initramfs loads only what 9p
# needs) joined to another guest's by a qemu `-netdev socket` on 127.0.0.1:
# one guest listens on PORT, the other connects to it (start the listening
# one first: a connect that finds nobody makes qemu exit). --mac sets the
# NIC's address (default 52:54:00:12:34:56; two joined guests need two).
#
# COMMAND runs as root in the guest, in the caller's working directory, with
# PATH and the HCOMM_* variables of the caller. Its stdout/stderr are printed
# here and its exit status is this script's. Exit 77 ("skipped: <why>") when
# the host cannot run the guest: no qemu-system-x86_64, no
# Debian kernel image with modules, no static busybox (install with
# `scripts/install-deps.sh --test`), not root, or a guest that never reaches
# the command (qemu cannot boot the kernel here).
set -u
MEM=2048
CPUS=2
TIMEOUT=300
NIC=(-nic none)
NET=
MAC=52:54:00:12:34:56
usage() {
    echo "usage: vm-run.sh [--mem MiB] [--cpus N] [--timeout S] [--net socket-listen:PORT|socket-connect:PORT] [--mac MAC] -- COMMAND [ARGS...]" >&2
    exit 2
}
while (($#)); do
    case $1 in
    --mem) MEM=$2; shift 2 ;;
    --cpus) CPUS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --net) NET=$2; shift 2 ;;
    --mac) MAC=$2; shift 2 ;;
    --) shift; break ;;
    *) usage ;;
    esac
done
case $NET in
"") ;;
socket-listen:[0-9]* | socket-connect:[0-9]*)
    port=${NET#*:}
    [[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) || usage
    mode=${NET%%:*}
    mode=${mode#socket-}
    [[ $MAC =~ ^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$ ]] || usage
    NIC=(-netdev "socket,id=n0,$mode=127.0.0.1:$port" -device "virtio-net-pci,netdev=n0,mac=$MAC")
    ;;
*) usage ;;
esac
(($#)) || { echo "vm-run.sh: no command given" >&2; exit 2; }

skip() { echo "skipped: $*"; exit 77; }
if [ "${HCOMM_VM_ACCEL:-tcg}" = kvm ]; then
    [ -r /dev/kvm ] && [ -w /dev/kvm ] || skip "no usable /dev/kvm"
fi
QEMU=$(command -v qemu-system-x86_64) || skip "qemu-system-x86_64 not installed (package qemu-system-x86)"
BUSYBOX=/bin/busybox
[ "$(id -u)" = 0 ] || skip "needs root (the guest sees this host's whole root filesystem)"
[ -x "$BUSYBOX" ] && ! ldd "$BUSYBOX" >/dev/null 2>&1 ||
    skip "no static $BUSYBOX (package busybox-static)"
# A Debian kernel image whose modules are installed (the last by name).
KVER=
for k in /boot/vmlinuz-*; do
    v=${k#/boot/vmlinuz-}
    [ -f "/lib/modules/$v/modules.dep" ] && KVER=$v
done
[ -n "$KVER" ] || skip "no Debian kernel image with modules in /boot (package linux-image-amd64)"
MODDIR=/lib/modules/$KVER/kernel

JOB=$(mktemp -d /var/tmp/hcomm-vm.XXXXXX) || exit 1
trap 'rm -rf "$JOB"' EXIT
mkdir -p "$JOB/initramfs"/{bin,dev,proc,sys,m,newroot,lower,rw} "$JOB/share"

# initramfs: busybox plus the modules that mount the host's root over 9p
cp "$BUSYBOX" "$JOB/initramfs/bin/busybox"
for m in virtio/virtio virtio/virtio_ring virtio/virtio_pci_legacy_dev \
    virtio/virtio_pci_modern_dev virtio/virtio_pci; do
    cp "$MODDIR/drivers/$m.ko" "$JOB/initramfs/m/" || skip "module $m missing for $KVER"
done
for m in net/9p/9pnet net/9p/9pnet_virtio fs/netfs/netfs fs/fscache/fscache fs/9p/9p \
    fs/overlayfs/overlay; do
    cp "$MODDIR/$m.ko" "$JOB/initramfs/m/" || skip "module $m missing for $KVER"
done
cat >"$JOB/initramfs/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs dev /dev
for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci \
         9pnet 9pnet_virtio netfs fscache 9p overlay; do
    /bin/busybox insmod /m/$m.ko || echo "vm init: insmod $m failed"
done
o=trans=virtio,version=9p2000.L,msize=262144
# The host's root, read-only, under a RAM overlay: the guest sees every path
# the host has (the repository may live under /tmp) and may write anywhere
# without touching the host.
/bin/busybox mount -t 9p -o ro,$o hostroot /lower || { echo "vm init: cannot mount the host root"; /bin/busybox poweroff -f; }
/bin/busybox mount -t tmpfs -o size=75% rw /rw
/bin/busybox mkdir -p /rw/upper /rw/work
/bin/busybox mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot ||
    { echo "vm init: cannot mount the overlay root"; /bin/busybox poweroff -f; }
/bin/busybox mount -t 9p -o $o job /newroot/mnt || { echo "vm init: cannot mount the job folder"; /bin/busybox poweroff -f; }
/bin/busybox mount --move /dev /newroot/dev
/bin/busybox umount /proc
exec /bin/busybox switch_root /newroot /bin/bash /mnt/guest.sh
EOF
chmod +x "$JOB/initramfs/init"
(cd "$JOB/initramfs" && find . | cpio -o -H newc 2>/dev/null | gzip -1 >"$JOB/initrd.gz") ||
    { echo "vm-run.sh: cannot build the initramfs" >&2; exit 1; }

# what the guest runs: the caller's directory, PATH and HCOMM_* environment
{
    echo ': >/mnt/started'
    echo 'mount -t proc proc /proc; mount -t sysfs sys /sys'
    echo 'mount -t tmpfs tmpfs /run'
    echo 'mkdir -p /dev/shm /dev/pts; mount -t tmpfs tmpfs /dev/shm; mount -t devpts devpts /dev/pts'
    echo 'ip link set lo up'
    printf 'export PATH=%q HOME=/tmp\n' "$PATH"
    env | grep -E '^HCOMM_[A-Z0-9_]*=' | while IFS= read -r kv; do printf 'export %q\n' "$kv"; done
    printf '(cd %q && ' "$PWD"
    printf '%q ' "$@"
    echo ') >/mnt/out 2>&1 </dev/null'
    echo 'echo $? >/mnt/rc'
    echo 'sync; umount /mnt; echo o >/proc/sysrq-trigger; sleep 10'
} >"$JOB/share/guest.sh"

# Software emulation by default: KVM inside this (already virtual) machine
# hangs before the kernel prints a line; HCOMM_VM_ACCEL=kvm where it works.
if [ "${HCOMM_VM_ACCEL:-tcg}" = kvm ]; then
    ACCEL=(-enable-kvm -cpu host)
else
    ACCEL=(-accel tcg,thread=multi -cpu max)
fi
# The TSC as the guest's clock, as on real hosts: under TCG the kernel
# otherwise falls back to the HPET, and every clock_gettime becomes a system
# call and an emulated MMIO read (~2% of a latency run's samples in
# read_hpet), which real machines (vDSO + TSC) never pay.
CLOCK=${HCOMM_VM_CLOCK-clocksource=tsc tsc=reliable}
timeout -k 5 "$TIMEOUT" "$QEMU" "${ACCEL[@]}" -smp "$CPUS" -m "$MEM" \
    -nographic -no-reboot -nodefaults -serial "file:$JOB/console" "${NIC[@]}" \
    -kernel "/boot/vmlinuz-$KVER" -initrd "$JOB/initrd.gz" \
    -append "console=ttyS0 panic=-1 rdinit=/init loglevel=4 $CLOCK" \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
    -virtfs "local,path=$JOB/share,mount_tag=job,security_model=none" >"$JOB/qemu.log" 2>&1
qrc=$?
[ -f "$JOB/share/out" ] && cat "$JOB/share/out"
if [ ! -f "$JOB/share/started" ]; then
    # The host could not boot the guest at all (qemu or the kernel image
    # unusable here): nothing of ours ran, so this is a skip, with the tail
    # of what the guest printed.
    tail -n 20 "$JOB/console" "$JOB/qemu.log" >&2
    if [ -n "$NET" ] && grep -qi "netdev\|socket\|connect" "$JOB/qemu.log"; then
        echo "vm-run.sh: qemu could not set up --net $NET (qemu exit $qrc; its output is above)" >&2
        exit 1
    fi
    skip "the guest kernel $KVER did not boot here (qemu exit $qrc; its console is above)"
fi
if [ ! -f "$JOB/share/rc" ]; then
    echo "vm-run.sh: the command did not finish in the guest (qemu exit $qrc, timeout ${TIMEOUT}s); console and qemu output:" >&2
    tail -n 40 "$JOB/console" "$JOB/qemu.log" >&2
    exit 1
fi
exit "$(cat "$JOB/share/rc")"
