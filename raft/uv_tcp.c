/* The transport's connections: listening, dialling each peer with
 * backoff, peers added and removed at run time, and closing everything
 * (accepting is uv_accept.c's, resolving hostnames uv_resolve.c's).
 *
 * Happy path: raft_uv_transport_start binds and listens (an IPv4 or IPv6
 * literal, a wildcard included), then dials every peer: at its IP, or at
 * an IP its hostname resolves to, anew before each dial. A completed dial
 * sets TCP_NODELAY and keepalive and queues the handshake (uv_send.c),
 * which carries the advertised address (with TLS, once the TLS handshake
 * is done: uv_tls_stream.c); its acceptance marks the peer connected
 * (uv_handshake.c). Accepted connections read the peer's handshake and
 * frames (uv_recv.c).
 * raft_uv_transport_add_peer dials a new peer (or re-dials one at its new
 * address), raft_uv_tcp_learn one whose handshake arrived first (or
 * keeps the join= probe's connection when the probe reached that very
 * server);
 * raft_uv_transport_remove_peer closes a peer's connection and timer, and
 * the peer is freed once both are closed.
 *
 * Failure modes: a refused or timed-out dial, a failed or timed-out TLS
 * handshake or identity check, a refused or unanswered handshake, a write
 * error, EOF or stray bytes on an outgoing connection close it and
 * schedule a re-dial after 100 ms, doubling to 2 s, reset by an
 * acceptance. A bad handshake
 * or frame closes that accepted connection only. raft_uv_transport_close
 * closes the listener, every connection and every timer (pending writes
 * complete with UV_ECANCELED and are freed), then calls back once the last
 * close callback has run. */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "uv_internal.h"

/* Backlog of the listening socket. */
#define RAFT__UV_BACKLOG 128

void raft_uv_tcp_log(struct raft_uv_transport *t, int level, const char *fmt,
                     ...)
{
    char line[512];
    int n;
    va_list ap;

    if (t->log_cb == NULL) {
        return;
    }
    n = snprintf(line, sizeof line, "uv %llu: ", (unsigned long long)t->self);
    if (n < 0 || (size_t)n >= sizeof line) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    t->log_cb(t->data, level, line);
}

struct raft_uv_out *raft_uv_tcp_find(const struct raft_uv_transport *t,
                                     raft_id id)
{
    unsigned i;

    for (i = 0; i < t->n_outs; i++) {
        if (t->outs[i]->id == id) {
            return t->outs[i];
        }
    }
    return NULL;
}

/* out_unref drops one handle reference of @out, freeing a retired peer
 * once none is left. */
static void out_unref(struct raft_uv_out *out)
{
    out->refs--;
    if (out->retired && out->refs == 0) {
        free(out);
    }
}

/* handle_closed accounts for one closed handle and, once the transport is
 * closing and nothing is left open, frees it and calls the close cb. */
static void handle_closed(struct raft_uv_transport *t)
{
    void (*cb)(void *);
    void *data;

    /* Invariant: every close callback matches one initialized handle. */
    t->n_handles--;
    if (!t->closing || t->n_handles > 0) {
        return;
    }
    cb = t->close_cb;
    data = t->close_data;
    for (unsigned i = 0; i < t->n_outs; i++) {
        free(t->outs[i]);
    }
    free(t->tls_plain);
    free(t);
    if (cb != NULL) {
        cb(data);
    }
}

static void on_handle_closed(uv_handle_t *handle)
{
    handle_closed(handle->data);
}

static void on_timer_closed(uv_handle_t *handle)
{
    raft_uv_tcp_req_done(handle->data);
}

static void on_conn_closed(uv_handle_t *handle)
{
    struct raft_uv_conn *conn = handle->data;
    struct raft_uv_transport *t = conn->out->t;

    out_unref(conn->out);
    raft_uv_tls_session_free(conn->tls);
    free(conn);
    handle_closed(t);
}

static void on_in_closed(uv_handle_t *handle)
{
    struct raft_uv_in *in = handle->data;
    struct raft_uv_transport *t = in->t;

    if (in->peer == 0) {
        t->n_unverified--;
    }
    if (in->prev != NULL) {
        in->prev->next = in->next;
    } else {
        t->ins = in->next;
    }
    if (in->next != NULL) {
        in->next->prev = in->prev;
    }
    raft_buf_unref(in->body);
    raft_uv_tls_session_free(in->tls);
    free(in);
    handle_closed(t);
}

