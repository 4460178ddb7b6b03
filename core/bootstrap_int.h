/*
 * Internals shared by the bootstrap's own files, not by other modules:
 * bootstrap.c (the connections and their messages, opening, polling and
 * closing the star), bootstrap_root.c (rank 0's listener and the hellos it
 * collects), bootstrap_rank.c (a rank reaching rank 0), bootstrap_auth.c
 * (the handshake that proves the job key without sending it, and what rank
 * 0 does with a peer that fails it or proves it but is misconfigured),
 * bootstrap_allgather.c (the collectives), bootstrap_notice.c (failure
 * notices) and bootstrap_relay.c (blobs from rank to rank through rank 0).
 */
#ifndef HC_BOOTSTRAP_INT_H
#define HC_BOOTSTRAP_INT_H

#include "core/bootstrap.h"

#include <math.h>
#include <poll.h>

#define HC_BS_HELLO_SILENCE 5.0  /* seconds a new connection may take to complete its hello */
#define HC_BS_CHALLENGE_WAIT 2.0 /* port span: seconds a rank waits for a CHALLENGE on a port */
#define HC_BS_FAIL_LINGER 5.0    /* rank 0, job failed: seconds it keeps telling newcomers why */
#define HC_BS_IDLE_MS 1 /* a collective's wait sleeps at most this long between idle calls */

typedef enum { HC_BS_RX_MORE, HC_BS_RX_DONE, HC_BS_RX_EOF, HC_BS_RX_BAD } hc_bs_rx_t;

/* One socket and its receive state; messages are read header first, then
 * exactly the body the validated header announced, so a buffer never holds
 * more than one message. */
typedef struct {
    int fd;
    int rank;      /* the peer's rank, -1 while its hello is pending */
    double t_open; /* accept time: the hello silence limit counts from here */
    uint64_t seq;  /* accept order (rank 0's pending list) */
    char peer[80]; /* "addr:port" for the logs */
    uint8_t *buf;
    size_t have, need, cap;
    bool closed;                   /* hc_bootstrap_poll: EOF seen, failure not yet noted */
    bool gone;                     /* closed or unreadable: nothing is sent to it any more */
    const struct hc_bootstrap *bs; /* its bootstrap (the idle hook), NULL during open */
    /* The handshake (bootstrap_auth.c). Rank 0's pending connections: stage
     * 0 waits for HELLO, 1 for PROOF's MAC, 2 for PROOF's blob (the MAC
     * checked); the rank it claims and the size it says. Both sides keep the
     * two nonces: a REFUSE is signed over them. */
    uint8_t stage;
    uint32_t claim_rank, claim_size;
    uint8_t nonce_r[HC_BOOTSTRAP_NONCE_LEN], nonce0[HC_BOOTSTRAP_NONCE_LEN];
} hc_bs_conn_t;

/* What the receiver expects; the header is checked against it before the
 * body is buffered. ABORT is always accepted, FAILED notices where `notices`
 * (only from ranks that joined: never during the hello). size 0: any size
 * (rank 0 reads a hello of any size, to tell a member of the wrong size
 * why). any_payload: any length the parser allows. auth_first: the body is
 * read up to the end of the auth bytes first (a PROOF's MAC is checked
 * before its blob is buffered). */
typedef struct {
    uint32_t type, size;
    uint64_t payload_len;
    bool notices;
    bool any_payload;
    bool auth_first;
} hc_bs_expect_t;

struct hc_bootstrap {
    int rank, size;
    size_t blob_len;
    uint8_t *table;
    hc_bs_conn_t *conns; /* rank 0: conns[r], r in 1..size-1; others: conns[0] */
    int nconns;
    struct pollfd *pfds; /* hc_bootstrap_poll: one per kept connection */
    hcomm_status_t dead; /* a failed collective leaves the star unusable */
    char addr_file[640]; /* rank 0, file://: the published address */
    /* Failure notices (see hc_bootstrap_poll): per rank, the cause of its
     * failure once judged (-1 before); rank 0 also keeps, per rank, the
     * first rank it reported gone (-1: none). */
    int *verdict, *left_after;
    int first_cause; /* the cause of the first verdict, -1 none */
    int nverdicts;
    hc_bootstrap_notice_fn notice;
    void *notice_arg;
    hc_bootstrap_relay_fn relay; /* relayed blobs (hc_bootstrap_relay) */
    void *relay_arg;
    int nrelayed;
    void (*idle)(void *arg); /* hc_bootstrap_set_idle */
    void *idle_arg;
    /* hc_bootstrap_allgather_nodes (bootstrap_node.c): the job key's hash
     * (its file names), calls so far, the file this rank published */
    uint8_t key_hash[32];
    uint64_t node_calls;
    char node_file[64];
};

