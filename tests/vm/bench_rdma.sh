#!/bin/bash
# bench_rdma.sh BUILD_DIR [ROUNDS]: hcomm over the verbs driver against
# perftest and UCX on one soft-RoCE device (rxe0 in a tests/vm/vm-run.sh
# guest, tests/vm/rxe-run.sh), all at 1+1 through the device's loopback, in
# ONE guest. ROUNDS (default 3) interleaved rounds of:
#
#   ib_write_lat 8 B           perftest's typical (median) one-way latency
#   hcomm pingpong 8 B         p50 one-way latency (half the round trip)
#   verbs_write_lat 8 B        a bare ibverbs loop (tests/drv/verbs_write_lat.c,
#                              no library): p50 one-way, in perftest's frame
#                              layout and in the one hcomm's driver sends for
#                              8 bytes (56-byte slot images into a ring of 64
#                              8 KiB slots, 1 WRITE in 16 signaled): what the
#                              layout costs, and what is left to hcomm's code
#   ucx_perftest tag_lat 8 B   UCX_TLS=rc_verbs,self, typical (median)
#                              latency; where the tag API does not run over
#                              rc_verbs alone (UCX 1.13 on rxe: "Destination
#                              is unreachable", no wireup transport) a note,
#                              and the transport layer's am_lat on rc_verbs
#                              instead (ucx_perftest -t am_lat -x rc_verbs)
#   ib_write_bw / ib_read_bw 4 MiB  perftest's average bandwidth (streaming:
#                              many messages in flight)
#   hcomm pingpong -M bw 4 MiB osu_bw's method (a window of 16 isends
#                              against 16 irecvs): streaming, as perftest's
#   ib_read_lat / ib_write_lat 4 MiB  bytes / perftest's typical time of one
#                              READ (one-way time of one WRITE): one
#                              message in flight
#   hcomm pingpong 4 MiB       bytes / one-way time (ping-pong: one message
#                              in flight, each a rendezvous: RTS, the
#                              receiver's RDMA READs, FIN)
#
# then a table of every round, the medians and the best rounds (emulation
# is noisy: a round's latency is ~30 us or a 4 ms scheduler tick when the
# guest's two CPUs are contended), and the ratios hcomm/perftest
# (latency: hcomm / ib_write_lat, lower is better; bandwidth: hcomm /
# ib_write_bw and hcomm / ib_read_bw, higher is better; streaming against
# streaming, one in flight against one in flight, and the old mixed pair,
# one hcomm message in flight against perftest's stream). Bandwidths are in
# MB/s of 10^6 bytes (perftest's MB/sec, 2^20 bytes, converted). Everything
# is emulated (qemu TCG and a software RoCE device): the ratios mean
# something, the absolute numbers little.
#
# Every tool's two processes (perftest's and UCX's server and client,
# hcomm's ranks 0 and 1) run pinned to guest CPUs 0 and 1
# (HCOMM_VM_PIN=split, the default) or where the guest's scheduler puts
# them (HCOMM_VM_PIN=none). Unpinned, each run of each tool lands in one of
# two modes (about 9-11 us and 13-16 us one-way on the host of 2026-12-03),
# independently of the others, and a ratio of medians then measures how
# many rounds fell in which mode (1.17 and 1.60 in two runs of one build,
# minutes apart). The bare loop forks its peer and stays unpinned. The
# latency ratio is also given as the median of each round's own ratio
# (the two tools measured seconds apart).
#
# HCOMM_VM_NET=tcp runs the hcomm side over tcp instead (the script proven
# without the verbs driver). Not a ctest test of the default suite.
# Exit 0, 1 when a measurement failed, 77 when there is no guest or rxe.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" != --guest ]; then
    build=$(cd "${1:?build dir}" && pwd) || exit 1
    exec bash "$here/vm-run.sh" --timeout "${HCOMM_VM_TIMEOUT:-900}" -- \
        bash "$here/rxe-run.sh" bash "$here/bench_rdma.sh" --guest "$build" "${2:-3}"
