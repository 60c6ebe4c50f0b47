/* TLS beneath the transport: each connection's session (uv_tls.h) driven
 * from the libuv callbacks of uv_tcp.c, uv_accept.c and uv_recv.c, and
 * the identity rule. Without TLS nothing here runs.
 *
 * Happy path: a completed dial starts a client session (ClientHello) and
 * its connection is SECURING; the server's answer is fed in as it is
 * read, and once the handshake is done and the server's certificate
 * names the host of the member's address in the configuration, the
 * connection is HANDSHAKING: the handshake of uv.h goes out inside TLS
 * (uv_send.c encrypts every write) and the plaintext that comes back is
 * its answer (uv_handshake.c), which makes it CONNECTED. An accepted
 * connection gets a server session; what it reads is decrypted and fed
 * to raft_uv_recv_consume, the handshake it carries is checked against
 * the client's certificate (raft_uv_tls_stream_identity) before its
 * sender is dialled back or any frame is taken, and the answer goes back
 * encrypted (raft_uv_tls_stream_in_answer).
 * Every RAFT_UV_TLS_CHECK_MS the certificate files are stat'ed and
 * reloaded when they changed; new connections take the new context.
 *
 * Failure modes: a TLS handshake that fails (no certificate, an untrusted
 * or expired one, the wrong secret), a server's identity mismatch, or a
 * record that does not decrypt close that connection only, with one WARN
 * line (the same failure of one peer or address is logged once per
 * RAFT__UV_TLS_WARN_MS, then with the count held back); the dialler
 * re-dials with its backoff. A dialler without TLS, whose handshake
 * comes in the clear, is answered in the clear with a refusal it logs. A client's identity mismatch is a refusal
 * of its handshake, logged and answered as the others
 * (raft_uv_handshake_refuse). A TLS handshake not done within
 * RAFT__UV_CONNECT_TIMEOUT_MS (dialler) or RAFT__UV_HANDSHAKE_TIMEOUT_MS
 * (acceptor, the sweep) closes the connection. */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uv_internal.h"

/* fnv1a returns the FNV-1a hash of @s. */
static uint64_t fnv1a(const char *s)
{
    uint64_t h = 14695981039346656037ull;

    for (; *s != '\0'; s++) {
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    }
    return h;
}

/* warn logs "@fmt...: @reason" at WARN, unless the same @reason about
 * @key was logged less than RAFT__UV_TLS_WARN_MS ago (then it is counted,
 * and said with the next line logged). */
static void warn(struct raft_uv_transport *t, const char *key,
                 const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void warn(struct raft_uv_transport *t, const char *key,
                 const char *reason, const char *fmt, ...)
{
    uint64_t now = uv_now(t->loop);
    uint64_t hash = fnv1a(reason);
    struct raft_uv_warned *w = NULL;
    char line[400];
    va_list ap;

    for (unsigned i = 0; i < RAFT__UV_TLS_WARNED && w == NULL; i++) {
        if (strncmp(t->warned[i].key, key, sizeof t->warned[i].key - 1) == 0) {
            w = &t->warned[i];
        }
    }
    if (w != NULL && w->hash == hash && now - w->at < RAFT__UV_TLS_WARN_MS) {
        w->n_held++;
        return;
    }
    if (w == NULL) { /* a free slot, else the oldest */
        w = &t->warned[0];
        for (unsigned i = 1; i < RAFT__UV_TLS_WARNED; i++) {
            if (t->warned[i].at < w->at) {
                w = &t->warned[i];
            }
        }
        memset(w, 0, sizeof *w);
        snprintf(w->key, sizeof w->key, "%s", key);
    }
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (w->n_held > 0 && w->hash == hash) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "%s: %s (and %u times more in the last %d s)", line,
                        reason, w->n_held, RAFT__UV_TLS_WARN_MS / 1000);
    } else {
        raft_uv_tcp_log(t, RAFT_LOG_WARN, "%s: %s", line, reason);
    }
    w->hash = hash;
    w->at = now;
    w->n_held = 0;
}