/* Rank 0 while it collects the hellos. */
typedef struct {
    hc_bootstrap_t *bs;
    const hc_bootstrap_params_t *p;
    double deadline;
    int joined; /* ranks in their slots */
    /* A member was refused (or a process of this user on this host failed
     * the key proof): the job fails with fail_text on every rank. Rank 0
     * keeps answering newcomers until fail_until or until every other rank
     * has been told (told counts them). */
    hcomm_status_t fail;
    char fail_text[HC_BOOTSTRAP_MAX_ABORT_TEXT + 1];
    double fail_until;
    int told;
    /* Refused claims that could not fail the job (a stranger, or a rank on
     * another host whose key differs): the latest, for the timeout message. */
    int nclaims;
    char claim_text[300];
} hc_bs_gather_t;

/* Milliseconds poll() may wait until the deadline (0: passed). */
static inline int hc_bs_poll_ms(double deadline)
{
    double left = deadline - hc_time_sec();
    if (left <= 0) return 0;
    return left > 3600.0 ? 3600000 : (int)ceil(left * 1000.0);
}

/* Messages that may come between allgathers or inside one (failure notices,
 * relayed blobs): taken wherever the star is read, never by the hello. */
static inline bool hc_bs_is_sideband(uint32_t type)
{
    return type == HC_BOOTSTRAP_MSG_FAILED || type == HC_BOOTSTRAP_MSG_RELAY;
}

/* Connection i (rank 0: rank i; others: 0) can still be written to. */
static inline bool hc_bs_conn_up(const hc_bootstrap_t *bs, int i)
{
    return i >= 0 && i < bs->nconns && bs->conns[i].fd >= 0 && !bs->conns[i].gone;
}

/* ---- bootstrap.c ---------------------------------------------------------- */
void hc_bs_sleep(double sec);
/* TCP_NODELAY, best effort (a control path: only latency is at stake). */
void hc_bs_set_nodelay(int fd);
/* A connected socket whose two ends are one address and port: TCP's
 * simultaneous open joined a connect() to itself, which happens when the
 * kernel picks the destination port as the source port while nothing
 * listens there (rank 0's port, in the ephemeral range, before rank 0
 * binds it). Such a socket holds rank 0's port and must be closed. */
bool hc_bs_self_connected(int fd);
/* A sideband message (hc_bs_is_sideband) from connection `from`. */
void hc_bs_sideband(hc_bootstrap_t *bs, int from, const hc_bootstrap_msg_t *m);
/* "2, 5, 7" of the ranks whose flag is false, truncated to fit. */
void hc_bs_rank_list(const bool *have, int size, char *out, size_t cap);
/* file://: the path of the file where rank 0 publishes its address. */
hcomm_status_t hc_bs_addr_file_path(const hc_bootstrap_url_t *u, const char *key, char *out,
                                    size_t cap);
/* Ports of the span that exist (1 without a span). */
int hc_bs_port_span(const hc_bootstrap_params_t *p, const hc_bootstrap_url_t *u);
void hc_bs_conn_init(hc_bs_conn_t *c);
void hc_bs_conn_close(hc_bs_conn_t *c);
/* Sends header (+ auth) then payload, non-blocking, until the deadline. */
hcomm_status_t hc_bs_send_msg(int fd, const hc_bootstrap_msg_t *m, double deadline,
                              const char *what, int peer);
/* Reads what is available without blocking; see hc_bs_conn_t. */
hc_bs_rx_t hc_bs_conn_read(hc_bs_conn_t *c, const hc_bs_expect_t *e, char *why, size_t whycap);
/* The allgather (bootstrap_allgather.c); rank 0 sends the result to the
 * ranks r with to[r] (to NULL: every rank). */
hcomm_status_t hc_bs_allgather(hc_bootstrap_t *bs, const char *fn, const void *in, size_t len,
                               void *out, const bool *to, double timeout_sec);
/* A non-zero rank's part of an allgather: its contribution to rank 0. */
hcomm_status_t hc_bs_allgather_send(hc_bootstrap_t *bs, const char *fn, const void *in, size_t len,
                                    double deadline, double timeout_sec);
/* Round 1 by node (p->node_key_len > 0): rank 0 sends the table to each
 * node's leader and a reference to the others (and publishes for its own
 * node); a rank takes what came (m: the TABLE message), publishing it for
 * its node when it leads, else reading its leader's file. */
#define HC_BS_NODE_REF_LEN HC_BOOTSTRAP_NODE_REF_LEN
hcomm_status_t hc_bs_node_send_tables(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                                      double deadline);
hcomm_status_t hc_bs_node_take_table(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                                     const hc_bootstrap_msg_t *m, double deadline, double timeout);
/* The job key's hash for hc_bootstrap_allgather_nodes' file names (open). */
void hc_bs_node_init(hc_bootstrap_t *bs, const char *key);
/* The file hc_bootstrap_allgather_nodes published, removed (close). */
void hc_bs_node_close(hc_bootstrap_t *bs);
/* Waits for one whole message on one connection until the deadline. */
hcomm_status_t hc_bs_conn_wait(hc_bs_conn_t *c, const hc_bs_expect_t *e, double deadline,
                               hc_bootstrap_msg_t *m_p, char *why, size_t whycap);
