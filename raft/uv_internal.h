/* Private state of the libuv TCP transport (uv.h), shared by uv_tcp.c
 * (listening, dialling, backoff, peers, close), uv_resolve.c (hostnames),
 * uv_accept.c (accepting), uv_send.c (ordered writes to peers), uv_recv.c
 * (frame reassembly and decoding), uv_handshake.c (the handshake and its
 * answer) and uv_tls_stream.c (TLS beneath all of it, uv_tls.h). */

#ifndef RAFT_UV_INTERNAL_H
#define RAFT_UV_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "address.h"
#include "logging.h"
#include "raft.h"
#include "uv.h"
#include "uv_tls.h"

/* Handshake (layout in uv.h): magic, handshake version u8, lowest and
 * highest wire version u8, cluster id, sender id u64 little-endian, build
 * id length u8, build id, listen address length u8, listen address. */
#define RAFT__UV_MAGIC "RFTSQL"
#define RAFT__UV_MAGIC_LEN 6
#define RAFT__UV_HANDSHAKE_VERSION 4
/* Bytes up to and including the handshake and wire versions. */
#define RAFT__UV_HANDSHAKE_VERSIONS (RAFT__UV_MAGIC_LEN + 3)
/* Offset of the sender id (after the cluster id). */
#define RAFT__UV_HANDSHAKE_ID                                                  \
    (RAFT__UV_HANDSHAKE_VERSIONS + RAFT_UV_CLUSTER_ID_LEN)
/* Bytes before the build id. */
#define RAFT__UV_HANDSHAKE_FIXED (RAFT__UV_HANDSHAKE_ID + 8 + 1)
/* Longest listen address a handshake carries ("host:port", an IPv6
 * literal in brackets or a 253-byte host name and a port), bytes: its
 * length byte's range. */
#define RAFT__UV_ADDRESS_MAX 255
_Static_assert(RAFT_ADDRESS_TEXT_MAX <= RAFT__UV_ADDRESS_MAX,
               "every address the parser accepts fits in a handshake");
/* Longest handshake. */
#define RAFT__UV_HANDSHAKE_MAX                                                 \
    (RAFT__UV_HANDSHAKE_FIXED + RAFT_UV_BUILD_ID_MAX + 1 + RAFT__UV_ADDRESS_MAX)

/* The acceptor's answer (layout in uv.h): magic, handshake version u8,
 * verdict u8, lowest and highest wire version u8, cluster id, acceptor id
 * u64 little-endian, reason length u8, reason. Bytes before the reason,
 * and the longest answer. */
#define RAFT__UV_ANSWER_FIXED                                                  \
    (RAFT__UV_MAGIC_LEN + 4 + RAFT_UV_CLUSTER_ID_LEN + 8 + 1)
#define RAFT__UV_ANSWER_MAX (RAFT__UV_ANSWER_FIXED + 255)

/* Verdicts of an answer: accepted, or why the acceptor refused. */
enum raft_uv_verdict {
    RAFT__UV_ACCEPTED = 0,
    RAFT__UV_REFUSED_CLUSTER = 1,   /* both have a cluster id, not the same */
    RAFT__UV_REFUSED_ID = 2,        /* sender id 0, or the acceptor's own,
                                       or (TLS) one the client's
                                       certificate does not name */
    RAFT__UV_REFUSED_WIRE = 3,      /* no wire version in common */
    RAFT__UV_REFUSED_HANDSHAKE = 4, /* another handshake version, or a
                                       malformed handshake */
};

/* Refusals an acceptor remembers having logged (a refused dialler retries
 * every 2 s: only a new refusal is logged at WARN), and the length of
 * each remembered line. */
#define RAFT__UV_REFUSALS 8
#define RAFT__UV_REFUSAL_LEN 300

/* Reconnect backoff: first delay, and the ceiling it doubles up to. */
#define RAFT__UV_BACKOFF_MIN_MS 100
#define RAFT__UV_BACKOFF_MAX_MS 2000

/* A dial that has not completed after this long is abandoned and retried. */
#define RAFT__UV_CONNECT_TIMEOUT_MS 3000

/* Most hostname resolutions one transport runs at once: each holds a
 * thread of libuv's pool, which the storage writes share. */
#define RAFT__UV_MAX_RESOLVING 2

/* Idle seconds before TCP keepalive probes start on a connection. */
#define RAFT__UV_KEEPALIVE_S 30

/* Most bytes queued (written but not yet completed) to one peer. */
#define RAFT__UV_MAX_QUEUED ((uint64_t)64 << 20)