void raft_uv_tcp_in_close(struct raft_uv_in *in)
{
    if (in->closing) {
        return;
    }
    in->closing = true;
    uv_close((uv_handle_t *)&in->tcp, on_in_closed);
}

static void on_backoff(uv_timer_t *timer)
{
    struct raft_uv_out *out = timer->data;

    if (out->state == RAFT__UV_WAITING) {
        raft_uv_tcp_dial(out);
    } else if (out->state == RAFT__UV_DIALLING ||
               out->state == RAFT__UV_SECURING ||
               out->state == RAFT__UV_HANDSHAKING) {
        raft_uv_tcp_log(out->t, RAFT_LOG_INFO, "%s: %s after %d ms", out->name,
                        out->state == RAFT__UV_DIALLING ? "connect timed out"
                        : out->state == RAFT__UV_SECURING
                            ? "TLS handshake timed out"
                            : "no answer to our handshake",
                        RAFT__UV_CONNECT_TIMEOUT_MS);
        raft_uv_tcp_out_fail(out);
    }
}

void raft_uv_tcp_out_fail(struct raft_uv_out *out)
{
    struct raft_uv_transport *t = out->t;

    raft_uv_send_drop(out);
    if (out->conn != NULL) {
        uv_close((uv_handle_t *)&out->conn->tcp, on_conn_closed);
        out->conn = NULL;
    }
    if (t->closing) {
        return;
    }
    if (out->state == RAFT__UV_DIALLING) {
        out->pick++; /* a hostname's next IP, if it has several */
    }
    raft_uv_resolve_cancel(out);
    out->state = RAFT__UV_WAITING;
    raft_uv_tcp_retry(out, out->backoff_ms);
    out->backoff_ms *= 2;
    if (out->backoff_ms > RAFT__UV_BACKOFF_MAX_MS) {
        out->backoff_ms = RAFT__UV_BACKOFF_MAX_MS;
    }
}

void raft_uv_tcp_retry(struct raft_uv_out *out, unsigned delay_ms)
{
    uv_timer_start(&out->timer, on_backoff, delay_ms, 0);
    raft_uv_tcp_log(out->t, RAFT_LOG_DEBUG, "%s: re-dial in %u ms", out->name,
                    delay_ms);
}

void raft_uv_tcp_req_done(struct raft_uv_out *out)
{
    struct raft_uv_transport *t = out->t;

    out_unref(out);
    handle_closed(t);
}

static void on_out_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    struct raft_uv_conn *conn = handle->data;

    (void)suggested;
    buf->base = conn->rbuf;
    buf->len = sizeof conn->rbuf;
}

/* on_out_read watches an outgoing connection: the peer sends only the
 * answer to our handshake on it (uv_handshake.c), inside TLS records
 * under TLS (uv_tls_stream.c), so other bytes are a protocol error and
 * EOF or an error means it is gone. */
static void on_out_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct raft_uv_conn *conn = stream->data;
    struct raft_uv_out *out = conn->out;

    if (nread == 0 || out->conn != conn) {
        return;
    }
    if (nread > 0 && conn->tls != NULL) {
        raft_uv_tls_stream_out_read(out, (const uint8_t *)buf->base,
                                    (size_t)nread);
        return;
    }
    if (nread > 0) {
        raft_uv_handshake_on_answer(out, (const uint8_t *)buf->base,
                                    (size_t)nread);
        return;
    }
    raft_uv_tcp_log(out->t, RAFT_LOG_INFO, "%s: connection lost%s: %s",
                    out->name,
                    out->state == RAFT__UV_HANDSHAKING
                        ? " before the answer to our handshake"
                    : out->state == RAFT__UV_SECURING ? " in the TLS handshake"
                                                      : "",
                    uv_strerror((int)nread));
    raft_uv_tcp_out_fail(out);
}

