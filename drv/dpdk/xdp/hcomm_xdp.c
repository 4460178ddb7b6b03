/*
 * The XDP program hcomm loads on an interface that net_af_xdp drives
 * (drv/dpdk, docs/dpdk.md): hcomm's own packets (IPv4 + UDP + a dpdk driver
 * header: magic "HC", any version: the driver itself refuses a version
 * it does not speak, naming it, rather than the kernel dropping it unseen)
 * go to the AF_XDP socket of the receive queue; everything else (the bootstrap's TCP, ARP, ssh) goes on to the
 * kernel. DPDK's default program redirects every packet of the queue, which
 * cut the job's own bootstrap connection on the same interface.
 *
 * Built with clang -target bpf; no libbpf headers: the two definitions it
 * needs (the map and the helper) are written out here. DPDK's net_af_xdp
 * loads it (vdev argument xdp_prog=) and puts its socket into xsks_map.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>

#define SEC(name) __attribute__((section(name), used))

/* The map DPDK fills: receive queue index -> AF_XDP socket. */
struct {
    int (*type)[BPF_MAP_TYPE_XSKMAP];
    int (*max_entries)[64];
    __u32 *key;
    __u32 *value;
} xsks_map SEC(".maps");

static long (*const bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)BPF_FUNC_redirect_map;

SEC("xdp")
int hcomm_xdp(struct xdp_md *ctx)
{
    const unsigned char *data = (const unsigned char *)(long)ctx->data;
    const unsigned char *end = (const unsigned char *)(long)ctx->data_end;
    const struct ethhdr *eth = (const struct ethhdr *)data;
    const struct iphdr *ip = (const struct iphdr *)(eth + 1);
    const struct udphdr *udp = (const struct udphdr *)(ip + 1);
    const unsigned char *hc = (const unsigned char *)(udp + 1);
    if (hc + 2 > end) return XDP_PASS;
    /* The dpdk driver sends IPv4 without options (ihl 5). */
    if (eth->h_proto != __builtin_bswap16(ETH_P_IP) || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
        return XDP_PASS;
    if (hc[0] != 0x43 || hc[1] != 0x48) return XDP_PASS; /* magic 0x4843, little-endian */
    return (int)bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