/* Frames of at most this many bytes (heartbeats, answers, votes) may
 * queue RAFT__UV_SMALL_RESERVE bytes past RAFT__UV_MAX_QUEUED: a large
 * entry on its way never makes the next heartbeat wait or be dropped. */
#define RAFT__UV_SMALL_FRAME 4096
#define RAFT__UV_SMALL_RESERVE ((uint64_t)1 << 20)

/* Entry and forward payloads of at least this many bytes are written from
 * their own buffer, not copied into the frame (raft_frame_encode_refs):
 * a large entry costs the loop thread no copy and no fresh memory. */
#define RAFT__UV_REF_MIN 65536

/* Size of the read buffer of an accepted connection. */
#define RAFT__UV_READ_BUF 65536

/* A frame body at least this large may span many reads and take longer
 * than an election timeout to cross: bytes of one still arriving count as
 * contact (raft_uv_transport_contacts); smaller frames arrive whole. */
#define RAFT__UV_CONTACT_MIN RAFT__UV_READ_BUF

/* Smallest frame body: version and type; the decoder checks the rest. */
#define RAFT__UV_MIN_FRAME 2

/* Most frames held for one peer between two flushes; one more flushes at
 * once. */
#define RAFT__UV_CORK_MAX 64

/* An accepted connection must complete its handshake within this, ms. */
#define RAFT__UV_HANDSHAKE_TIMEOUT_MS 5000

/* A frame in progress that receives no byte for this long is dropped with
 * its connection, ms (peers send heartbeats every few ms otherwise). */
#define RAFT__UV_STALL_TIMEOUT_MS 10000

/* Most accepted connections not yet past their handshake; more are closed
 * at once. */
#define RAFT__UV_MAX_UNVERIFIED 64

/* Period of the sweep that applies the two timeouts above, ms. */
#define RAFT__UV_SWEEP_MS 1000

/* Largest TLS record's plaintext: frames are coalesced up to this before
 * one SSL_write, and plaintext is read in pieces of this. */
#define RAFT__UV_TLS_RECORD 16384

/* Identical TLS failures from one peer are logged once per this, ms. */
#define RAFT__UV_TLS_WARN_MS 10000

/* Peers (or remote addresses) whose last TLS failure is remembered. */
#define RAFT__UV_TLS_WARNED 16

/* States of the outgoing connection to one peer. */
enum raft_uv_out_state {
    RAFT__UV_WAITING = 1,     /* no connection, backoff timer running */
    RAFT__UV_DIALLING = 2,    /* connect in progress */
    RAFT__UV_CONNECTED = 3,   /* handshake accepted, frames may be sent */
    RAFT__UV_HANDSHAKING = 4, /* handshake sent, waiting for the answer
                                 (timer running): frames are refused */
    RAFT__UV_RESOLVING = 5,   /* its hostname resolving (uv_resolve.c) */
    RAFT__UV_SECURING = 6,    /* connected, TLS handshake in progress
                                 (timer running) */
};

struct raft_uv_out;
struct raft_uv_resolve;
struct raft_uv_write;

/* One outgoing TCP connection (one dial attempt). Freed in its close
 * callback, which libuv runs after the connect and write callbacks. */
struct raft_uv_conn {
    uv_tcp_t tcp;                        /* the socket; tcp.data is this
                                              conn */
    uv_connect_t connect;                /* the dial request */
    struct raft_uv_out *out;             /* peer this connection belongs
                                              to */
    struct raft_uv_tls_session *tls;     /* its TLS client session, NULL
                                              without TLS */
    uint8_t answer[RAFT__UV_ANSWER_MAX]; /* the acceptor's answer so far */
    size_t answer_got;                   /* bytes of @answer received */
    uint64_t submitted;                  /* bytes handed to uv_write */
    uint64_t taken_mark;                 /* of them, taken by the socket
                                              at the last contact poll */
    size_t backlog_mark;                 /* bytes waiting for the socket
                                              then (write_queue_size) */
    char rbuf[4096];                     /* libuv reads land here: TLS
                                              records, or the answer */
};

/* The sending side towards one peer, allocated on its own: a peer removed
 * (raft_uv_transport_remove_peer) is retired and freed once its timer and
 * connection are closed (@refs).
 * Invariant: @conn != NULL iff @state is DIALLING, SECURING, HANDSHAKING
 * or CONNECTED; @resolving != NULL iff @state is RESOLVING. */
