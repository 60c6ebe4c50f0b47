/* Private state of the libuv TCP transport (uv.h), shared by uv_tcp.c
 * (listening, dialling, backoff, peers, close), uv_accept.c (accepting),
 * uv_send.c (ordered writes to peers), uv_recv.c (frame reassembly and
 * decoding) and uv_tls_stream.c (TLS beneath all of it, uv_tls.h). */

#ifndef RAFT_UV_INTERNAL_H
#define RAFT_UV_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "logging.h"
#include "raft.h"
#include "uv.h"
#include "uv_tls.h"

/* Handshake (layout in uv.h): magic, handshake version u8, wire version
 * u8, sender id u64 little-endian, build id length u8, build id, listen
 * address length u8, listen address. */
#define RAFT__UV_MAGIC "RFTSQL"
#define RAFT__UV_MAGIC_LEN 6
#define RAFT__UV_HANDSHAKE_VERSION 3
/* Bytes up to and including the two version bytes. */
#define RAFT__UV_HANDSHAKE_VERSIONS (RAFT__UV_MAGIC_LEN + 2)
/* Bytes before the build id. */
#define RAFT__UV_HANDSHAKE_FIXED (RAFT__UV_HANDSHAKE_VERSIONS + 8 + 1)
/* Longest listen address a handshake carries ("host:port"), bytes. */
#define RAFT__UV_ADDRESS_MAX 63
/* Longest handshake. */
#define RAFT__UV_HANDSHAKE_MAX                                                 \
    (RAFT__UV_HANDSHAKE_FIXED + RAFT_UV_BUILD_ID_MAX + 1 + RAFT__UV_ADDRESS_MAX)

/* Reconnect backoff: first delay, and the ceiling it doubles up to. */
#define RAFT__UV_BACKOFF_MIN_MS 100
#define RAFT__UV_BACKOFF_MAX_MS 2000

/* A dial that has not completed after this long is abandoned and retried. */
#define RAFT__UV_CONNECT_TIMEOUT_MS 3000

/* Most bytes queued (written but not yet completed) to one peer. */
#define RAFT__UV_MAX_QUEUED ((uint64_t)64 << 20)

/* Size of the read buffer of an accepted connection. */
#define RAFT__UV_READ_BUF 65536

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
    RAFT__UV_WAITING = 1,   /* no connection, backoff timer running */
    RAFT__UV_DIALLING = 2,  /* connect in progress */
    RAFT__UV_CONNECTED = 3, /* handshake queued, messages may be sent */
    RAFT__UV_SECURING = 4,  /* connected, TLS handshake in progress */
};

struct raft_uv_out;
struct raft_uv_write;

/* One outgoing TCP connection (one dial attempt). Freed in its close
 * callback, which libuv runs after the connect and write callbacks. */
struct raft_uv_conn {
    uv_tcp_t tcp;                    /* the socket; tcp.data is this conn */
    uv_connect_t connect;            /* the dial request */
    struct raft_uv_out *out;         /* peer this connection belongs to */
    struct raft_uv_tls_session *tls; /* its TLS client session, NULL
                                        without TLS */
    char rbuf[4096];                 /* incoming bytes: TLS records, or
                                        unexpected ones */
};

/* The sending side towards one peer, allocated on its own: a peer removed
 * (raft_uv_transport_remove_peer) is retired and freed once its timer and
 * connection are closed (@refs).
 * Invariant: @conn != NULL iff @state is DIALLING, SECURING or
 * CONNECTED. */
struct raft_uv_out {
    struct raft_uv_transport *t; /* owner */
    raft_id id;                  /* the peer's server id */
    struct sockaddr_in addr;     /* where it listens */
    char name[96];               /* "peer 2 (127.0.0.1:7002)", for logs */
    char identity[RAFT__UV_ADDRESS_MAX + 1]; /* host its certificate must
                                    name (raft_uv_peer.identity) */
    int state;                               /* enum raft_uv_out_state */
    struct raft_uv_conn *conn;               /* current connection, or NULL */
    uv_timer_t timer;                        /* backoff and connect timeout */
    unsigned backoff_ms;                     /* delay before the next re-dial */
    uint64_t queued_bytes; /* bytes held or in uv_write, not yet
                                    completed */
    struct raft_uv_write *pend[RAFT__UV_CORK_MAX]; /* frames held for the
                                    next flush, in send order */
    unsigned n_pend;                               /* frames at @pend */
    bool build_known;                              /* @build_id is set */
    char build_id[RAFT_UV_BUILD_ID_MAX + 1];       /* the build id of the
                                    peer's latest handshake */
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
    uv_tcp_t tcp;                       /* tcp.data is this struct */
    struct raft_uv_transport *t;        /* owner */
    struct raft_uv_in *prev;            /* list of accepted conns */
    struct raft_uv_in *next;            /* list of accepted conns */
    char name[96];                      /* "peer 2 (addr)", for logs */
    raft_id peer;                       /* sender id, 0 before handshake */
    bool closing;                       /* uv_close called */
    int stage;                          /* enum raft_uv_in_stage */
    uint8_t hs[RAFT__UV_HANDSHAKE_MAX]; /* handshake bytes so far */
    size_t hs_got;                      /* bytes of @hs received */
    uint8_t hdr[4];                     /* length prefix so far */
    size_t hdr_got;                     /* bytes of @hdr received */
    uint8_t *body;                      /* frame body being assembled */
    size_t body_len;                    /* announced body length */
    size_t body_got;                    /* bytes of the body received */
    size_t body_cap;                    /* bytes allocated at @body */
    uint64_t accepted_at;               /* loop clock at accept, ms */
    uint64_t last_read_at;              /* loop clock of the last bytes
                                              read, ms */
    struct raft_uv_tls_session *tls;    /* its TLS server session, NULL
                                           without TLS */
    bool tls_done;                      /* its TLS handshake completed */
    char rbuf[RAFT__UV_READ_BUF];       /* libuv reads land here */
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
    char build_id[RAFT_UV_BUILD_ID_MAX + 1]; /* this server's build id */
    uint64_t max_frame_bytes;                /* bound on one frame body */
    raft_uv_recv_cb recv_cb;                 /* receive callback */
    raft_log_cb log_cb;                      /* log sink, may be NULL */
    void *data;                              /* passed to the callbacks */
    uv_tcp_t listener;                       /* the listening socket */
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
    uv_timer_t sweep;         /* closes stalled connections */
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

/* raft_uv_tcp_dial starts one connection attempt to @out, or schedules a
 * retry (uv_tcp.c). Loop thread. */
void raft_uv_tcp_dial(struct raft_uv_out *out);

/* raft_uv_tcp_out_connected marks @out connected (its TLS handshake done
 * when there is TLS, described by @how, NULL without), stops its connect
 * timer, queues the handshake and logs it; a failure to queue fails the
 * connection. Loop thread. */
void raft_uv_tcp_out_connected(struct raft_uv_out *out, const char *how);

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
 * for RAFT__UV_STALL_TIMEOUT_MS) and logs the refused ones. */