fi
build=${2:?build dir}
rounds=${3:-3}
case_=bench_rdma
# shellcheck source=tests/vm/rdma_lib.sh
. "$here/rdma_lib.sh"
gid=${HCOMM_VM_RXE_GID:-1}
dev=${HCOMM_IB_HCA:-rxe0}
LAT_N=${HCOMM_VM_LAT_ITERS:-1000}
BW_N=${HCOMM_VM_BW_ITERS:-25}        # perftest's 4 MiB iterations
HC_BW_N=${HCOMM_VM_HC_BW_ITERS:-10}  # hcomm pingpong's (each a round trip)
HC_BWS_N=${HCOMM_VM_HC_BWS_ITERS:-3} # hcomm pingpong -M bw's windows of 16
LAT4_N=${HCOMM_VM_LAT4_ITERS:-10}    # ib_read_lat / ib_write_lat 4 MiB iterations
BIG=4194304
# Pinning: the server (rank 0) on CPU 0, the client (rank 1) on CPU 1.
pin_s=() pin_c=()
if [ "${HCOMM_VM_PIN:-split}" = split ]; then
    pin_s=(taskset -c 0)
    pin_c=(taskset -c $(($(nproc) > 1 ? 1 : 0)))
fi

# server_client LOG PROG ARGS...: PROG ARGS as server, then as client of
# 127.0.0.1 (retried while the server is not listening yet); the client's
# output goes to LOG. Status: the client's.
server_client() {
    local log=$1 spid rc=1
    shift
    t 120 ${pin_s[@]+"${pin_s[@]}"} "$@" >"$log.srv" 2>&1 &
    spid=$!
    for _ in 1 2 3 4 5; do
        sleep 1
        t 120 ${pin_c[@]+"${pin_c[@]}"} "$@" 127.0.0.1 >"$log" 2>&1 && { rc=0; break; }
        # retry only while the server is not listening yet
        grep -qi "refused\|couldn't connect" "$log" && kill -0 "$spid" 2>/dev/null || break
    done
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    return $rc
}

port=$((20000 + RANDOM % 12000))
perf() { # LOG PROG ARGS...: a perftest on rxe0 (own port each run)
    local log=$1 prog=$2
    shift 2
    port=$((port + 1))
    server_client "$log" "$prog" -d "$dev" -x "$gid" -p "$port" -F "$@"
}