struct raft_uv_out {
    struct raft_uv_transport *t;       /* owner */
    raft_id id;                        /* the peer's server id */
    struct raft_address address;       /* where it listens: an IP, or a
                                     hostname resolved before each dial */
    struct sockaddr_storage addr;      /* the IP of the latest dial */
    struct raft_uv_resolve *resolving; /* the resolution in flight */
    unsigned pick;   /* which IP of a hostname to dial: the next one
                        after a failed connect */
    int resolve_err; /* libuv code of the latest failed resolution,
                        logged; 0 once it resolves */
    char name[RAFT_ADDRESS_TEXT_MAX + 32];    /* "peer 2 (host:port)", logs */
    char identity[RAFT_ADDRESS_TEXT_MAX + 1]; /* host its certificate must
                        name (raft_uv_peer.identity): the configured host,
                        kept however it resolves */
    int state;                                /* enum raft_uv_out_state */
    struct raft_uv_conn *conn;                /* current connection, or NULL */
    uv_timer_t timer;      /* backoff, connect, TLS and answer
                                  timeouts */
    unsigned backoff_ms;   /* delay before the next re-dial */
    uint64_t queued_bytes; /* bytes held or in uv_write, not yet
                                    completed */
    struct raft_uv_write *pend[RAFT__UV_CORK_MAX]; /* frames held for the
                                    next flush, in send order */
    unsigned n_pend;                               /* frames at @pend */
    bool build_known;                              /* @build_id is set */
    char build_id[RAFT_UV_BUILD_ID_MAX + 1];       /* the build id of the
                                    peer's latest handshake */
    uint8_t cluster_id[RAFT_UV_CLUSTER_ID_LEN];    /* the cluster id of it
                                    (valid with @build_known) */
    unsigned wire_version;                         /* frames go in this
                                    version (set when accepted) */
    raft_id answered;                              /* the id the latest
                                    acceptance named (a probe learns whom
                                    it reached), 0 before one */
    char refusal[RAFT__UV_REFUSAL_LEN];            /* the last refusal of
                                    our handshake logged at WARN, "" */
    unsigned refs;                                 /* open handles: the
                                    timer, and @conn or a closing one */
    bool retired;                                  /* removed: freed when
                                    @refs drops to 0 */
};

/* Receive stages of an accepted connection. */
enum raft_uv_in_stage {
    RAFT__UV_HANDSHAKE = 1, /* reading the handshake */
    RAFT__UV_HEADER = 2,    /* reading a frame length prefix */
    RAFT__UV_BODY = 3,      /* reading a frame body */
};

/* One accepted connection, from a peer's outgoing side. Freed in its close
 * callback. */
struct raft_uv_in {
    uv_tcp_t tcp;                          /* tcp.data is this struct */
    struct raft_uv_transport *t;           /* owner */
    struct raft_uv_in *prev;               /* list of accepted conns */
    struct raft_uv_in *next;               /* list of accepted conns */
    char name[RAFT_ADDRESS_TEXT_MAX + 32]; /* "peer 2 (addr)", for logs */
    raft_id peer;                          /* sender id, 0 before handshake */
    bool closing;                          /* uv_close called */
    bool refused;                          /* its handshake was refused: the
                                           refusal goes out, then it
                                           closes */
    unsigned wire_version;                 /* its frames' version, once
                                           verified */
    uint8_t answer[RAFT__UV_ANSWER_MAX];   /* the answer to write */
    size_t answer_len;                     /* its bytes, 0 once written */
    int stage;                             /* enum raft_uv_in_stage */
    uint8_t hs[RAFT__UV_HANDSHAKE_MAX];    /* handshake bytes so far */
    size_t hs_got;                         /* bytes of @hs received */
    uint8_t hdr[4];                        /* length prefix so far */
    size_t hdr_got;                        /* bytes of @hdr received */
    struct raft_buf *body;                 /* frame body being assembled
                                              (its len is the capacity) */
    size_t body_len;                       /* announced body length */
    size_t body_got;                       /* bytes of the body received */
    size_t body_cap;                       /* bytes allocated at @body */
    uint64_t accepted_at;                  /* loop clock at accept, ms */
    uint64_t last_read_at;                 /* loop clock of the last bytes
                                              read, ms */
    bool heard;                            /* in the middle of a frame of
                                              RAFT__UV_CONTACT_MIN bytes or
                                              more after a read since the
                                              last contact poll */
    struct raft_uv_tls_session *tls;       /* its TLS server session, NULL
                                        without TLS */
    bool tls_done;                         /* its TLS handshake completed */
    char rbuf[RAFT__UV_READ_BUF];          /* libuv reads land here */
};

/* The last TLS failure logged about one peer or remote address: the
 * same failure again within RAFT__UV_TLS_WARN_MS is counted, not logged. */