/* An ABORT's or REFUSE's payload: the status it carries (one of ours, else
 * BOOTSTRAP) and its text with anything unprintable masked. */
hcomm_status_t hc_bs_abort_decode(const hc_bootstrap_msg_t *m, char *text, size_t cap);
/* Rank 0 tells every joined rank why the job stops (best effort) and sets
 * the last error to st, text. */
void hc_bs_abort_all(hc_bootstrap_t *bs, hcomm_status_t st, const char *text);
/* Closes a connection rank 0 turns away, logging why (rate limited). */
void hc_bs_reject(hc_bs_conn_t *c, const char *why);
/* "HCOMM_JOB_KEY", or hcomm_init_rank's "job_key": where the key came from. */
const char *hc_bs_key_name(const hc_bootstrap_params_t *p);

/* ---- bootstrap_root.c, bootstrap_rank.c ----------------------------------- */
/* Rank 0: listens, collects every rank's proof and blob, sends the table. */
hcomm_status_t hc_bs_root_open(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                               const hc_bootstrap_url_t *u, double deadline, double timeout);
/* Other ranks: reach rank 0 and join; the table is in bs->table on success. */
hcomm_status_t hc_bs_rank_open(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                               const hc_bootstrap_url_t *u, const void *blob, double deadline,
                               double timeout);

/* ---- bootstrap_notice.c, bootstrap_relay.c -------------------------------- */
/* A FAILED message: on rank 0 a rank's report, elsewhere rank 0's verdict. */
void hc_bs_notice_msg(hc_bootstrap_t *bs, int from, const hc_bootstrap_msg_t *m);
/* A bootstrap connection closed (hc_bootstrap_poll): a verdict follows. */
void hc_bs_closed(hc_bootstrap_t *bs, int peer);
/* A RELAY message: forwarded by rank 0, handed to the relay callback at its
 * destination. */
void hc_bs_relay_msg(hc_bootstrap_t *bs, int from, const hc_bootstrap_msg_t *m);

/* ---- bootstrap_auth.c ----------------------------------------------------- */
/* The 16 hex digits that name a job's address file under file:// (an HMAC
 * of a fixed label under the key: the name says nothing about the key). */
hcomm_status_t hc_bs_auth_file_tag(const char *key, char *out, size_t cap);

/* Rank 0: advances pending connection c with what has arrived: answers a
 * HELLO with a CHALLENGE, checks a PROOF's MAC before its blob is read, and
 * then moves c into its rank's slot (g->joined++), or refuses it (closed;
 * a member's refusal fails the job, see hc_bs_gather_t). Returns true while
 * c is still pending. */
bool hc_bs_auth_root_step(hc_bs_gather_t *g, hc_bs_conn_t *c);
/* Rank 0, the job failing: fails it with st and text once (the first cause
 * wins), telling every joined rank. */
void hc_bs_auth_job_fail(hc_bs_gather_t *g, hcomm_status_t st, const char *text);

typedef enum {
    HC_BS_HS_PROVEN,    /* rank 0 proved the key; this rank's PROOF and blob are sent */
    HC_BS_HS_BUSY,      /* rank 0 dropped the connection before it answered: connect again */
    HC_BS_HS_ELSEWHERE, /* no valid CHALLENGE came: not (yet) this job's rank 0; why says */
    HC_BS_HS_KEY,       /* rank 0 proved another key; it was told (a failing PROOF) */
    HC_BS_HS_FAILED,    /* an error, the last error set */
} hc_bs_hs_t;

/* A rank, connected to what may be its rank 0 (c->fd): HELLO, then the
 * CHALLENGE until challenge_until, then PROOF with the blob until
 * deadline. probing (a port span, file://): a CHALLENGE that proves another
 * key says "another job's rank 0" (ELSEWHERE, nothing sent); otherwise the
 * rank tells rank 0 its key differs (KEY). *st_p: FAILED's status; for
 * ELSEWHERE how the wait for the CHALLENGE ended (TIMEOUT: silence,
 * PEER_FAILED: a close, BOOTSTRAP: something else, or OK: a wrong MAC). */
hc_bs_hs_t hc_bs_auth_rank_handshake(hc_bs_conn_t *c, const hc_bootstrap_params_t *p,
                                     const void *blob, size_t blob_len, double challenge_until,
                                     double deadline, bool probing, hcomm_status_t *st_p, char *why,
                                     size_t wcap);
/* A REFUSE that came to this rank after its PROOF: the status and text when
 * rank 0 signed it over this connection's nonces; otherwise (no MAC: rank 0
 * found this rank's proof wrong) a job key mismatch. */
hcomm_status_t hc_bs_auth_refuse_decode(const hc_bs_conn_t *c, const hc_bootstrap_params_t *p,
                                        const hc_bootstrap_msg_t *m, char *text, size_t cap);

#endif /* HC_BOOTSTRAP_INT_H */
