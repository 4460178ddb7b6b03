/*
 * Bootstrap: who am I, how many are we, and the rendezvous that exchanges
 * every rank's address blobs before the transports connect directly.
 *
 * The job is described by the environment: hcommrun's HCOMM_RANK/SIZE/
 * LOCAL_RANK/LOCAL_SIZE/BOOTSTRAP/JOB_KEY, else torchrun's RANK/WORLD_SIZE/
 * LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT, else Open MPI's
 * OMPI_COMM_WORLD_*, else Slurm's SLURM_PROCID/NTASKS/LOCALID; none: one rank.
 *
 * Rendezvous (tcp://HOST:PORT): rank 0 listens there; every other rank
 * connects (retrying until the deadline) and the two prove the job key to
 * each other without sending it (bootstrap_auth.c: HELLO with the rank's
 * nonce, CHALLENGE with rank 0's nonce and its HMAC, PROOF with the rank's
 * HMAC and its blob); rank 0 answers with the table of all blobs. A
 * connection that fails the proof or sends a malformed message is dropped
 * and logged; a member that proved the key but is misconfigured (its size,
 * a duplicate rank, its blob length) is refused with the reason, and the
 * whole job fails at once with it. file:///DIR: rank 0 listens on an
 * ephemeral port and publishes "tcp://host:port" in DIR/hcomm-<tag>.addr
 * (the tag an HMAC of a fixed label under the key), the others read it there.
 * The connections to rank 0 stay open: they carry later allgathers and
 * barriers, and their closing tells rank 0 (and the others, of rank 0) that a
 * rank died.
 */
#ifndef HC_BOOTSTRAP_H
#define HC_BOOTSTRAP_H

#include "base/hc_base.h"

#include <poll.h>

typedef struct {
    int rank, size;
    int local_rank, local_size; /* -1 when the launcher did not say */
    char url[512];              /* "tcp://host:port", "file:///dir" or "" (size 1) */
    char job_key[128];          /* "" when the launcher set none */
    const char *source;         /* "hcommrun", "torchrun", "openmpi", "hydra", "slurm", "single" */
    /* Whoever gave the address could have given a key too (HCOMM_BOOTSTRAP,
     * hcomm_init_rank): a missing key is worth a warning. */
    bool key_expected;
    /* tcp:// only: rank 0 listens on the first free port of [port, port +
     * port_span) and the others look for it there: a port derived from the
     * launcher's ids (Slurm, torchrun) may be another job's or service's.
     * Each rank then knows it reached its own rank 0 when the CHALLENGE that
     * answers its hello proves the job key. 0 or 1: that port only. */
    int port_span;
    /* Where in a rank's blob its node's id lies (bytes [off, off + len); len
     * 0: not given). Given, round 1's table goes by node as the allgather
     * by node does (one rank per node gets it from rank 0, the others
     * read it from that rank's file): ranks with equal ids share /dev/shm. */
    size_t node_key_off, node_key_len;
} hc_bootstrap_params_t;

/* The span of a port hcomm derives from a launcher's ids (Slurm's job and
 * step, torchrun's MASTER_PORT + 1): ports [p, p + 16). */
#define HC_BOOTSTRAP_DERIVED_PORT_SPAN 16

/* Reads the environment. Errors: ERR_INVALID naming the variable (a rank
 * outside [0, size), a size < 1, a malformed URL, a multi-rank job with no
 * rendezvous address). */
hcomm_status_t hc_bootstrap_params_from_env(hc_bootstrap_params_t *p);
/* The same from values the caller gives (hcomm_init_rank), validated the
 * same way; messages name hcomm_init_rank's fields. */
hcomm_status_t hc_bootstrap_params_given(int rank, int size, int local_rank, int local_size,
                                         const char *url, const char *key,
                                         hc_bootstrap_params_t *p);
/* PMI-1 on PMI_FD (mpiexec.hydra): rank 0's address and key published in
 * the launcher's key-value space and read back by every rank into p->url
 * and p->job_key (bootstrap_pmi.c); finalize tells the launcher at the end. */