static void on_connect(uv_connect_t *req, int status)
{
    struct raft_uv_conn *conn = req->data;
    struct raft_uv_out *out = conn->out;
    int rv;

    if (status == UV_ECANCELED || out->conn != conn) {
        return; /* closed under us; freed in on_conn_closed */
    }
    uv_timer_stop(&out->timer);
    if (status < 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_DEBUG, "%s: connect: %s", out->name,
                        uv_strerror(status));
        raft_uv_tcp_out_fail(out);
        return;
    }
    rv = uv_tcp_nodelay(&conn->tcp, 1);
    if (rv == 0) {
        rv = uv_tcp_keepalive(&conn->tcp, 1, RAFT__UV_KEEPALIVE_S);
    }
    if (rv == 0) {
        rv =
            uv_read_start((uv_stream_t *)&conn->tcp, on_out_alloc, on_out_read);
    }
    if (rv != 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN, "%s: setup: %s", out->name,
                        uv_strerror(rv));
        raft_uv_tcp_out_fail(out);
        return;
    }
    if (out->t->tls == NULL) {
        raft_uv_tcp_out_handshake(out);
        return;
    }
    /* TLS first (its failure logged), with a timeout of its own. */
    if (raft_uv_tls_stream_out_start(out) != 0) {
        raft_uv_tcp_out_fail(out);
        return;
    }
    uv_timer_start(&out->timer, on_backoff, RAFT__UV_CONNECT_TIMEOUT_MS, 0);
}

void raft_uv_tcp_out_handshake(struct raft_uv_out *out)
{
    out->state = RAFT__UV_HANDSHAKING;
    out->conn->answer_got = 0;
    if (raft_uv_send_handshake(out) != 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN, "%s: handshake write failed",
                        out->name);
        raft_uv_tcp_out_fail(out);
        return;
    }
    /* The answer completes the connection (uv_handshake.c). */
    uv_timer_start(&out->timer, on_backoff, RAFT__UV_CONNECT_TIMEOUT_MS, 0);
}

void raft_uv_tcp_dial(struct raft_uv_out *out)
{
    if (out->address.kind == RAFT_ADDRESS_NAME) {
        raft_uv_resolve_start(out);
        return;
    }
    /* Cannot fail: the address parsed as an IP literal. */
    raft_uv_resolve_numeric(out->address.host, out->address.port, &out->addr);
    raft_uv_tcp_connect(out);
}

void raft_uv_tcp_connect(struct raft_uv_out *out)
{
    struct raft_uv_transport *t = out->t;
    struct raft_uv_conn *conn;
    int rv;

    conn = calloc(1, sizeof *conn);
    if (conn == NULL) {
        raft_uv_tcp_log(t, RAFT_LOG_ERROR, "%s: dial: out of memory",
                        out->name);
        raft_uv_tcp_out_fail(out);
        return;
    }
    conn->out = out;
    conn->connect.data = conn;
    rv = uv_tcp_init(t->loop, &conn->tcp);
    if (rv != 0) {
        raft_uv_tcp_log(t, RAFT_LOG_ERROR, "%s: dial: %s", out->name,
                        uv_strerror(rv));
        free(conn);
        raft_uv_tcp_out_fail(out);
        return;
    }
    t->n_handles++;
    out->refs++;
    conn->tcp.data = conn;
    out->conn = conn;
    out->state = RAFT__UV_DIALLING;
    rv = uv_tcp_connect(&conn->connect, &conn->tcp,
                        (const struct sockaddr *)&out->addr, on_connect);
    if (rv != 0) {
        raft_uv_tcp_log(t, RAFT_LOG_DEBUG, "%s: connect: %s", out->name,
                        uv_strerror(rv));
        raft_uv_tcp_out_fail(out);
        return;
    }
    uv_timer_start(&out->timer, on_backoff, RAFT__UV_CONNECT_TIMEOUT_MS, 0);
}

/* check_build_id validates this server's build id @id (NULL for none). */
static int check_build_id(const char *id, char *errmsg, size_t errmsg_len)
{
    size_t len = id != NULL ? strlen(id) : 0;

    if (len > RAFT_UV_BUILD_ID_MAX) {
        raft_errmsgf(errmsg, errmsg_len, "build id of %zu bytes, at most %d",
                     len, RAFT_UV_BUILD_ID_MAX);
        return RAFT_INVALID;
    }
    for (size_t i = 0; i < len; i++) {
        if (id[i] < 0x20 || id[i] > 0x7e) {
            raft_errmsgf(errmsg, errmsg_len,
                         "build id '%s' is not printable ASCII", id);
            return RAFT_INVALID;
        }
    }
    return 0;
}

