#!/bin/bash
# netns.sh: "nodes" on one host as network namespaces joined by a bridge.
#
#   HCN_JOB=<id> netns.sh up N        namespaces hcn-<id>-0..N-1, each with
#                                     eth0 = 10.77.0.<i+1>/24, veths to a
#                                     bridge in namespace hcn-<id>-br
#                                     (HCN_MTU=M: every link at MTU M)
#   HCN_JOB=<id> netns.sh down        deletes every hcn-<id>-* namespace
#   HCN_JOB=<id> netns.sh run I cmd   runs cmd in node I (exec: same pid)
#
# Everything lives inside the new namespaces: no interface, address or route
# is added to the namespace the script runs in, and the nodes have only the
# on-link 10.77.0.0/24 route (no default route, nothing reaches out). `up`
# tears down what it built if any step fails. Needs root and iproute2.
set -u
job=${HCN_JOB:?set HCN_JOB to a short job id}
pfx="hcn-$job"

down() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${pfx}-(br|[0-9]+)$"); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
    return 0
}

up() {
    local n=$1 i
    if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 1 || n > 200)); then
        echo "netns.sh: up N needs 1 <= N <= 200 (got '$n')" >&2
        return 2
    fi
    trap 'echo "netns.sh: setup failed, tearing down" >&2; down; trap - ERR; return 1' ERR
    set -E
    ip netns add "$pfx-br"
    ip -n "$pfx-br" link set lo up
    ip -n "$pfx-br" link add br0 type bridge
    ip -n "$pfx-br" link set br0 up
    for ((i = 0; i < n; i++)); do
        ip netns add "$pfx-$i"
        ip -n "$pfx-$i" link set lo up
        ip -n "$pfx-br" link add "h$i" type veth peer name eth0 netns "$pfx-$i"
        ip -n "$pfx-br" link set "h$i" master br0 up
        ip -n "$pfx-$i" addr add "10.77.0.$((i + 1))/24" dev eth0
        ip -n "$pfx-$i" link set eth0 up
        if [ -n "${HCN_MTU:-}" ]; then
            ip -n "$pfx-br" link set "h$i" mtu "$HCN_MTU"
            ip -n "$pfx-$i" link set eth0 mtu "$HCN_MTU"
        fi
    done
    [ -z "${HCN_MTU:-}" ] || ip -n "$pfx-br" link set br0 mtu "$HCN_MTU"
    trap - ERR
    set +E
    return 0
}

case "${1:-}" in
up) up "${2:-}" ;;
down) down ;;
run)
    node=${2:?run needs a node index}
    shift 2
    exec ip netns exec "$pfx-$node" "$@"
    ;;
rsh-agent)
    # rsh-agent FILE: writes an rsh agent for mpirun (--mca plm_rsh_agent
    # FILE): "FILE HOST cmd..." runs cmd in the namespace that owns HOST,
    # in a UTS namespace of its own named hcn-nodeI: MPI libraries tell
    # nodes apart by host name, and the network namespaces share this one's.
    cat >"${2:?rsh-agent needs a file}" <<AGENT
#!/bin/bash
host=\$1; shift
i=\$(( \${host##*.} - 1 ))
exec ip netns exec $pfx-\$i unshare --uts /bin/sh -c "hostname hcn-node\$i && \$*"
AGENT
    chmod +x "$2"
    ;;
*)
    echo "usage: HCN_JOB=id $0 up N | down | run NODE cmd... | rsh-agent FILE" >&2
    exit 2
    ;;
esac