struct raft_uv_warned {
    char key[96];    /* whom it is about, "" for a free slot */
    uint64_t hash;   /* of the failure's reason */
    uint64_t at;     /* loop clock when logged, ms */
    unsigned n_held; /* the same failures not logged since */
};

/* The transport.
 * Invariant: @n_handles counts initialized handles whose close callback
 * has not run; @t is freed when it drops to 0 after close. */
struct raft_uv_transport {
    uv_loop_t *loop; /* the loop every handle lives on */
    raft_id self;    /* this server's id */
    char build_id[RAFT_UV_BUILD_ID_MAX + 1];    /* this server's build id */
    uint8_t cluster_id[RAFT_UV_CLUSTER_ID_LEN]; /* its cluster id, all zero
                                                   while it has none */
    char refusals[RAFT__UV_REFUSALS][RAFT__UV_REFUSAL_LEN]; /* refusals
                                   logged at WARN, latest at
                                   @n_refusals - 1 (a ring) */
    unsigned n_refusals;        /* refusals logged so far */
    uint64_t max_frame_bytes;   /* bound on one frame body */
    raft_uv_recv_cb recv_cb;    /* receive callback */
    raft_log_cb log_cb;         /* log sink, may be NULL */
    void *data;                 /* passed to the callbacks */
    uv_tcp_t listener;          /* the listening socket */
    uv_prepare_t flush_prepare; /* flushes held frames before polling */
    uv_check_t flush_check;     /* and after each poll */
    uint16_t port;              /* port actually bound */
    char address[RAFT__UV_ADDRESS_MAX + 1];     /* "host:port" listened on,
                                   sent in every handshake */
    struct raft_uv_out *outs[RAFT_MAX_SERVERS]; /* the peers, n_outs */
    unsigned n_outs;                            /* number of peers */
    struct raft_uv_in *ins;   /* accepted connections, linked list */
    unsigned n_unverified;    /* of them, not yet past the handshake */
    unsigned n_refused;       /* connections refused since the last
                                   sweep (logged there, in one line) */
    unsigned n_resolving;     /* resolutions in flight, at most
                                   RAFT__UV_MAX_RESOLVING */
    uv_timer_t sweep;         /* closes stalled connections */
    uint64_t handshake_ms;    /* RAFT__UV_HANDSHAKE_TIMEOUT_MS, or a
                                   test's */
    uint64_t stall_ms;        /* RAFT__UV_STALL_TIMEOUT_MS, or a test's */
    unsigned n_handles;       /* see Invariant */
    bool closing;             /* raft_uv_transport_close called */
    void (*close_cb)(void *); /* called once everything is closed */
    void *close_data;         /* argument of @close_cb */
    struct raft_uv_tls *tls;  /* credentials (borrowed), NULL without
                                   TLS */
    uint8_t *tls_plain;       /* RAFT__UV_TLS_RECORD bytes: plaintext
                                   read (TLS only) */
    uint8_t *tls_stage;       /* RAFT__UV_TLS_RECORD bytes: small frames
                                   coalesced for one SSL_write */
    unsigned n_sweeps;        /* sweeps run, for the TLS file check */
    struct raft_uv_warned warned[RAFT__UV_TLS_WARNED]; /* TLS failures
                                   logged lately */
};

/* raft_uv_tcp_log formats a line and hands it to the log callback, if any.
 * Loop thread. */
void raft_uv_tcp_log(struct raft_uv_transport *t, int level, const char *fmt,
                     ...) __attribute__((format(printf, 3, 4)));

/* raft_uv_tcp_out_fail closes the current connection of @out, if any, and
 * schedules a re-dial after the backoff delay (none once closing). Queued
 * writes complete with UV_ECANCELED and are freed. Loop thread. */
void raft_uv_tcp_out_fail(struct raft_uv_out *out);

/* raft_uv_tcp_in_close closes the accepted connection @in (idempotent);
 * it is unlinked and freed in its close callback. Loop thread. */
void raft_uv_tcp_in_close(struct raft_uv_in *in);

/* raft_uv_tcp_dial starts one connection attempt to @out: at its IP, or
 * once its hostname resolved (raft_uv_resolve_start); or it schedules a
 * retry (uv_tcp.c). Loop thread. */
void raft_uv_tcp_dial(struct raft_uv_out *out);

/* raft_uv_tcp_out_handshake starts the raft handshake on @out's fresh
 * connection, which is TCP (on_connect) or TLS whose handshake completed
 * and whose server passed the identity rule (uv_tls_stream.c): @out
 * becomes HANDSHAKING, the handshake is queued (encrypted under TLS) and
 * the connect timer re-armed as the answer's timeout; a failure to queue
 * fails the connection. The answer (uv_handshake.c) makes it CONNECTED.
 * Loop thread. */