/* set_address gives @out the address @addr and names it after it; its
 * certificate must name @identity (NULL or "": the host of @addr, as
 * written). */
static void set_address(struct raft_uv_out *out,
                        const struct raft_address *addr, const char *identity)
{
    char text[RAFT_ADDRESS_TEXT_MAX + 1];

    snprintf(out->identity, sizeof out->identity, "%s",
             identity != NULL && identity[0] != '\0' ? identity : addr->host);
    out->address = *addr;
    out->pick = 0;
    out->resolve_err = 0;
    raft_address_format(addr, text, sizeof text);
    snprintf(out->name, sizeof out->name, "peer %llu (%s)",
             (unsigned long long)out->id, text);
}

/* out_new makes server @id at @addr, whose certificate names @identity
 * (as set_address), a peer of @t (its timer initialized, not dialled
 * yet). Returns NULL when out of memory or @t is full. */
static struct raft_uv_out *out_new(struct raft_uv_transport *t, raft_id id,
                                   const struct raft_address *addr,
                                   const char *identity)
{
    struct raft_uv_out *o;

    if (t->n_outs == RAFT_MAX_SERVERS) {
        return NULL;
    }
    o = calloc(1, sizeof *o);
    if (o == NULL) {
        return NULL;
    }
    o->t = t;
    o->id = id;
    set_address(o, addr, identity);
    o->backoff_ms = RAFT__UV_BACKOFF_MIN_MS;
    o->state = RAFT__UV_WAITING;
    uv_timer_init(t->loop, &o->timer); /* cannot fail */
    o->timer.data = o;
    o->refs = 1;
    t->n_handles++;
    t->outs[t->n_outs++] = o;
    return o;
}

struct raft_uv_out *raft_uv_tcp_learn(struct raft_uv_transport *t, raft_id id,
                                      const char *address)
{
    struct raft_address addr;
    struct raft_uv_out *out;
    char why[128];

    if (raft_address_parse(address, &addr, why, sizeof why) != 0) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "server %llu advertises listen address '%s', not "
                        "host:port (%s): it cannot be answered",
                        (unsigned long long)id, address, why);
        return NULL;
    }
    out = raft_uv_tcp_find(t, RAFT_UV_PROBE_ID);
    if (out != NULL && out->state == RAFT__UV_CONNECTED &&
        out->answered == id) {
        /* The join= probe reached this very server: it becomes the
         * server's connection. A second one would reach it beside the
         * probe's, which it would log as two processes claiming one
         * id. */
        out->id = id;
        set_address(out, &addr, NULL);
        raft_uv_tcp_log(t, RAFT_LOG_INFO,
                        "%s: connected to us, and the join= connection "
                        "reached it: kept as its connection",
                        out->name);
        return out;
    }
    out = out_new(t, id, &addr, NULL);
    if (out == NULL) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "server %llu (%s) is not a peer and %d are known "
                        "already: it cannot be answered",
                        (unsigned long long)id, address, RAFT_MAX_SERVERS);
        return NULL;
    }
    raft_uv_tcp_log(t, RAFT_LOG_INFO,
                    "%s: not a peer yet, connected to us: dialling it back",
                    out->name);
    raft_uv_tcp_dial(out);
    return out;
}

int raft_uv_transport_add_peer(struct raft_uv_transport *t,
                               const struct raft_uv_peer *p)
{
    struct raft_address addr[1];
    struct raft_uv_out *out;
    char errmsg[256];

    if (raft_uv_resolve_peers(t->self, p, 1, addr, errmsg, sizeof errmsg) !=
        0) {
        return RAFT_INVALID;
    }
    out = raft_uv_tcp_find(t, p->id);
    if (out != NULL) {
        /* The name its certificate must hold counts too (a raft_update
         * of an address that dial= overrides). */
        if (raft_address_equal(&out->address, addr) &&
            strcmp(out->identity,
                   p->identity[0] != '\0' ? p->identity : addr->host) == 0) {
            return 0;
        }
        set_address(out, addr, p->identity);
        raft_uv_tcp_log(t, RAFT_LOG_INFO, "%s: new address: re-dialling",
                        out->name);
        out->backoff_ms = RAFT__UV_BACKOFF_MIN_MS;
        raft_uv_tcp_out_fail(out);
        out->pick = 0;
        return 0;
    }
    if (t->closing) {
        return RAFT_SHUTDOWN;
    }
    out = out_new(t, p->id, addr, p->identity);
    if (out == NULL) {
        return t->n_outs == RAFT_MAX_SERVERS ? RAFT_BUSY : RAFT_NOMEM;
    }
    raft_uv_tcp_log(t, RAFT_LOG_INFO, "%s: added", out->name);
    raft_uv_tcp_dial(out);
    return 0;
}