hcomm_status_t hc_bootstrap_pmi(hc_bootstrap_params_t *p, double timeout);
void hc_bootstrap_pmi_finalize(void);
/* PMIx (bootstrap_pmix.c, when built with libpmix): the same through a
 * PMIx server's key-value store and fence. */
bool hc_bootstrap_pmix_available(void);
hcomm_status_t hc_bootstrap_pmix(hc_bootstrap_params_t *p, double timeout);
void hc_bootstrap_pmix_finalize(void);
/* The first host of a Slurm compressed host list (bootstrap_env.c). */
hcomm_status_t hc_bootstrap_slurm_first_host(const char *list, char *out, size_t len);
/* "tcp://<this host's address>:<free port>" and a random 32-hex key. */
hcomm_status_t hc_bootstrap_address_make(char *url, size_t url_len, char *key, size_t key_len);

typedef struct hc_bootstrap hc_bootstrap_t;

/* Joins the rendezvous and exchanges blobs: on success *table_p holds size
 * blobs of blob_len bytes each, rank order, owned by the bootstrap. All ranks
 * pass the same blob_len. Deadline: timeout_sec. */
hcomm_status_t hc_bootstrap_open(const hc_bootstrap_params_t *p, const void *blob, size_t blob_len,
                                 double timeout_sec, hc_bootstrap_t **bs_p, const void **table_p);

/* What went through this process's bootstrap sockets: messages and bytes
 * (headers included) sent and received by the star's own send and read
 * paths, since the process started (every bootstrap it opened). Failure
 * notices sent best effort and a flood client's drained bytes are not
 * counted. On rank 0 it is the root's load (docs/bootstrap.md). */
typedef struct {
    uint64_t sent_msgs, sent_bytes, recv_msgs, recv_bytes;
} hc_bootstrap_traffic_t;
void hc_bootstrap_traffic(hc_bootstrap_traffic_t *out);

/* Allgather through rank 0 over the bootstrap connections. */
hcomm_status_t hc_bootstrap_allgather(hc_bootstrap_t *bs, const void *in, size_t len, void *out,
                                      double timeout_sec);
/* The allgather above, delivered by node: rank 0 sends the result to the
 * lowest rank of each other node, which (as rank 0 on its own node) puts
 * it in a shared-memory file that the node's other ranks read
 * (bootstrap_node.c): rank 0 sends O(N x nodes) bytes, not O(N^2).
 * node_of_rank[r] is rank r's node (the same map on every rank); len > 0. */
hcomm_status_t hc_bootstrap_allgather_nodes(hc_bootstrap_t *bs, const void *in, size_t len,
                                            void *out, const int *node_of_rank, double timeout_sec);
hcomm_status_t hc_bootstrap_barrier(hc_bootstrap_t *bs, double timeout_sec);
/* While an allgather or barrier waits, fn(arg) runs about every millisecond
 * the connections are quiet (NULL: none): finalize keeps the drivers
 * answering (a peer may still need an acknowledgement from this rank). */
void hc_bootstrap_set_idle(hc_bootstrap_t *bs, void (*fn)(void *arg), void *arg);

/* Failure notices: rank 0 judges who failed and why (it alone sees every
 * rank's connection), ranks report to it what they see themselves, and its
 * verdicts ("rank X failed; the cause is rank C", C != X when X left after
 * C failed) reach every rank still connected. See bootstrap_notice.c. */
typedef void (*hc_bootstrap_notice_fn)(void *arg, int rank, int cause, hcomm_status_t status,
                                       const char *why);
/* fn is called from hc_bootstrap_poll/report_failure/allgather for each
 * verdict; it must only record. */
void hc_bootstrap_set_notice(hc_bootstrap_t *bs, hc_bootstrap_notice_fn fn, void *arg);
/* This rank saw `rank` fail by its own evidence. Rank 0 judges at once and
 * returns the cause; others tell rank 0 without blocking and return the
 * verdict if one came already, else -1. */