hc_pingpong() { # BYTES ITERS COLUMN [ARGS]: that column of rank 0's pingpong row
    local b=$1 n=$2 c=$3
    shift 3
    if [ ${#pin_s[@]} -gt 0 ]; then # rank r on the CPU of pin_s (0) or pin_c (1)
        launch 2 1 /bin/bash -c 'exec taskset -c "$([ "$HCOMM_RANK" = 0 ] && echo "$1" || echo "$2")" "$0" "${@:3}"' \
            "$(bin pingpong)" "${pin_s[2]}" "${pin_c[2]}" -b "$b" -e "$b" -n "$n" -w $((n / 10 + 1)) "$@"
    else
        launch 2 1 "$(bin pingpong)" -b "$b" -e "$b" -n "$n" -w $((n / 10 + 1)) "$@"
    fi
    wait_all 200
    awk -v s="$b" -v c="$c" '$1 == s {print $c}' "$work/r0.log" >"$work/col"
    [ -s "$work/col" ] || fail "hcomm pingpong $b B $* printed no result"
}

# perf_add METRIC AWK PROG ARGS...: a perftest run, its value (AWK over the
# client's output, -v s=BIG) added for this round, or a note that it failed
BW_AWK='$1 == s && NF >= 4 {printf "%.1f", $4 * 1.048576}'
LAT4_AWK='$1 == s && NF >= 5 && $5 > 0 {printf "%.1f", s / $5}'
perf_add() {
    local metric=$1 prog_awk=$2 prog=$3
    shift 3
    if perf "$work/$metric" "$prog" "$@"; then
        add "$metric" "$k" "$(awk -v s=$BIG "$prog_awk" "$work/$metric")"
    else
        note+=("round $k: $prog $* failed: $(tail -3 "$work/$metric" | tr '\n' ' ')")
    fi
}

# bare_lat METRIC ARGS: verbs_write_lat's p50 one-way (us) for this round
bare_lat() {
    local metric=$1
    shift
    if t 120 "$(bin verbs_write_lat)" -d "$dev" -g "$gid" -n "$LAT_N" "$@" >"$work/bare" 2>&1; then
        add "$metric" "$k" "$(sed -n 's/.*one-way p50 \([0-9.]*\) us.*/\1/p' "$work/bare")"
    else
        note+=("round $k: verbs_write_lat $* failed: $(tail -2 "$work/bare" | tr '\n' ' ')")
    fi
}

declare -A val
note=()
ucx_mode=tag
add() { val[$1,$2]=$3; } # METRIC ROUND VALUE

for ((k = 1; k <= rounds; k++)); do
    step "round $k of $rounds"
    if perf "$work/wl" ib_write_lat -s 8 -n "$LAT_N"; then
        add wlat $k "$(awk '$1 == 8 && NF >= 5 {print $5}' "$work/wl")"
    else
        note+=("round $k: ib_write_lat failed: $(tail -3 "$work/wl" | tr '\n' ' ')")
    fi
    hc_pingpong 8 "$LAT_N" 3
    add hlat $k "$(cat "$work/col")"
    bare_lat blat1 -s 8 -S 8 -k 1 -e 1
    bare_lat blath -s 56 -S 8192 -k 64 -e 16
    # UCX: the tag API (ucp) over rc_verbs if it runs, else the transport
    # layer's active-message ping-pong on rc_verbs (uct am_lat)
    if [ "$ucx_mode" = tag ]; then
        port=$((port + 1))
        if UCX_TLS=rc_verbs,self UCX_NET_DEVICES="$dev:1" server_client "$work/ucx" \
            ucx_perftest -p "$port" -t tag_lat -s 8 -n "$LAT_N"; then
            add ulat $k "$(awk '/Final:/ {print $3}' "$work/ucx")"
        else
            note+=("ucx_perftest -t tag_lat with UCX_TLS=rc_verbs,self did not run ($(grep -o "UCX  ERROR.*" "$work/ucx" | tail -1)): the UCX row is uct am_lat -x rc_verbs instead")
            ucx_mode=am
        fi
    fi
    if [ "$ucx_mode" = am ]; then
        port=$((port + 1))
        if UCX_NET_DEVICES="$dev:1" server_client "$work/ucx" \
            ucx_perftest -p "$port" -t am_lat -x rc_verbs -d "$dev:1" -s 8 -n "$LAT_N"; then
            add ulat $k "$(awk '/Final:/ {print $3}' "$work/ucx")"
        else
            note+=("round $k: ucx_perftest -t am_lat -x rc_verbs did not run: $(grep -v '^ *$' "$work/ucx" | tail -2 | tr '\n' ' ')")
        fi
    fi
    perf_add wbw "$BW_AWK" ib_write_bw -s "$BIG" -n "$BW_N"
    perf_add rbw "$BW_AWK" ib_read_bw -s "$BIG" -n "$BW_N"
    hc_pingpong $BIG "$HC_BW_N" 5
    add hbw $k "$(cat "$work/col")"
    hc_pingpong $BIG "$HC_BWS_N" 5 -M bw -W 16
    add hbws $k "$(cat "$work/col")"
    # one message in flight: bytes / perftest's typical time of one
    perf_add rlat4 "$LAT4_AWK" ib_read_lat -s "$BIG" -n "$LAT4_N"
    perf_add wlat4 "$LAT4_AWK" ib_write_lat -s "$BIG" -n "$LAT4_N"
done

median() { sort -g | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "-"}'; }
vals() { # METRIC: the rounds' values, one a line
    local k
    for ((k = 1; k <= rounds; k++)); do
        [ -n "${val[$1,$k]:-}" ] && echo "${val[$1,$k]}"
    done
}
med() { vals "$1" | median; }
# best: the lowest latency, the highest bandwidth (bw, bws and the 4 MiB lat4 rows)
best() {
    case $1 in
    *bw | *bws | *lat4) vals "$1" | sort -g | tail -1 | grep . || echo - ;;
    *) vals "$1" | sort -g | head -1 | grep . || echo - ;;
    esac
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b}'; }