void raft_uv_tcp_out_handshake(struct raft_uv_out *out);

/* raft_uv_tcp_connect connects to @out->addr, the IP of @out chosen by
 * raft_uv_tcp_dial or the resolver; a failure schedules a retry. Loop
 * thread. */
void raft_uv_tcp_connect(struct raft_uv_out *out);

/* raft_uv_tcp_retry schedules the next dial of @out (state WAITING, no
 * connection) in @delay_ms, leaving its backoff as it is. Loop thread. */
void raft_uv_tcp_retry(struct raft_uv_out *out, unsigned delay_ms);

/* raft_uv_tcp_req_done accounts for the end of a request that held a
 * reference to @out and counted as a handle of its transport (a
 * resolution): a retired @out or a closed transport may be freed. Loop
 * thread. */
void raft_uv_tcp_req_done(struct raft_uv_out *out);

/* raft_uv_resolve_numeric writes into @out the socket address of @host, an
 * IPv4 or IPv6 literal (no brackets; an IPv6 zone names an interface),
 * and @port. Resolves no name. Returns 0, or RAFT_INVALID (not an IP
 * literal, or @port above 65535). Any thread. */
int raft_uv_resolve_numeric(const char *host, unsigned port,
                            struct sockaddr_storage *out);

/* raft_uv_resolve_format writes @sa (IPv4 or IPv6) as "ip:port" or
 * "[ip]:port" into @out (@len bytes), for logs. Any thread. */
void raft_uv_resolve_format(const struct sockaddr *sa, char *out, size_t len);

/* raft_uv_resolve_peers validates the @n_peers @peers given to the
 * transport of server @self (ids neither 0, @self nor repeated, at most
 * RAFT_MAX_SERVERS, hosts an IP literal or a hostname) and parses the
 * address of each into @addrs (@n_peers long). Errors: RAFT_INVALID with
 * @errmsg. Any thread. */
int raft_uv_resolve_peers(raft_id self, const struct raft_uv_peer *peers,
                          unsigned n_peers, struct raft_address *addrs,
                          char *errmsg, size_t errmsg_len);

/* raft_uv_resolve_listen reads the listen address @host:@port (an IP
 * literal) into @addr and @shown (@shown_len bytes, as logs show it), and
 * checks @advertise (NULL, or "host:port" as raft/address.h reads it).
 * Errors: RAFT_INVALID with @errmsg. Any thread. */
int raft_uv_resolve_listen(const char *host, uint16_t port,
                           const char *advertise, struct sockaddr_storage *addr,
                           char *shown, size_t shown_len, char *errmsg,
                           size_t errmsg_len);

/* raft_uv_resolve_advertised writes into @t->address what its handshakes
 * give as its listen address: @advertise (checked), else the address it
 * listens on (@addr, with the port @t bound), or nothing for a wildcard,
 * which no peer can dial. Loop thread. */
void raft_uv_resolve_advertised(struct raft_uv_transport *t,
                                const char *advertise,
                                const struct sockaddr_storage *addr);

/* raft_uv_resolve_start resolves the hostname of @out (state RESOLVING)
 * and then connects to one of its IPs (raft_uv_tcp_connect), or logs the
 * failure (once per change of error) and schedules a retry
 * (raft_uv_tcp_out_fail); past RAFT__UV_MAX_RESOLVING resolutions in
 * flight it schedules the dial again in RAFT__UV_BACKOFF_MIN_MS. Loop
 * thread (uv_resolve.c, like the next). */
void raft_uv_resolve_start(struct raft_uv_out *out);

/* raft_uv_resolve_cancel orphans the resolution in flight for @out, if
 * any: its result is dropped when it comes. The caller sets the state.
 * Loop thread. */
void raft_uv_resolve_cancel(struct raft_uv_out *out);

/* raft_uv_accept_verified notes that @in completed its handshake as peer
 * @in->peer: it no longer counts against RAFT__UV_MAX_UNVERIFIED, and a
 * dial to that peer waiting out its backoff starts at once (the peer is
 * evidently up). Loop thread (uv_accept.c, like the two below). */
void raft_uv_accept_verified(struct raft_uv_in *in);

/* raft_uv_accept_on_connection is the listener's connection callback: it
 * accepts the connection and starts reading its handshake, or closes it
 * past RAFT__UV_MAX_UNVERIFIED connections in their handshake. */
void raft_uv_accept_on_connection(uv_stream_t *server, int status);