int hc_bootstrap_report_failure(hc_bootstrap_t *bs, int rank, hcomm_status_t status,
                                const char *why);
/* The verdict on rank (its cause) or -1; *first_cause_p: the cause of the
 * first verdict, -1 none. */
int hc_bootstrap_verdict(hc_bootstrap_t *bs, int rank, int *first_cause_p);
/* Non-blocking, for the progress engine's slow path: reads notices and
 * relayed blobs and judges closed connections. Returns the number of new
 * verdicts and blobs handed over. */
int hc_bootstrap_poll(hc_bootstrap_t *bs);
/* The sockets hc_bootstrap_poll reads (up to max, POLLIN asked), for a
 * thread that sleeps until one has something (api/api_bs_service.c). */
int hc_bootstrap_poll_fds(const hc_bootstrap_t *bs, struct pollfd *out, int max);

/* Point-to-point through the star, for per-peer handshakes (a driver's
 * endpoint exchange, started lazily for the peers a rank talks to): a blob
 * of at most HC_BOOTSTRAP_MAX_RELAY bytes to rank `to`, tagged with a
 * channel (the driver's index), is forwarded by rank 0 and handed to the
 * relay function on the destination from its hc_bootstrap_poll, in order
 * per (sender, destination). Non-blocking: ERR_AGAIN when the socket is
 * full (retry from progress), ERR_PEER_FAILED when the star is gone. */
typedef void (*hc_bootstrap_relay_fn)(void *arg, int from, uint32_t channel, const void *blob,
                                      size_t len);
void hc_bootstrap_set_relay(hc_bootstrap_t *bs, hc_bootstrap_relay_fn fn, void *arg);
hcomm_status_t hc_bootstrap_relay(hc_bootstrap_t *bs, int to, uint32_t channel, const void *blob,
                                  size_t len);

void hc_bootstrap_close(hc_bootstrap_t *bs);

/* ---- wire format, exposed for the unit tests and the fuzzer ---------------- */
#define HC_BOOTSTRAP_MAGIC 0x68636d62u /* "hcmb" */
/* 2: the job key is proven by HMAC, never sent (protocol 1 sent it in HELLO). */
#define HC_BOOTSTRAP_VERSION 3 /* 3: round 1's table and round 2's by node */
#define HC_BOOTSTRAP_MAX_BLOB (1u << 20)

typedef struct {
    uint32_t magic, version, type, rank, size;
    uint32_t auth_len;
    const void *auth; /* nonces and MACs of the handshake; points into the parsed buffer */
    uint64_t payload_len;
    const void *payload; /* points into the parsed buffer */
} hc_bootstrap_msg_t;

/* Header: magic, version, type, rank, size, auth_len (u32 each), payload_len
 * (u64), all little-endian; then auth_len bytes of handshake proof, then the
 * payload. There are no padding or reserved bytes, so pack(parse(x)) gives
 * back x. */
#define HC_BOOTSTRAP_HDR_LEN 32u
#define HC_BOOTSTRAP_MAX_KEY 127u /* bytes of a job key (it never travels) */
#define HC_BOOTSTRAP_NONCE_LEN 16u
#define HC_BOOTSTRAP_MAC_LEN 32u /* HMAC-SHA256 */
#define HC_BOOTSTRAP_MAX_AUTH (HC_BOOTSTRAP_NONCE_LEN + HC_BOOTSTRAP_MAC_LEN)
#define HC_BOOTSTRAP_MAX_SIZE (1u << 20)        /* ranks in one job */
#define HC_BOOTSTRAP_MAX_PAYLOAD (256ull << 20) /* a whole table */
/* Round 1 by node: the reference to a node's file a TABLE may carry
 * (alone, or after the table: core/bootstrap_node.c). */
#define HC_BOOTSTRAP_NODE_REF_LEN 24
#define HC_BOOTSTRAP_MAX_ABORT_TEXT 1024u
#define HC_BOOTSTRAP_NOTICE_HDR 12u
#define HC_BOOTSTRAP_MAX_NOTICE_TEXT 255u
#define HC_BOOTSTRAP_RELAY_HDR 12u
#define HC_BOOTSTRAP_MAX_RELAY 4096u /* bytes of one relayed blob */