echo
echo "# soft-RoCE ($dev, qemu TCG) at 1+1, $rounds rounds; hcomm over HCOMM_NET=$NET"
printf "%-40s" "metric"
for ((k = 1; k <= rounds; k++)); do printf "%10s" "round$k"; done
printf "%10s%10s\n" median best
row() { # METRIC LABEL
    local k
    printf "%-40s" "$2"
    for ((k = 1; k <= rounds; k++)); do printf "%10s" "${val[$1,$k]:--}"; done
    printf "%10s%10s\n" "$(med "$1")" "$(best "$1")"
}
row wlat "ib_write_lat 8 B (us, typical)"
row hlat "hcomm pingpong 8 B (us, p50)"
row blat1 "bare verbs loop 8 B, perftest layout"
row blath "bare verbs loop 8 B, hcomm layout"
row ulat "ucx ${ucx_mode}_lat rc_verbs 8 B (us)"
row wbw "ib_write_bw 4 MiB (MB/s)"
row rbw "ib_read_bw 4 MiB (MB/s)"
row hbws "hcomm pingpong -M bw 4 MiB (MB/s)"
row rlat4 "ib_read_lat 4 MiB (MB/s, 1 in flight)"
row wlat4 "ib_write_lat 4 MiB (MB/s, 1 in flight)"
row hbw "hcomm pingpong 4 MiB (MB/s, 1 in flight)"
echo
printf "%-40s%10s%10s\n" "ratio (lat: lower is better)" median best
ratios() { # LABEL A B
    printf "%-40s%10s%10s\n" "$1" "$(ratio "$(med "$2")" "$(med "$3")")" "$(ratio "$(best "$2")" "$(best "$3")")"
}
ratios "latency   hcomm / ib_write_lat" hlat wlat
round_ratio() { # A B: the median of each round's A / B
    local k
    for ((k = 1; k <= rounds; k++)); do
        [ -n "${val[$1,$k]:-}" ] && [ -n "${val[$2,$k]:-}" ] &&
            echo "$(ratio "${val[$1,$k]}" "${val[$2,$k]}")"
    done | grep -v -- - | median
}
printf "%-40s%10s%10s\n" "latency   hcomm / ib_write_lat, per round" "$(round_ratio hlat wlat)" ""
echo "(pinning: HCOMM_VM_PIN=${HCOMM_VM_PIN:-split}${pin_s[*]:+: servers and rank 0 on CPU ${pin_s[2]}, clients and rank 1 on CPU ${pin_c[2]}})"
ratios "latency   hcomm / ucx ${ucx_mode}_lat" hlat ulat
ratios "latency   bare loop / ib_write_lat" blat1 wlat
ratios "latency   bare, hcomm layout / ib_write_lat" blath wlat
ratios "latency   hcomm / bare, hcomm layout" hlat blath
ratios "streaming hcomm bw / ib_read_bw" hbws rbw
ratios "streaming hcomm bw / ib_write_bw" hbws wbw
ratios "1 in flight hcomm / ib_read_lat" hbw rlat4
ratios "1 in flight hcomm / ib_write_lat" hbw wlat4
ratios "mixed hcomm (1) / ib_read_bw (stream)" hbw rbw
ratios "mixed hcomm (1) / ib_write_bw (stream)" hbw wbw
for n in "${note[@]}"; do echo "note: $n"; done
[ "$(med hlat)" != - ] && [ "$(med hbw)" != - ] || fail "no hcomm measurement"
exit 0