/* raft_uv_accept_sweep is the sweep timer's callback: it closes the
 * accepted connections that stalled (still in their handshake after
 * RAFT__UV_HANDSHAKE_TIMEOUT_MS, or in the middle of a frame with no byte
 * for RAFT__UV_STALL_TIMEOUT_MS) and logs the refused ones. A connection
 * whose socket holds bytes not yet read has not stalled: this server's
 * loop has (libuv runs timers before it polls, so after the loop thread
 * was held up, by a long callback or a loaded machine, the sweep runs
 * before the reads that wait) and it is left to its reads. */
void raft_uv_accept_sweep(uv_timer_t *timer);

/* raft_uv_transport_set_timeouts sets @t's handshake and stall timeouts
 * (ms; see raft_uv_accept_sweep) in place of RAFT__UV_HANDSHAKE_TIMEOUT_MS
 * and RAFT__UV_STALL_TIMEOUT_MS: a seam for tests. Loop thread. */
void raft_uv_transport_set_timeouts(struct raft_uv_transport *t,
                                    uint64_t handshake_ms, uint64_t stall_ms);

/* raft_uv_tcp_find returns the peer @id of @t, or NULL when unknown. */
struct raft_uv_out *raft_uv_tcp_find(const struct raft_uv_transport *t,
                                     raft_id id);

/* raft_uv_send_handshake_encode writes the handshake of server @self of
 * cluster @cluster_id (all zero for none) with build id @build_id
 * (NUL-terminated, at most RAFT_UV_BUILD_ID_MAX bytes, as the transport
 * checked it) and listen address @address ("host:port", at most
 * RAFT__UV_ADDRESS_MAX bytes), speaking wire versions
 * RAFT_WIRE_VERSION_MIN to RAFT_WIRE_VERSION, into @out and returns its
 * length (at most RAFT__UV_HANDSHAKE_MAX bytes). Pure; any thread. */
size_t raft_uv_send_handshake_encode(
    raft_id self, const uint8_t cluster_id[RAFT_UV_CLUSTER_ID_LEN],
    const char *build_id, const char *address,
    uint8_t out[RAFT__UV_HANDSHAKE_MAX]);

/* raft_uv_send_answer writes the answer prepared in @in->answer (by
 * raft_uv_handshake_check) on the accepted connection @in, if any is
 * pending (encrypted under TLS: raft_uv_tls_stream_in_answer); once a
 * refusal is written (@in->refused), or when none can be written, it
 * closes @in. Loop thread. */
void raft_uv_send_answer(struct raft_uv_in *in);

/* raft_uv_handshake_need returns how many handshake bytes @in must hold
 * before the next raft_uv_handshake_check: the versions, then the fixed
 * part, then through the address length, then the whole. Pure. */
size_t raft_uv_handshake_need(const struct raft_uv_in *in);

/* raft_uv_handshake_check checks the handshake of @in once it holds
 * raft_uv_handshake_need bytes. Returns -1 when it is refused (logged;
 * @in->answer holds the refusal, @in->refused is set, except for a bad
 * magic: not raftsql, no answer), 0 while more bytes are needed, 1 when
 * it is complete and accepted: @in->peer and @in->wire_version are set,
 * the peer's build and cluster id recorded (a sender that is not a peer
 * is dialled back, raft_uv_tcp_learn) and @in->answer holds the
 * acceptance. Writes no bytes itself (raft_uv_send_answer does). Loop
 * thread (the fuzz target calls it without a loop, on a transport full of
 * peers). */
int raft_uv_handshake_check(struct raft_uv_in *in);

/* raft_uv_handshake_refuse refuses @in's handshake for @verdict (enum
 * raft_uv_verdict): logs the line of @fmt naming @in (at WARN, at DEBUG
 * when it was among the last RAFT__UV_REFUSALS so logged), prepares the
 * refusal in @in->answer, whose reason is @there (what the dialler logs;
 * NULL: the line itself), and sets @in->refused. Returns -1,
 * raft_uv_handshake_check's "refused". Loop thread. */
