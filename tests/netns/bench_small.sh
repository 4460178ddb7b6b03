#!/bin/bash
# bench_small.sh BUILD_DIR [ROUNDS]: small-allreduce latency across network
# namespace "nodes", hcomm against torch.distributed gloo on the same
# placement: 1+1 and 2+2 ranks (block placement: shm inside a node, tcp
# between), float sum of 8 B and 4 KiB. Rounds (default 3) interleave hcomm
# and gloo so that both see the same machine; the medians, the 2+2/1+1
# ratio and hcomm/gloo close the output.
set -u
build=${1:?build dir}
rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "skipped: needs root"; exit 77; }
export HCN_JOB="s$$"
work=$(mktemp -d /tmp/hcn-small.XXXXXX)
trap '"$here/netns.sh" down; rm -rf "$work"' EXIT
"$here/netns.sh" up 2 || exit 1
have_gloo=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && have_gloo=1

launch() { # PPN kind args...: 2 nodes x PPN ranks; rank 0's output
    local ppn=$1 kind=$2 port=$((20000 + RANDOM % 12000)) r pids=()
    shift 2
    for ((r = 0; r < 2 * ppn; r++)); do
        if [ "$kind" = hc ]; then
            env HCOMM_RANK=$r HCOMM_SIZE=$((2 * ppn)) HCOMM_LOCAL_RANK=$((r % ppn)) \
                HCOMM_LOCAL_SIZE=$ppn HCOMM_BOOTSTRAP="tcp://10.77.0.1:$port" \
                HCOMM_JOB_KEY=small HCOMM_LOG=error \
                "$here/netns.sh" run $((r / ppn)) "$@" >"$work/o$r.log" 2>&1 &
        else
            env RANK=$r WORLD_SIZE=$((2 * ppn)) MASTER_ADDR=10.77.0.1 MASTER_PORT=$port \
                GLOO_SOCKET_IFNAME=eth0 \
                "$here/netns.sh" run $((r / ppn)) /usr/bin/python3 "$here/gloo_ref.py" "$@" \
                >"$work/o$r.log" 2>&1 &
        fi
        pids+=($!)
    done
    wait "${pids[@]}"
    cat "$work/o0.log"
}
median() { sort -n | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "nan"}'; }

declare -A res
for ((i = 1; i <= rounds; i++)); do
    for ppn in 1 2; do
        echo "== round $i: hcomm 2 nodes x $ppn"
        launch $ppn hc "$build/bin/allreduce_bw" -b 8 -e 4K -f 512 -n 2000 | tee "$work/hc" | grep -E "^ +(8|4096) "
        for b in 8 4096; do
            res[hc,$ppn,$b]+="$(awk -v b=$b '$1 == b {print $6}' "$work/hc") "
        done
        ((have_gloo)) || continue
        for b in 8 4096; do
            echo "== round $i: gloo 2 nodes x $ppn, $b B"
            launch $ppn gl $b 2000 | tee "$work/gl" | grep -E "^ +$b "
            res[gl,$ppn,$b]+="$(awk -v b=$b '$1 == b {print $5}' "$work/gl") "
        done
    done
done
((have_gloo)) || echo "torch not installed: no gloo reference (apt-get install python3-torch)"

echo "== summary: allreduce time (us), medians of $rounds rounds"
printf "%-8s %8s %8s %8s %8s %10s %12s\n" size hc_1+1 hc_2+2 gl_1+1 gl_2+2 hc_2+2/1+1 hc/gloo_2+2
for b in 8 4096; do
    h1=$(echo ${res[hc,1,$b]} | tr ' ' '\n' | median)
    h2=$(echo ${res[hc,2,$b]} | tr ' ' '\n' | median)
    g1=nan g2=nan r=nan
    if ((have_gloo)); then
        g1=$(echo ${res[gl,1,$b]} | tr ' ' '\n' | median)
        g2=$(echo ${res[gl,2,$b]} | tr ' ' '\n' | median)
        r=$(echo "scale=3; $h2 / $g2" | bc)
    fi
    printf "%-8s %8s %8s %8s %8s %10s %12s\n" $b $h1 $h2 $g1 $g2 "$(echo "scale=2; $h2 / $h1" | bc)" $r
done
