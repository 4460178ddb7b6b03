#!/bin/bash
# bench_tcp.sh BUILD_DIR: hcomm (tcp driver) vs Open MPI (btl tcp,self) and
# torch.distributed gloo
# between two network namespaces joined by veth + bridge, one rank each:
# 8-byte ping-pong latency and 32 MiB float allreduce bus bandwidth.
#
# Open MPI is launched with mpirun inside node 0 and an rsh agent that
# enters node 1's namespace instead of ssh-ing (hosts named by address), so
# its daemons, out-of-band traffic and btl all cross the veth.
set -u
build=${1:?build dir}
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "skipped: needs root"; exit 77; }
export HCN_JOB="b$$"
work=$(mktemp -d /tmp/hcn-bench.XXXXXX)
trap '"$here/netns.sh" down; rm -rf "$work"' EXIT
"$here/netns.sh" up 2 || exit 1

hc_run() { # prog args...
    local port=$((20000 + RANDOM % 30000)) r pids=()
    for r in 0 1; do
        env HCOMM_RANK=$r HCOMM_SIZE=2 HCOMM_LOCAL_RANK=0 HCOMM_LOCAL_SIZE=1 \
            HCOMM_BOOTSTRAP="tcp://10.77.0.1:$port" HCOMM_JOB_KEY=bench HCOMM_LOG=error \
            "$here/netns.sh" run $r "$@" >"$work/hc$r.log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    cat "$work/hc0.log"
}
echo "== hcomm tcp, 2 namespaces, 1 rank each"
hc_run "$build/bin/pingpong" -b 8 -e 8
hc_run "$build/bin/allreduce_bw" -b 32M -e 32M

if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    echo "== Open MPI $(mpirun --version | head -1 | awk '{print $NF}') (btl tcp,self)"
    mpicc -O2 "$here/mpi_ref.c" -o "$work/mpi_ref" || exit 1
    cat >"$work/agent.sh" <<AGENT
#!/bin/bash
# rsh agent: "agent HOST cmd..." runs cmd in the namespace that owns HOST.
host=\$1; shift
i=\$(( \${host##*.} - 1 ))
exec ip netns exec hcn-$HCN_JOB-\$i /bin/sh -c "\$*"
AGENT
    chmod +x "$work/agent.sh"
    "$here/netns.sh" run 0 mpirun --allow-run-as-root -np 2 \
        --host 10.77.0.1,10.77.0.2 --mca plm_rsh_agent "$work/agent.sh" \
        --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
        --mca pml ob1 "$work/mpi_ref" 2>&1 | grep -v "^$"
else
    echo "Open MPI not installed: no reference"
fi

if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "== gloo (torch.distributed $(/usr/bin/python3 -c 'import torch;print(torch.__version__)')), 32 MiB allreduce"
    port=$((20000 + RANDOM % 30000)) pids=()
    for r in 0 1; do
        env RANK=$r WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=$port GLOO_SOCKET_IFNAME=eth0 \
            "$here/netns.sh" run $r /usr/bin/python3 "$here/gloo_ref.py" $((32 << 20)) 20 \
            >"$work/gl$r.log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    cat "$work/gl0.log"
else
    echo "torch not installed: no gloo reference (apt-get install python3-torch)"
fi