int raft_uv_handshake_refuse(struct raft_uv_in *in, unsigned verdict,
                             const char *there, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* raft_uv_handshake_answer_encode writes the answer @verdict (enum
 * raft_uv_verdict) of the server @id of cluster @cluster_id
 * (RAFT_UV_CLUSTER_ID_LEN bytes, zero for none) into @a, which holds
 * RAFT__UV_ANSWER_MAX bytes, with @reason (printable ASCII, cut at 255
 * bytes; "" for an acceptance). Returns its length. Pure; any thread. */
size_t raft_uv_handshake_answer_encode(uint8_t *a, unsigned verdict,
                                       const uint8_t *cluster_id, raft_id id,
                                       const char *reason);

/* What an acceptor's answer says. */
struct raft_uv_answer {
    unsigned verdict;                           /* enum raft_uv_verdict */
    unsigned wire_min;                          /* its lowest wire version */
    unsigned wire_max;                          /* its highest */
    uint8_t cluster_id[RAFT_UV_CLUSTER_ID_LEN]; /* its cluster id, zero for
                                                   none */
    raft_id id;                                 /* its server id */
    char reason[256];                           /* a refusal's reason */
};

/* raft_uv_handshake_answer_need returns how many bytes the answer whose
 * first @got bytes are at @a has in all: RAFT__UV_ANSWER_FIXED until that
 * many arrived, then with its reason. Pure. */
size_t raft_uv_handshake_answer_need(const uint8_t *a, size_t got);

/* raft_uv_handshake_answer_decode decodes the complete answer at @a (@len
 * bytes, as raft_uv_handshake_answer_need says) into @out. Returns false,
 * with why in @errmsg (@errmsg_len bytes), for a wrong length or magic,
 * another handshake version, an unknown verdict, an empty wire range or a
 * reason that is not printable ASCII. Pure; any thread. */
bool raft_uv_handshake_answer_decode(const uint8_t *a, size_t len,
                                     struct raft_uv_answer *out, char *errmsg,
                                     size_t errmsg_len);

/* raft_uv_handshake_on_answer takes the @n bytes at @p read on @out's
 * connection (the plaintext under TLS): while it waits for the answer to its handshake
 * (HANDSHAKING) they are that answer, and once it is complete an
 * acceptance from the server dialled, whose wire versions meet ours,
 * makes @out CONNECTED in the highest version both speak (logged at
 * INFO); a refusal (logged at WARN, once until it changes), a bad answer
 * or any other bytes fail the connection (re-dialled after the backoff).
 * Loop thread. */
void raft_uv_handshake_on_answer(struct raft_uv_out *out, const uint8_t *p,
                                 size_t n);

/* raft_uv_tcp_learn dials back server @id, not a peer yet, whose verified
 * handshake advertised listen address @address ("host:port", address.h;
 * a hostname is resolved as for any peer): it becomes a peer of @t, so
 * this server can answer it (a joining server, or a leader this server
 * does not know yet). When the join= probe (RAFT_UV_PROBE_ID) is
 * connected to @id itself, the probe becomes that peer, at @address, and
 * keeps its connection: no second one reaches @id. Returns the peer, or
 * NULL (logged) when
 * @address does not parse or @t holds RAFT_MAX_SERVERS peers already.
 * Loop thread. */
struct raft_uv_out *raft_uv_tcp_learn(struct raft_uv_transport *t, raft_id id,
                                      const char *address);

/* raft_uv_send_handshake queues the handshake on the freshly connected
 * @out->conn. Returns 0, RAFT_NOMEM, or RAFT_IOERR (uv_write failed; the
 * caller fails the connection). Loop thread. */
int raft_uv_send_handshake(struct raft_uv_out *out);

/* raft_uv_send_flush hands every frame held for a peer of @t to libuv,
 * one write (one writev) per peer. Called by the transport's prepare and
 * check handles, so frames sent during one loop iteration leave together
 * before the loop blocks again. A peer not connected drops its frames.
 * Loop thread. */
void raft_uv_send_flush(struct raft_uv_transport *t);

/* raft_uv_send_drop frees the frames held for @out (its connection failed
 * or the transport closes; Raft tolerates the loss). Loop thread. */
void raft_uv_send_drop(struct raft_uv_out *out);

/* raft_uv_send_cipher hands the ciphertext pending in the TLS session of
 * @out->conn to libuv in one write, whose completion settles @plain_len
 * bytes of @out->queued_bytes (the frames it encrypts). Returns 0, or
 * RAFT_NOMEM or RAFT_IOERR (@plain_len settled at once; the caller fails
 * the connection). Loop thread. */
int raft_uv_send_cipher(struct raft_uv_out *out, uint64_t plain_len);

/* raft_uv_recv_start starts reading handshake and frames on the accepted
 * connection @in. Returns 0 or RAFT_IOERR (the caller closes @in). Loop
 * thread. */
int raft_uv_recv_start(struct raft_uv_in *in);

/* raft_uv_recv_consume feeds the @n bytes at @p, the next bytes read on
 * the accepted connection @in, through its receive state machine:
 * handshake, then length prefix and body of each frame; each complete
 * frame is decoded, checked against the handshake's sender and this
 * server, and handed to the transport's recv_cb. Bytes may split the
 * stream anywhere. It does no I/O and never closes @in itself: it returns
 * false (after logging a WARN or ERROR line naming the connection) when
 * the caller must close @in, and then nothing more may be fed to it; true
 * otherwise, also when the callback closed @in or the transport (the rest
 * of the bytes is then ignored). @in->body, when not NULL, is freed by
 * whoever frees @in. Loop thread (the fuzz target calls it on a
 * connection of its own, without a loop). */
bool raft_uv_recv_consume(struct raft_uv_in *in, const uint8_t *p, size_t n);

/* ---- TLS beneath the transport (uv_tls_stream.c) -------------------- */

/* raft_uv_tls_stream_setup makes @t carry its connections in TLS with
 * the credentials @tls (borrowed), allocating its TLS buffers (freed with
 * @t: t->tls_plain). Errors: RAFT_NOMEM (@errmsg says so). Before the
 * transport's first dial. */
int raft_uv_tls_stream_setup(struct raft_uv_transport *t,
                             struct raft_uv_tls *tls, char *errmsg,
                             size_t errmsg_len);

/* raft_uv_tls_stream_out_start starts the TLS handshake of @out's freshly
 * connected connection as a client: @out becomes SECURING and the
 * ClientHello goes out (the caller re-arms the connect timer as the
 * handshake's timeout). Returns 0, or RAFT_NOMEM or RAFT_IOERR after
 * logging it (the caller fails the connection). Loop thread. */
int raft_uv_tls_stream_out_start(struct raft_uv_out *out);

/* raft_uv_tls_stream_out_read feeds the @n ciphertext bytes at @p read on
 * @out's connection to its session: the TLS handshake advances, and once
 * it is done and the server's certificate names @out->identity the raft
 * handshake goes out (raft_uv_tcp_out_handshake); plaintext goes to
 * raft_uv_handshake_on_answer. A TLS failure or an identity mismatch logs
 * one WARN (the same one once per RAFT__UV_TLS_WARN_MS) and fails the
 * connection. Loop thread. */
void raft_uv_tls_stream_out_read(struct raft_uv_out *out, const uint8_t *p,
                                 size_t n);

/* raft_uv_tls_stream_in_start gives the accepted connection @in its TLS
 * server session. Returns 0 or RAFT_NOMEM (the caller closes @in). Loop
 * thread. */
int raft_uv_tls_stream_in_start(struct raft_uv_in *in);

/* raft_uv_tls_stream_in_read feeds the @n ciphertext bytes at @p read on
 * @in to its session, sends what the TLS handshake answers, and hands the
 * plaintext to raft_uv_recv_consume; when that refuses, it sets
 * @in->refused and feeds no more (the caller sends the answer, if any,
 * and closes: raft_uv_send_answer). Returns false (logged) when the
 * caller must close @in at once: a TLS failure (a WARN, the same one from
 * one address once per RAFT__UV_TLS_WARN_MS) or the peer closing the
 * session; a handshake of uv.h in the clear (a dialler without TLS) is
 * that WARN too, but gets a refusal written in the clear, and @in closes
 * once it is written (returns true, unless it cannot be written). Loop
 * thread. */
bool raft_uv_tls_stream_in_read(struct raft_uv_in *in, const uint8_t *p,
                                size_t n);

/* raft_uv_tls_stream_in_answer encrypts the pending answer of @in
 * (@in->answer_len > 0, then 0) and writes the ciphertext; once it is
 * written @in closes if it was refused. A failure closes @in at once.
 * Loop thread. */
void raft_uv_tls_stream_in_answer(struct raft_uv_in *in);

/* raft_uv_tls_stream_identity applies the identity rule to server @id,
 * whose complete handshake arrived on @in: with certificates, the client
 * certificate of @in must name the host of its address: @out's identity
 * when it is a peer (@out not NULL), else the host of @address, the
 * listen address its handshake gives (raft/address.h). Returns 0 when it
 * does, or without TLS, or with a PSK that was used; -1 after refusing
 * the handshake (raft_uv_handshake_refuse, verdict RAFT__UV_REFUSED_ID:
 * the line names the server, the host and the names the certificate
 * holds). Loop thread (uv_handshake.c calls it before any dial-back). */
int raft_uv_tls_stream_identity(struct raft_uv_in *in, raft_id id,
                                const struct raft_uv_out *out,
                                const char *address);

/* raft_uv_tls_stream_check runs raft_uv_tls_check once every
 * RAFT_UV_TLS_CHECK_MS (called by every sweep) and logs a reload at INFO,
 * a failed one at WARN. Loop thread. */
void raft_uv_tls_stream_check(struct raft_uv_transport *t);

#endif /* RAFT_UV_INTERNAL_H */