/* out_close closes @out's connection and timer, for good. */
static void out_close(struct raft_uv_out *out)
{
    raft_uv_send_drop(out);
    raft_uv_resolve_cancel(out);
    if (out->conn != NULL) {
        uv_close((uv_handle_t *)&out->conn->tcp, on_conn_closed);
        out->conn = NULL;
    }
    uv_timer_stop(&out->timer);
    uv_close((uv_handle_t *)&out->timer, on_timer_closed);
    out->state = RAFT__UV_WAITING;
}

int raft_uv_transport_remove_peer(struct raft_uv_transport *t, raft_id id)
{
    unsigned i;

    for (i = 0; i < t->n_outs && t->outs[i]->id != id; i++) {
    }
    if (i == t->n_outs || t->closing) {
        return RAFT_NOTFOUND;
    }
    raft_uv_tcp_log(t, RAFT_LOG_INFO, "%s: removed", t->outs[i]->name);
    t->outs[i]->retired = true;
    out_close(t->outs[i]);
    t->outs[i] = t->outs[--t->n_outs];
    return 0;
}

/* open_listener creates, binds and listens on a plain socket, so that a
 * failure leaves no libuv handle behind (@shown names the address in
 * messages). Writes *@out_fd on success. */
static int open_listener(const struct sockaddr_storage *addr, const char *shown,
                         int *out_fd, char *errmsg, size_t errmsg_len)
{
    socklen_t len = addr->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                : sizeof(struct sockaddr_in);
    const char *step = "socket";
    int one = 1;
    int fd;
    int err;

    fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        err = errno;
        goto err_report;
    }
    step = "setsockopt";
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
        goto err_close;
    }
    step = "bind";
    if (bind(fd, (const struct sockaddr *)addr, len) != 0) {
        goto err_close;
    }
    step = "listen";
    if (listen(fd, RAFT__UV_BACKLOG) != 0) {
        goto err_close;
    }
    *out_fd = fd;
    return 0;

err_close:
    err = errno;
    close(fd);
err_report:
    raft_errmsgf(errmsg, errmsg_len, "listen %s: %s: %s", shown, step,
                 uv_strerror(uv_translate_sys_error(err)));
    return RAFT_IOERR;
}

static void on_start_failed_closed(uv_handle_t *handle)
{
    struct raft_uv_transport *t = handle->data;

    free(t->tls_plain);
    free(t);
}

static void on_flush_prepare(uv_prepare_t *h)
{
    raft_uv_send_flush(h->data);
}

static void on_flush_check(uv_check_t *h)
{
    raft_uv_send_flush(h->data);
}

