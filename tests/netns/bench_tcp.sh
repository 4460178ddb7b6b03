#!/bin/bash
# bench_tcp.sh BUILD_DIR [ROUNDS]: hcomm (tcp driver) vs Open MPI (btl
# tcp,self) and torch.distributed gloo between two network namespaces joined
# by veth + bridge, one rank each: 8-byte ping-pong latency and 32 MiB float
# allreduce bus bandwidth. The hcomm and gloo allreduces run ROUNDS times
# (default 5), interleaved so that both see the same machine; the medians and
# their ratio close the output. Open MPI runs once (its 32 MiB allreduce is
# slow here), after the first round.
#
# Open MPI is launched with mpirun inside node 0 and an rsh agent that
# enters node 1's namespace instead of ssh-ing (hosts named by address), so
# its daemons, out-of-band traffic and btl all cross the veth.
set -u
build=${1:?build dir}
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "skipped: needs root"; exit 77; }
export HCN_JOB="b$$"
work=$(mktemp -d /tmp/hcn-bench.XXXXXX)
trap '"$here/netns.sh" down; rm -rf "$work"' EXIT
"$here/netns.sh" up 2 || exit 1

hc_run() { # prog args...
    local port=$((20000 + RANDOM % 12000)) r pids=()
    for r in 0 1; do
        env HCOMM_RANK=$r HCOMM_SIZE=2 HCOMM_LOCAL_RANK=0 HCOMM_LOCAL_SIZE=1 \
            HCOMM_BOOTSTRAP="tcp://10.77.0.1:$port" HCOMM_JOB_KEY=bench HCOMM_LOG=error \
            "$here/netns.sh" run $r "$@" >"$work/hc$r.log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    cat "$work/hc0.log"
}
median() { sort -n | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "nan"}'; }

gl_run() { # BYTES ITERS: gloo's output (rank 0)
    local port=$((20000 + RANDOM % 12000)) r pids=()
    for r in 0 1; do
        env RANK=$r WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=$port GLOO_SOCKET_IFNAME=eth0 \
            "$here/netns.sh" run $r /usr/bin/python3 "$here/gloo_ref.py" "$1" "$2" \
            >"$work/gl$r.log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    cat "$work/gl0.log"
}

ompi_run() {
    mpicc -O2 "$here/mpi_ref.c" -o "$work/mpi_ref" || return 1
    "$here/netns.sh" rsh-agent "$work/agent.sh"
    "$here/netns.sh" run 0 mpirun --allow-run-as-root -np 2 \
        --host 10.77.0.1,10.77.0.2 --mca plm_rsh_agent "$work/agent.sh" \
        --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
        --mca pml ob1 "$work/mpi_ref" 2>&1 | grep -v "^$"
}

have_ompi=0 have_gloo=0
command -v mpicc >/dev/null && command -v mpirun >/dev/null && have_ompi=1
/usr/bin/python3 -c 'import torch' 2>/dev/null && have_gloo=1

echo "== hcomm tcp, 2 namespaces, 1 rank each"
hc_run "$build/bin/pingpong" -b 8 -e 8
hc_bw=() gl_bw=()
for ((i = 1; i <= rounds; i++)); do
    echo "== round $i of $rounds: hcomm allreduce_bw 32 MiB"
    hc_run "$build/bin/allreduce_bw" -b 32M -e 32M | tee "$work/hc_round" | grep -E "^ +33554432"
    hc_bw+=("$(awk '$1 == 33554432 {print $8}' "$work/hc_round")")
    if ((have_gloo)); then
        echo "== round $i of $rounds: gloo (torch.distributed $(/usr/bin/python3 -c 'import torch;print(torch.__version__)')) 32 MiB"
        gl_run $((32 << 20)) 20 | tee "$work/gl_round" | grep -E "^ +33554432"
        gl_bw+=("$(awk '$1 == 33554432 {print $7}' "$work/gl_round")")
    fi
    if ((i == 1)); then
        if ((have_ompi)); then
            echo "== Open MPI $(mpirun --version | head -1 | awk '{print $NF}') (btl tcp,self)"
            ompi_run | tee "$work/ompi"
        else
            echo "Open MPI not installed: no reference"
        fi
    fi
done
((have_gloo)) || echo "torch not installed: no gloo reference (apt-get install python3-torch)"

echo "== summary, 32 MiB allreduce busbw (GB/s)"
hc_med=$(printf '%s\n' "${hc_bw[@]}" | median)
echo "hcomm  median $hc_med  (rounds: ${hc_bw[*]})"
if ((have_gloo)); then
    gl_med=$(printf '%s\n' "${gl_bw[@]}" | median)
    echo "gloo   median $gl_med  (rounds: ${gl_bw[*]})"
    echo "ratio hcomm/gloo $(echo "scale=3; $hc_med / $gl_med" | bc)"
fi
if ((have_ompi)); then
    om=$(sed -n 's/.*busbw \([0-9.]*\) GB.*/\1/p' "$work/ompi")
    [ -n "$om" ] && echo "ratio hcomm/ompi $(echo "scale=3; $hc_med / $om" | bc)  (Open MPI $om, one run)"
fi
