/*
 * shm: ranks of one node talk through one shared segment. Internal header
 * shared by
 *   shm_setup.c  the knobs, probe, open, connect, close and the ops table;
 *   shm_seg.c    the node segment: its layout, the leader handing its memfd
 *                to the other local ranks, and the arena of keyed blocks
 *                (shared_get/shared_put);
 *   shm_data.c   the FIFOs: put and progress (the data path);
 *   shm_rma.c    single-copy get/write through CMA (process_vm_readv and
 *                process_vm_writev) and the remote keys (peers' memfds
 *                mapped in place).
 *
 * The segment holds:
 *
 *   header | directory of keyed arena blocks | FIFO[i][j] for every ordered
 *   pair of local ranks | arena
 */
#ifndef HC_DRV_SHM_H
#define HC_DRV_SHM_H

#include "base/hc_base.h"
#include "drv/drv.h"
#include "mem/mem.h"

#include <sys/types.h>

#define HC_SHM_MAGIC 0x68636f6d73686d31ull /* "hcomshm1" */
#define HC_SHM_DIR_ENTRIES 256
#define HC_SHM_SLOT_HDR 40 /* seq (8) + frame header (32) */

/* A directory entry: key 0 = never used, HC_SHM_KEY_FREE = a released block
 * (off/size kept for reuse), anything else = live until `refs` more puts. */
typedef struct {
    uint64_t key;
    uint64_t off; /* from the segment base */
    uint64_t size;
    uint32_t refs;
    uint32_t pad;
} hc_shm_dir_t;
#define HC_SHM_KEY_FREE 1ull

typedef struct {
    uint64_t magic;
    uint32_t local_size, nslots;
    uint64_t slot_size;
    uint64_t fifo_off, fifo_stride;
    uint64_t arena_off, arena_size;
    uint64_t arena_used HC_ALIGNED_CL;
    uint32_t arena_lock; /* held only while the directory changes */
    hc_shm_dir_t dir[HC_SHM_DIR_ENTRIES];
} hc_shm_seg_t;

typedef struct {
    uint64_t tail HC_ALIGNED_CL; /* frames consumed by the receiver */
    uint8_t pad[HC_CACHE_LINE - sizeof(uint64_t)];
    uint8_t slots[] HC_ALIGNED_CL;
} hc_shm_fifo_t;

typedef struct {
    uint64_t seq;
    hc_frame_hdr_t hdr;
    uint8_t payload[];
} hc_shm_slot_t;
_Static_assert(sizeof(hc_shm_slot_t) == HC_SHM_SLOT_HDR, "slot header layout");

/* Frames whose two 64-bit words are zero (every EAGER and CONT frame that is
 * not a fragmented message's first) travel compact: only the first 16 bytes
 * of the header, payload at offset 24, so that up to 40 bytes of payload
 * share the seq flag's cache line. hdr.reserved marks it (the core always
 * sends 0 there). */
#define HC_SHM_COMPACT 0x1u
#define HC_SHM_COMPACT_HDR 16
_Static_assert(offsetof(hc_frame_hdr_t, a) == HC_SHM_COMPACT_HDR, "compact header prefix");

typedef struct {
    uint32_t pid;
    uint32_t local_rank;
    uint64_t canary_addr;
    uint64_t canary;
} hc_shm_addr_t;

typedef struct {
    hc_conn_t base;
    hc_shm_fifo_t *out; /* my slots in the peer's receive FIFO */
    hc_shm_fifo_t *in;  /* the peer's frames to me */
    uint64_t head;      /* frames I sent */
    uint64_t tail_cache;
    uint64_t in_tail; /* frames I consumed */
    pid_t pid;
    bool connected;
} hc_shm_conn_t;

typedef struct {
    hc_drv_t base;
    hc_mem_region_t *seg_region;
    hc_shm_seg_t *seg;
    int lr, L;
    uint32_t nslots;
    size_t slot_size;
    hc_shm_conn_t *conns; /* by local rank */
    int *active;          /* local ranks with a connection */
    int nactive;
    uint64_t canary;
    struct hc_shm_map *maps; /* peers' memfds mapped here (remote keys) */
    int nmaps;
    struct hc_shm_import *imports; /* peers' device allocations imported here (shm_ipc.c) */
    int nimports;
} hc_drv_shm_t;

/* This driver's knobs (shm_setup.c). */
typedef struct {
    int64_t slots; /* 0: auto (hc_shm_auto_slots) */
    size_t slot_size;
    size_t recv_max;
    bool cma;
} hc_shm_cfg_t;
extern hc_shm_cfg_t hc_shm_cfg;

/* Receive slots per connection when HCOMM_SHM_SLOTS=0 (auto): 64, halved
 * down to 4 while one rank's slots from its local_size - 1 peers would take
 * more than recv_max bytes. The node segment holds local_size^2 FIFOs, all
 * touched at creation: 64 slots of 8 KiB at 256 ranks would be 32 GiB. */
uint32_t hc_shm_auto_slots(int local_size, size_t slot_size, size_t recv_max);

#define HC_SHM_MAPS 64 /* peers' memfds mapped at once (remote keys) */