int raft_uv_transport_start(uv_loop_t *loop, raft_id self,
                            const char *listen_host, uint16_t listen_port,
                            const char *advertise,
                            const struct raft_uv_peer *peers, unsigned n_peers,
                            uint64_t max_frame_bytes, const char *build_id,
                            struct raft_uv_tls *tls, raft_uv_recv_cb recv_cb,
                            raft_log_cb log_cb, void *data,
                            struct raft_uv_transport **out, char *errmsg,
                            size_t errmsg_len)
{
    struct raft_uv_transport *t;
    struct sockaddr_storage addr;
    struct raft_address addrs[RAFT_MAX_SERVERS];
    struct sockaddr_storage bound;
    int bound_len = sizeof bound;
    char shown[RAFT_ADDRESS_TEXT_MAX + 16];
    unsigned i;
    int fd;
    int rv;
    int rc;

    if (self == 0 || max_frame_bytes < RAFT__UV_MIN_FRAME || recv_cb == NULL ||
        (n_peers > 0 && peers == NULL)) {
        raft_errmsgf(errmsg, errmsg_len, "bad transport arguments");
        return RAFT_INVALID;
    }
    rc = raft_uv_resolve_listen(listen_host, listen_port, advertise, &addr,
                                shown, sizeof shown, errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    t = calloc(1, sizeof *t);
    if (t == NULL) {
        raft_errmsgf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    rc = raft_uv_resolve_peers(self, peers, n_peers, addrs, errmsg, errmsg_len);
    if (rc == 0) {
        rc = check_build_id(build_id, errmsg, errmsg_len);
    }
    if (rc == 0 && tls != NULL) {
        rc = raft_uv_tls_stream_setup(t, tls, errmsg, errmsg_len);
    }
    if (rc != 0) {
        goto err_free;
    }
    snprintf(t->build_id, sizeof t->build_id, "%s",
             build_id != NULL ? build_id : "");
    rc = open_listener(&addr, shown, &fd, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_free;
    }
    t->loop = loop;
    t->self = self;
    t->max_frame_bytes = max_frame_bytes;
    t->handshake_ms = RAFT__UV_HANDSHAKE_TIMEOUT_MS;
    t->stall_ms = RAFT__UV_STALL_TIMEOUT_MS;
    t->recv_cb = recv_cb;
    t->log_cb = log_cb;
    t->data = data;

    rv = uv_tcp_init(loop, &t->listener);
    if (rv != 0) {
        close(fd);
        raft_errmsgf(errmsg, errmsg_len, "uv_tcp_init: %s", uv_strerror(rv));
        rc = RAFT_IOERR;
        goto err_free;
    }
    t->listener.data = t;
    rv = uv_tcp_open(&t->listener, fd);
    if (rv != 0) {
        close(fd);
        goto err_close_listener;
    }
    rv = uv_listen((uv_stream_t *)&t->listener, RAFT__UV_BACKLOG,
                   raft_uv_accept_on_connection);
    if (rv == 0) {
        rv = uv_tcp_getsockname(&t->listener, (struct sockaddr *)&bound,
                                &bound_len);
    }
    if (rv != 0) {
        goto err_close_listener;
    }
    t->port = ntohs(bound.ss_family == AF_INET6
                        ? ((const struct sockaddr_in6 *)&bound)->sin6_port
                        : ((const struct sockaddr_in *)&bound)->sin_port);
    raft_uv_resolve_advertised(t, advertise, &addr);
    t->n_handles = 1;
    /* Frames sent during a loop iteration are held and written together
     * (uv_send.c): before the loop polls, and after each poll. */
    uv_prepare_init(loop, &t->flush_prepare); /* cannot fail */
    t->flush_prepare.data = t;
    uv_prepare_start(&t->flush_prepare, on_flush_prepare);
    uv_check_init(loop, &t->flush_check); /* cannot fail */
    t->flush_check.data = t;
    uv_check_start(&t->flush_check, on_flush_check);
    uv_timer_init(loop, &t->sweep); /* cannot fail */
    t->sweep.data = t;
    uv_timer_start(&t->sweep, raft_uv_accept_sweep, RAFT__UV_SWEEP_MS,
                   RAFT__UV_SWEEP_MS);
    t->n_handles += 3;

    for (i = 0; i < n_peers; i++) {
        if (out_new(t, peers[i].id, &addrs[i], peers[i].identity) == NULL) {
            /* Out of memory: the peers not made are added later by
             * raft_uv_transport_add_peer, or never. */
            raft_uv_tcp_log(t, RAFT_LOG_ERROR, "peer %llu: out of memory",
                            (unsigned long long)peers[i].id);
        }
    }
    for (i = 0; i < t->n_outs; i++) {
        raft_uv_tcp_dial(t->outs[i]);
    }
    raft_uv_resolve_format((const struct sockaddr *)&bound, shown,
                           sizeof shown);
    raft_uv_tcp_log(t, RAFT_LOG_INFO,
                    "listening on %s (advertised as %s), %u peers", shown,
                    t->address[0] != '\0' ? t->address : "nothing", n_peers);
    *out = t;
    return 0;

err_close_listener:
    /* The handle is registered with the loop: free @t once it is closed. */
    raft_errmsgf(errmsg, errmsg_len, "listen %s: %s", shown, uv_strerror(rv));
    uv_close((uv_handle_t *)&t->listener, on_start_failed_closed);
    return RAFT_IOERR;
err_free:
    free(t->tls_plain);
    free(t);
    return rc;
}

uint16_t raft_uv_transport_port(const struct raft_uv_transport *t)
{
    return t->port;
}

bool raft_uv_transport_connected(const struct raft_uv_transport *t, raft_id id)
{
    const struct raft_uv_out *out = raft_uv_tcp_find(t, id);

    return out != NULL && out->state == RAFT__UV_CONNECTED;
}

unsigned raft_uv_transport_peer_wire(const struct raft_uv_transport *t,
                                     raft_id id)
{
    const struct raft_uv_out *out = raft_uv_tcp_find(t, id);

    if (out == NULL || out->state != RAFT__UV_CONNECTED) {
        return 0;
    }
    return out->wire_version;
}

unsigned raft_uv_transport_peer_wire_last(const struct raft_uv_transport *t,
                                          raft_id id)
{
    const struct raft_uv_out *out = raft_uv_tcp_find(t, id);

    /* @wire_version is set by each accepted handshake and never reset. */
    return out != NULL ? out->wire_version : 0;
}

unsigned raft_uv_transport_connected_peers(const struct raft_uv_transport *t,
                                           raft_id *ids, unsigned max)
{
    unsigned n = 0;

    for (unsigned i = 0; i < t->n_outs && n < max; i++) {
        const struct raft_uv_out *out = t->outs[i];
        if (out->id != RAFT_UV_PROBE_ID && out->state == RAFT__UV_CONNECTED) {
            ids[n++] = out->id;
        }
    }
    return n;
}

/* add_id appends @id to the @n ids at @ids (room for @max) unless it is
 * there already; returns the new count. */
static unsigned add_id(raft_id *ids, unsigned n, unsigned max, raft_id id)
{
    for (unsigned i = 0; i < n; i++) {
        if (ids[i] == id) {
            return n;
        }
    }
    if (n < max) {
        ids[n++] = id;
    }
    return n;
}

unsigned raft_uv_transport_contacts(struct raft_uv_transport *t, raft_id *ids,
                                    unsigned max)
{
    unsigned n = 0;

    for (struct raft_uv_in *in = t->ins; in != NULL; in = in->next) {
        if (in->heard && !in->closing && in->peer != 0) {
            n = add_id(ids, n, max, in->peer);
        }
        in->heard = false;
    }
    for (unsigned i = 0; i < t->n_outs; i++) {
        struct raft_uv_out *out = t->outs[i];
        struct raft_uv_conn *c = out->conn;
        uint64_t taken;
        size_t waiting;

        if (c == NULL || out->state != RAFT__UV_CONNECTED) {
            continue;
        }
        /* What the socket took since the last poll, while bytes waited
         * for it: with its send buffer full, the kernel takes more only
         * when the peer acknowledges, so when its process reads. Without
         * a backlog, bytes taken prove nothing (a buffer had room). */
        waiting = c->tcp.write_queue_size;
        taken = c->submitted - waiting;
        if (c->backlog_mark > 0 && taken > c->taken_mark &&
            out->id != RAFT_UV_PROBE_ID) {
            n = add_id(ids, n, max, out->id);
        }
        c->backlog_mark = waiting;
        c->taken_mark = taken;
    }
    return n;
}

const char *raft_uv_transport_peer_build_id(const struct raft_uv_transport *t,
                                            raft_id id)
{
    const struct raft_uv_out *out = raft_uv_tcp_find(t, id);

    return out != NULL && out->build_known ? out->build_id : NULL;
}

void raft_uv_transport_close(struct raft_uv_transport *t,
                             void (*cb)(void *data), void *data)
{
    struct raft_uv_in *in;
    unsigned i;

    if (t->closing) {
        return;
    }
    t->closing = true;
    t->close_cb = cb;
    t->close_data = data;
    raft_uv_tcp_log(t, RAFT_LOG_INFO, "closing");
    uv_close((uv_handle_t *)&t->listener, on_handle_closed);
    uv_close((uv_handle_t *)&t->flush_prepare, on_handle_closed);
    uv_close((uv_handle_t *)&t->flush_check, on_handle_closed);
    uv_timer_stop(&t->sweep);
    uv_close((uv_handle_t *)&t->sweep, on_handle_closed);
    for (i = 0; i < t->n_outs; i++) {
        out_close(t->outs[i]);
    }
    for (in = t->ins; in != NULL; in = in->next) {
        raft_uv_tcp_in_close(in);
    }
}