typedef enum {
    HC_BOOTSTRAP_MSG_HELLO = 1,  /* rank -> 0: rank, size; auth: the rank's nonce */
    HC_BOOTSTRAP_MSG_TABLE = 2,  /* 0 -> rank: size blobs, rank order */
    HC_BOOTSTRAP_MSG_AG_IN = 3,  /* rank -> 0: one allgather contribution */
    HC_BOOTSTRAP_MSG_AG_OUT = 4, /* 0 -> rank: every contribution, rank order */
    HC_BOOTSTRAP_MSG_ABORT = 5,  /* 0 -> rank: int32 LE status, then a message */
    HC_BOOTSTRAP_MSG_FAILED = 6, /* either way: u32 rank, u32 cause, i32 status, text */
    HC_BOOTSTRAP_MSG_RELAY = 7,  /* either way: u32 to, u32 from, u32 channel, blob */
    HC_BOOTSTRAP_MSG_BUSY = 8,   /* 0 -> a connection it drops unread: connect again */
    /* 9 was protocol 1's WELCOME: a valid CHALLENGE now says "your rank 0". */
    HC_BOOTSTRAP_MSG_CHALLENGE = 10, /* 0 -> rank: auth: rank 0's nonce, its MAC */
    HC_BOOTSTRAP_MSG_PROOF = 11,     /* rank -> 0: auth: the rank's MAC; the blob */
    HC_BOOTSTRAP_MSG_REFUSE = 12,    /* 0 -> rank: like ABORT; auth: a MAC, or none */
} hc_bootstrap_msg_type_t;

/* Parses one message from buf. Returns the bytes consumed (> 0), 0 when more
 * bytes are needed, or -1 for a malformed message (bad magic/version/type,
 * lengths beyond the limits). Never reads past buf+len. */
long hc_bootstrap_msg_parse(const void *buf, size_t len, hc_bootstrap_msg_t *msg);
/* Like parse, once the header is in: returns the length of the whole message
 * (> 0) and fills msg with auth and payload NULL, 0 when fewer than
 * HC_BOOTSTRAP_HDR_LEN bytes are there (and the magic, if present, is right),
 * or -1. Lets a receiver reject a bad header before it buffers the body. */
long hc_bootstrap_msg_parse_header(const void *buf, size_t len, hc_bootstrap_msg_t *msg);
/* Serializes the header and the auth bytes only (the payload is sent from
 * where it lies); returns HC_BOOTSTRAP_HDR_LEN + auth_len or -1. */
long hc_bootstrap_msg_pack_header(const hc_bootstrap_msg_t *msg, void *out, size_t cap);
/* Serializes into out (capacity cap); returns bytes written or -1. */
long hc_bootstrap_msg_pack(const hc_bootstrap_msg_t *msg, void *out, size_t cap);
/* The protocol version a message says it speaks, once its first 8 bytes are
 * in and start with the magic, whatever else is wrong with it; 0 otherwise.
 * Lets rank 0 tell a peer of another protocol version why it is refused. */
uint32_t hc_bootstrap_msg_version(const void *buf, size_t len);

/* ---- rendezvous address, shared by the environment parser and open ------- */
typedef struct {
    bool is_file;   /* file:///dir rather than tcp://host:port */
    char host[256]; /* tcp: name or address, IPv6 without brackets */
    int port;       /* tcp: 1..65535 */
    char dir[512];  /* file: absolute directory */
} hc_bootstrap_url_t;

/* Parses "tcp://host:port" (host: a name, IPv4 or [IPv6]) or
 * "file:///absolute/dir". Errors: ERR_INVALID naming `what` (the variable the
 * URL came from) and the value. */
hcomm_status_t hc_bootstrap_url_parse(const char *url, const char *what, hc_bootstrap_url_t *u_p);

#endif /* HC_BOOTSTRAP_H */