/* A peer's memfd mapped here (remote keys, shm_rma.c). */
typedef struct hc_shm_map {
    pid_t pid;
    uint64_t ino, size;
    uint8_t *base;
    int refs;
    uint64_t used; /* LRU stamp */
} hc_shm_map_t;

/* A peer's device allocation imported by IPC (shm_ipc.c): ptr is where the
 * owner's owner_addr (its registered address, len bytes) is mapped here. */
#define HC_SHM_IMPORTS 64
typedef struct hc_shm_import {
    pid_t pid;
    uint64_t alloc_id;
    void *ptr;
    uint64_t owner_addr, len;
    int refs;
    uint64_t used; /* LRU stamp */
} hc_shm_import_t;

/* A remote key: a peer's memfd mapped here (map), a peer's device
 * allocation imported here (imp), or neither (CMA by address). */
struct hc_rkey {
    hc_shm_map_t *map;
    hc_shm_import_t *imp;
    uint64_t off, addr;
};

/* ---- device memory by IPC (shm_ipc.c) ---- */
typedef struct hc_shm_ipc_export hc_shm_ipc_export_t;
/* mem_reg / mem_dereg: device memory is exported (the key is the export
 * record); host memory needs no key (CMA). */
hcomm_status_t hc_drv_shm_mem_reg(hc_drv_t *drv, const hc_mem_desc_t *desc, uint64_t *key_p);
void hc_drv_shm_mem_dereg(hc_drv_t *drv, uint64_t key);
hcomm_status_t hc_shm_ipc_key_pack(const hc_shm_ipc_export_t *e, void *buf, size_t *len_p);
bool hc_shm_ipc_key_is(const void *buf, size_t len);
/* Imports the allocation a peer's IPC key names (cached) into k->imp. */
hcomm_status_t hc_shm_ipc_key_unpack(hc_shm_conn_t *c, const void *buf, hc_rkey_t *k);
/* get / write where device memory is on either side: device copies through
 * the GPU dispatch (a mapped peer allocation), or a host bounce buffer (a
 * device buffer here against host memory there, which CMA reaches). */
hcomm_status_t hc_shm_ipc_rma(hc_shm_conn_t *c, const hc_rma_t *rma, bool write);
void hc_shm_ipc_close_all(hc_drv_shm_t *s);
/* rkey_ptr of an imported device key: where [remote_addr, + len) is mapped
 * here (device memory: for the GPU dispatch only, never the CPU). */
hcomm_status_t hc_shm_ipc_ptr(hc_conn_t *conn, const hc_rkey_t *rkey, uint64_t remote_addr,
                              size_t len, void **ptr_p);
/* process_vm_readv (get) / process_vm_writev (write) of the peer's memory. */
hcomm_status_t hc_shm_cma(hc_conn_t *conn, void *local, uint64_t raddr, size_t len, bool write);

/* FNV-1a over a, a separator and b: the node socket's name and the canary. */
static inline uint64_t hc_shm_hash(const char *a, const char *b)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *s = a; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
    for (const char *s = b; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* The FIFO that carries local rank from's frames to local rank to. */
static inline hc_shm_fifo_t *hc_shm_fifo(hc_drv_shm_t *s, int from, int to)
{
    return (hc_shm_fifo_t *)((uint8_t *)s->seg + s->seg->fifo_off +
                             ((uint64_t)from * (uint64_t)s->L + (uint64_t)to) *
                                 s->seg->fifo_stride);
}

/* shm_seg.c */
hcomm_status_t hc_drv_shm_wireup(hc_drv_t *drv, const void *const *addrs, const size_t *lens);
void *hc_drv_shm_shared_get(hc_drv_t *drv, uint64_t key, size_t size, int users);
void hc_drv_shm_shared_put(hc_drv_t *drv, uint64_t key);

/* shm_data.c */
hcomm_status_t hc_drv_shm_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
                              void *cookie);
int hc_drv_shm_progress(hc_drv_t *drv);

/* shm_rma.c */
/* Sets c's CAP_GET and CAP_WRITE when CMA reaches the peer: it reads the
 * canary a published at its address and writes it back. */
void hc_shm_cma_probe(hc_shm_conn_t *c, const hc_shm_addr_t *a);
hcomm_status_t hc_drv_shm_get(hc_conn_t *conn, const hc_rma_t *rma);
hcomm_status_t hc_drv_shm_write(hc_conn_t *conn, const hc_rma_t *rma);
hcomm_status_t hc_drv_shm_rkey_pack(hc_drv_t *drv, uint64_t key, const hc_mem_desc_t *desc,
                                    void *buf, size_t *len_p);
hcomm_status_t hc_drv_shm_rkey_unpack(hc_conn_t *conn, const void *buf, size_t len,
                                      hc_rkey_t **rkey_p);
void hc_drv_shm_rkey_release(hc_conn_t *conn, hc_rkey_t *rkey);
hcomm_status_t hc_drv_shm_rkey_ptr(hc_conn_t *conn, const hc_rkey_t *rkey, uint64_t remote_addr,
                                   size_t len, void **ptr_p);

#endif /* HC_DRV_SHM_H */