void raft_uv_accept_sweep(uv_timer_t *timer);

/* raft_uv_tcp_find returns the peer @id of @t, or NULL when unknown. */
struct raft_uv_out *raft_uv_tcp_find(const struct raft_uv_transport *t,
                                     raft_id id);

/* raft_uv_send_handshake_encode writes the handshake of server @self with
 * build id @build_id (NUL-terminated, at most RAFT_UV_BUILD_ID_MAX bytes,
 * as the transport checked it) and listen address @address ("host:port",
 * at most RAFT__UV_ADDRESS_MAX bytes) into @out and returns its length (at
 * most RAFT__UV_HANDSHAKE_MAX bytes). Pure; any thread. */
size_t raft_uv_send_handshake_encode(raft_id self, const char *build_id,
                                     const char *address,
                                     uint8_t out[RAFT__UV_HANDSHAKE_MAX]);

/* raft_uv_tcp_learn dials back server @id, not a peer yet, whose verified
 * handshake advertised listen address @address ("host:port"): it becomes
 * a peer of @t, so this server can answer it (a joining server, or a
 * leader this server does not know yet). Returns the new peer, or NULL
 * (logged) when @address is not a numeric IPv4 host:port or @t holds
 * RAFT_MAX_SERVERS peers already. Loop thread. */
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

/* raft_uv_recv_out_bytes takes the @n bytes at @p that the peer sent on
 * @out's outgoing connection (plaintext under TLS): the peer never sends
 * on it, so they fail the connection with a WARN. Loop thread. */
void raft_uv_recv_out_bytes(struct raft_uv_out *out, const uint8_t *p,
                            size_t n);

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
 * @out's connection to its session: the handshake advances, and once it
 * is done and the server's certificate names @out->identity @out is
 * connected (raft_uv_tcp_out_connected); plaintext goes to
 * raft_uv_recv_out_bytes. A TLS failure or an identity mismatch logs one
 * WARN (the same one once per RAFT__UV_TLS_WARN_MS) and fails the
 * connection. Loop thread. */
void raft_uv_tls_stream_out_read(struct raft_uv_out *out, const uint8_t *p,
                                 size_t n);

/* raft_uv_tls_stream_in_start gives the accepted connection @in its TLS
 * server session. Returns 0 or RAFT_NOMEM (the caller closes @in). Loop
 * thread. */
int raft_uv_tls_stream_in_start(struct raft_uv_in *in);

/* raft_uv_tls_stream_in_read feeds the @n ciphertext bytes at @p read on
 * @in to its session, sends what the handshake answers, and hands the
 * plaintext to raft_uv_recv_consume. Returns false (logged) when the
 * caller must close @in: a TLS failure (a WARN, the same one from one
 * address once per RAFT__UV_TLS_WARN_MS), the peer closing the session,
 * or raft_uv_recv_consume's refusal. Loop thread. */
bool raft_uv_tls_stream_in_read(struct raft_uv_in *in, const uint8_t *p,
                                size_t n);

/* raft_uv_tls_stream_identity applies the identity rule to server @id,
 * whose handshake arrived on @in: with certificates, the client
 * certificate of @in must name the host of its address: @out's identity
 * when it is a peer (@out not NULL), else the host of @address, the
 * listen address its handshake gives. Returns true when it does, or
 * without TLS or with a PSK; false after one WARN naming the server, the
 * host and the names the certificate holds (the caller refuses the
 * handshake). Loop thread. */
bool raft_uv_tls_stream_identity(struct raft_uv_in *in, raft_id id,
                                 const struct raft_uv_out *out,
                                 const char *address);

/* raft_uv_tls_stream_check runs raft_uv_tls_check once every
 * RAFT_UV_TLS_CHECK_MS (called by every sweep) and logs a reload at INFO,
 * a failed one at WARN. Loop thread. */
void raft_uv_tls_stream_check(struct raft_uv_transport *t);

#endif /* RAFT_UV_INTERNAL_H */