int raft_uv_tls_stream_setup(struct raft_uv_transport *t,
                             struct raft_uv_tls *tls, char *errmsg,
                             size_t errmsg_len)
{
    /* One allocation: plaintext read, then frames coalesced. */
    t->tls_plain = malloc(2 * RAFT__UV_TLS_RECORD);
    if (t->tls_plain == NULL) {
        raft_errmsgf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    t->tls_stage = t->tls_plain + RAFT__UV_TLS_RECORD;
    t->tls = tls;
    return 0;
}

/* ---- Outgoing connections: the TLS client ------------------------------ */

int raft_uv_tls_stream_out_start(struct raft_uv_out *out)
{
    struct raft_uv_conn *conn = out->conn;
    bool done;
    int rc;

    rc = raft_uv_tls_session_new(out->t->tls, true, &conn->tls);
    if (rc == 0) {
        out->state = RAFT__UV_SECURING;
        rc = raft_uv_tls_session_handshake(conn->tls, &done);
        if (rc != 0) {
            raft_uv_tcp_log(out->t, RAFT_LOG_WARN, "%s: TLS start: %s",
                            out->name, raft_uv_tls_session_error(conn->tls));
            return rc;
        }
        return raft_uv_send_cipher(out, 0); /* logs its failure */
    }
    raft_uv_tcp_log(out->t, RAFT_LOG_ERROR, "%s: TLS start: %s", out->name,
                    raft_strerror(rc));
    return rc;
}

/* secured applies the identity rule to the server @out reached, then
 * sends it the handshake. Returns false when @out's connection failed. */
static bool secured(struct raft_uv_out *out)
{
    struct raft_uv_conn *conn = out->conn;
    char names[256];
    char how[128];

    if (raft_uv_tls_session_check_host(conn->tls, out->identity, names,
                                       sizeof names)) {
        raft_uv_tls_session_describe(conn->tls, how, sizeof how);
        raft_uv_tcp_log(out->t, RAFT_LOG_DEBUG, "%s: TLS established (%s)",
                        out->name, how);
        raft_uv_tcp_out_handshake(out);
        return out->conn == conn;
    }
    if (raft_uv_tls_mode(out->t->tls) == RAFT_UV_TLS_PSK) {
        warn(out->t, out->name, "it showed a certificate instead",
             "%s: refused: the server did not use the pre-shared secret",
             out->name);
    } else {
        warn(out->t, out->name, names,
             "%s: refused: its certificate does not name %s, the host of "
             "server %llu's address in the configuration; it holds",
             out->name, out->identity, (unsigned long long)out->id);
    }
    raft_uv_tcp_out_fail(out);
    return false;
}

void raft_uv_tls_stream_out_read(struct raft_uv_out *out, const uint8_t *p,
                                 size_t n)
{
    struct raft_uv_conn *conn = out->conn;
    struct raft_uv_transport *t = out->t;
    bool securing = out->state == RAFT__UV_SECURING;
    bool done = false;
    size_t got;
    int rc;

    rc = raft_uv_tls_session_feed(conn->tls, p, n);
    if (rc == 0 && securing) {
        rc = raft_uv_tls_session_handshake(conn->tls, &done);
        if (rc == 0 && done && !secured(out)) {
            return;
        }
    }
    while (rc == 0 && out->conn == conn &&
           (out->state == RAFT__UV_HANDSHAKING ||
            out->state == RAFT__UV_CONNECTED)) {
        rc = raft_uv_tls_session_read(conn->tls, t->tls_plain,
                                      RAFT__UV_TLS_RECORD, &got);
        if (rc != 0 || got == 0) {
            break;
        }
        raft_uv_handshake_on_answer(out, t->tls_plain, got);
    }
    if (out->conn != conn) {
        return; /* failed meanwhile, and logged */
    }
    if (rc != 0) {
        warn(t, out->name, raft_uv_tls_session_error(conn->tls),
             "%s: TLS%s failed (closing)", out->name,
             securing && !done ? " handshake" : "");
        raft_uv_send_cipher(out, 0); /* the alert that says why, if any */
        raft_uv_tcp_out_fail(out);
        return;
    }
    if (raft_uv_send_cipher(out, 0) != 0) {
        raft_uv_tcp_out_fail(out);
    }
}

/* ---- Accepted connections: the TLS server ------------------------------ */

/* A block of ciphertext written on an accepted connection. */
struct in_write {
    uv_write_t req;        /* req.data is this block */
    struct raft_uv_in *in; /* the connection */
    bool closes;           /* it carries a refusal: @in closes once it is
                              written */
    uint8_t bytes[];       /* the ciphertext, or a refusal in the clear */
};

static void on_in_write(uv_write_t *req, int status)
{
    struct in_write *w = req->data;

    /* Invariant: libuv runs write callbacks before the close callback
     * that frees @w->in. */
    if (status < 0 && status != UV_ECANCELED && !w->in->closing) {
        raft_uv_tcp_log(w->in->t, RAFT_LOG_DEBUG, "%s: write: %s", w->in->name,
                        uv_strerror(status));
        raft_uv_tcp_in_close(w->in);
    } else if (w->closes) {
        raft_uv_tcp_in_close(w->in);
    }
    free(w);
}

/* in_write writes the @n bytes at @p on @in (NULL: @n bytes taken from
 * what its session has to send), and closes @in once they are written
 * when @closes. Returns false when it cannot (the caller closes @in). */
static bool in_write(struct raft_uv_in *in, const uint8_t *p, size_t n,
                     bool closes)
{
    struct in_write *w = malloc(sizeof *w + n);
    uv_buf_t buf;
    int rv;

    if (w == NULL) {
        raft_uv_tcp_log(in->t, RAFT_LOG_ERROR, "%s: out of memory: closing",
                        in->name);
        return false;
    }
    if (p != NULL) {
        memcpy(w->bytes, p, n);
    } else {
        raft_uv_tls_session_take(in->tls, w->bytes, n);
    }
    w->req.data = w;
    w->in = in;
    w->closes = closes;
    buf = uv_buf_init((char *)w->bytes, (unsigned)n);
    rv = uv_write(&w->req, (uv_stream_t *)&in->tcp, &buf, 1, on_in_write);
    if (rv != 0) {
        raft_uv_tcp_log(in->t, RAFT_LOG_INFO, "%s: write: %s: closing",
                        in->name, uv_strerror(rv));
        free(w);
        return false;
    }
    return true;
}

/* in_send writes what @in's session has to send, and closes @in once it
 * is written when @closes. Returns false when it cannot (the caller
 * closes @in). */
static bool in_send(struct raft_uv_in *in, bool closes)
{
    size_t n = raft_uv_tls_session_pending(in->tls);

    if (n == 0) {
        if (closes) {
            raft_uv_tcp_in_close(in);
        }
        return true;
    }
    return in_write(in, NULL, n, closes);
}

/* refuse_clear answers @in, whose first bytes are the handshake of uv.h
 * in the clear, with a refusal in the clear, which the dialler logs
 * ("refused us: it takes peers over TLS only ..."; it names neither this
 * server nor its cluster: the peer is not authenticated), reads no more
 * of it and closes it once written. Returns false when it cannot write
 * (the caller closes @in). */
static bool refuse_clear(struct raft_uv_in *in)
{
    static const uint8_t none[RAFT_UV_CLUSTER_ID_LEN];
    uint8_t a[RAFT__UV_ANSWER_MAX];
    size_t n = raft_uv_handshake_answer_encode(
        a, RAFT__UV_REFUSED_HANDSHAKE, none, 0,
        "it takes peers over TLS only (tls_cert= or secret_file=), we run "
        "without");

    uv_read_stop((uv_stream_t *)&in->tcp);
    return in_write(in, a, n, true);
}

int raft_uv_tls_stream_in_start(struct raft_uv_in *in)
{
    return raft_uv_tls_session_new(in->t->tls, false, &in->tls);
}

/* remote_key writes @in's name without its port into @key (@len bytes):
 * failures are counted per remote address, not per connection. */
static void remote_key(const struct raft_uv_in *in, char *key, size_t len)
{
    const char *colon = strrchr(in->name, ':');
    int n = colon != NULL ? (int)(colon - in->name) : (int)strlen(in->name);

    snprintf(key, len, "%.*s", n, in->name);
}

bool raft_uv_tls_stream_in_read(struct raft_uv_in *in, const uint8_t *p,
                                size_t n)
{
    struct raft_uv_transport *t = in->t;
    bool was_done = in->tls_done;
    char key[96];
    size_t got;
    int rc;

    rc = raft_uv_tls_session_feed(in->tls, p, n);
    if (rc == 0 && !in->tls_done) {
        rc = raft_uv_tls_session_handshake(in->tls, &in->tls_done);
        if (rc == 0 && in->tls_done) {
            char how[128];
            raft_uv_tls_session_describe(in->tls, how, sizeof how);
            raft_uv_tcp_log(t, RAFT_LOG_DEBUG, "%s: TLS established (%s)",
                            in->name, how);
        }
    }
    while (rc == 0 && in->tls_done) {
        rc = raft_uv_tls_session_read(in->tls, t->tls_plain,
                                      RAFT__UV_TLS_RECORD, &got);
        if (rc != 0 || got == 0) {
            break;
        }
        if (!raft_uv_recv_consume(in, t->tls_plain, got)) {
            in->refused = true; /* a refusal, if any, goes out first */
            break;
        }
        if (in->closing || t->closing) {
            return true;
        }
    }
    if (rc == RAFT_NOCONN) {
        raft_uv_tcp_log(t, RAFT_LOG_INFO, "%s: %s: closing", in->name,
                        raft_uv_tls_session_error(in->tls));
        return false;
    }
    if (rc != 0) {
        /* A peer without TLS starts with the handshake of uv.h. */
        bool clear = !was_done && n >= RAFT__UV_MAGIC_LEN &&
                     memcmp(p, RAFT__UV_MAGIC, RAFT__UV_MAGIC_LEN) == 0;
        remote_key(in, key, sizeof key);
        warn(t, key,
             clear ? "a raftsql handshake in the clear: the peer runs "
                     "without TLS (no tls_cert= nor secret_file=)"
                   : raft_uv_tls_session_error(in->tls),
             "%s: TLS%s failed (closing)", in->name,
             was_done ? "" : " handshake");
        if (clear) {
            return refuse_clear(in);
        }
        in_send(in, false); /* the alert that says why, if any */
        return false;
    }
    return in_send(in, false);
}

void raft_uv_tls_stream_in_answer(struct raft_uv_in *in)
{
    int rc = raft_uv_tls_session_write(in->tls, in->answer, in->answer_len);

    in->answer_len = 0;
    if (rc != 0) {
        raft_uv_tcp_log(in->t, RAFT_LOG_WARN, "%s: TLS write: %s: closing",
                        in->name, raft_uv_tls_session_error(in->tls));
        raft_uv_tcp_in_close(in);
    } else if (!in_send(in, in->refused)) {
        raft_uv_tcp_in_close(in);
    }
}

int raft_uv_tls_stream_identity(struct raft_uv_in *in, raft_id id,
                                const struct raft_uv_out *out,
                                const char *address)
{
    struct raft_address a;
    char names[256];
    char there[RAFT__UV_REFUSAL_LEN];
    const char *host;
    const char *where =
        out != NULL ? "in the configuration" : "in its handshake";

    if (in->tls == NULL) {
        return 0;
    }
    if (out != NULL) {
        host = out->identity;
    } else if (address[0] != '\0' &&
               raft_address_parse(address, &a, NULL, 0) == 0) {
        host = a.host;
    } else {
        return raft_uv_handshake_refuse(
            in, RAFT__UV_REFUSED_ID, NULL,
            "refused: server %llu is no peer and its handshake gives no "
            "listen address to check its certificate against",
            (unsigned long long)id);
    }
    if (raft_uv_tls_session_check_host(in->tls, host, names, sizeof names)) {
        return 0;
    }
    /* (An answer's reason holds 255 bytes: long lists are cut.) */
    snprintf(there, sizeof there,
             "its certificate does not name %.64s, the host of server "
             "%llu's address %s (it holds: %.100s)",
             host, (unsigned long long)id, where, names);
    return raft_uv_handshake_refuse(
        in, RAFT__UV_REFUSED_ID, there,
        "refused: server %llu's certificate does not name %s, the host of "
        "its address %s; it holds: %s",
        (unsigned long long)id, host, where, names);
}

void raft_uv_tls_stream_check(struct raft_uv_transport *t)
{
    char msg[1024];
    int rc;

    if (t->tls == NULL ||
        ++t->n_sweeps % (RAFT_UV_TLS_CHECK_MS / RAFT__UV_SWEEP_MS) != 0) {
        return;
    }
    rc = raft_uv_tls_check(t->tls, msg, sizeof msg);
    if (rc != 0) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "tls: the certificate files changed but do not "
                        "load: %s (the previous ones stay in use)",
                        msg);
    } else if (msg[0] != '\0') {
        raft_uv_tcp_log(t, RAFT_LOG_INFO,
                        "tls: the certificate files changed: %s (new "
                        "connections use them)",
                        msg);
    }
}
