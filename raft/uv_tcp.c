/* The transport's connections: listening and accepting, dialling each peer
 * with backoff, and closing everything.
 *
 * Happy path: raft_uv_transport_start binds and listens, then dials every
 * peer. A completed dial sets TCP_NODELAY, queues the handshake (uv_send.c)
 * and marks the peer connected; accepted connections read the peer's
 * handshake and frames (uv_recv.c).
 *
 * Failure modes: a refused or timed-out dial, a write error, EOF or stray
 * bytes on an outgoing connection close it and schedule a re-dial after
 * 100 ms, doubling to 2 s, reset by a successful connect. A bad handshake
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
        if (t->outs[i].id == id) {
            return &t->outs[i];
        }
    }
    return NULL;
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
    free(t->outs);
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
    struct raft_uv_out *out = handle->data;

    handle_closed(out->t);
}

static void on_conn_closed(uv_handle_t *handle)
{
    struct raft_uv_conn *conn = handle->data;
    struct raft_uv_transport *t = conn->out->t;

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
    free(in->body);
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

static void dial(struct raft_uv_out *out);

static void on_backoff(uv_timer_t *timer)
{
    struct raft_uv_out *out = timer->data;

    if (out->state == RAFT__UV_WAITING) {
        dial(out);
    } else if (out->state == RAFT__UV_DIALLING) {
        raft_uv_tcp_log(out->t, RAFT_LOG_INFO,
                        "%s: connect timed out after %d ms", out->name,
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
    out->state = RAFT__UV_WAITING;
    uv_timer_start(&out->timer, on_backoff, out->backoff_ms, 0);
    raft_uv_tcp_log(t, RAFT_LOG_DEBUG, "%s: re-dial in %u ms", out->name,
                    out->backoff_ms);
    out->backoff_ms *= 2;
    if (out->backoff_ms > RAFT__UV_BACKOFF_MAX_MS) {
        out->backoff_ms = RAFT__UV_BACKOFF_MAX_MS;
    }
}

static void on_out_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    struct raft_uv_conn *conn = handle->data;

    (void)suggested;
    buf->base = conn->rbuf;
    buf->len = sizeof conn->rbuf;
}

/* on_out_read watches an outgoing connection: the peer never sends on it,
 * so bytes are a protocol error and EOF or an error means it is gone. */
static void on_out_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct raft_uv_conn *conn = stream->data;
    struct raft_uv_out *out = conn->out;

    (void)buf;
    if (nread == 0 || out->conn != conn) {
        return;
    }
    if (nread > 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN,
                        "%s: unexpected bytes on outgoing connection: "
                        "closing",
                        out->name);
    } else {
        raft_uv_tcp_log(out->t, RAFT_LOG_INFO, "%s: connection lost: %s",
                        out->name, uv_strerror((int)nread));
    }
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
        rv =
            uv_read_start((uv_stream_t *)&conn->tcp, on_out_alloc, on_out_read);
    }
    if (rv != 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN, "%s: setup: %s", out->name,
                        uv_strerror(rv));
        raft_uv_tcp_out_fail(out);
        return;
    }
    out->state = RAFT__UV_CONNECTED;
    if (raft_uv_send_handshake(out) != 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_WARN, "%s: handshake write failed",
                        out->name);
        raft_uv_tcp_out_fail(out);
        return;
    }
    out->backoff_ms = RAFT__UV_BACKOFF_MIN_MS;
    raft_uv_tcp_log(out->t, RAFT_LOG_INFO, "%s: connected", out->name);
}

/* dial starts one connection attempt to @out, or schedules a retry. */
static void dial(struct raft_uv_out *out)
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

/* name_incoming writes "ip:port" of the remote end of @in into its name. */
static void name_incoming(struct raft_uv_in *in)
{
    struct sockaddr_storage ss;
    int ss_len = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;

    if (uv_tcp_getpeername(&in->tcp, (struct sockaddr *)&ss, &ss_len) == 0 &&
        ss.ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
        uv_ip4_name(sin, ip, sizeof ip);
        port = ntohs(sin->sin_port);
    }
    snprintf(in->name, sizeof in->name, "incoming %s:%u", ip, port);
}

static void on_connection(uv_stream_t *server, int status)
{
    struct raft_uv_transport *t = server->data;
    struct raft_uv_in *in;
    int rv;

    if (status < 0) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN, "accept: %s", uv_strerror(status));
        return;
    }
    if (t->closing) {
        return;
    }
    in = calloc(1, sizeof *in);
    if (in == NULL) {
        raft_uv_tcp_log(t, RAFT_LOG_ERROR, "accept: out of memory");
        return;
    }
    rv = uv_tcp_init(t->loop, &in->tcp);
    if (rv != 0) {
        raft_uv_tcp_log(t, RAFT_LOG_ERROR, "accept: %s", uv_strerror(rv));
        free(in);
        return;
    }
    t->n_handles++;
    in->tcp.data = in;
    in->t = t;
    in->stage = RAFT__UV_HANDSHAKE;
    in->accepted_at = uv_now(t->loop);
    in->last_read_at = in->accepted_at;
    t->n_unverified++;
    in->next = t->ins;
    if (t->ins != NULL) {
        t->ins->prev = in;
    }
    t->ins = in;
    rv = uv_accept(server, (uv_stream_t *)&in->tcp);
    if (rv != 0) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN, "accept: %s", uv_strerror(rv));
        raft_uv_tcp_in_close(in);
        return;
    }
    name_incoming(in);
    if (t->n_unverified > RAFT__UV_MAX_UNVERIFIED) {
        t->n_refused++; /* logged by the next sweep, in one line */
        raft_uv_tcp_in_close(in);
        return;
    }
    raft_uv_tcp_log(t, RAFT_LOG_DEBUG, "%s: accepted", in->name);
    if (raft_uv_recv_start(in) != 0) {
        raft_uv_tcp_in_close(in);
    }
}

void raft_uv_tcp_verified(struct raft_uv_in *in)
{
    struct raft_uv_out *out = raft_uv_tcp_find(in->t, in->peer);

    in->t->n_unverified--;
    for (struct raft_uv_in *o = in->t->ins; o != NULL; o = o->next) {
        if (o != in && o->peer == in->peer && !o->closing) {
            /* A restarted peer's old connection may linger until the
             * kernel notices; two live processes with one id stay. */
            raft_uv_tcp_log(in->t, RAFT_LOG_WARN,
                            "%s: a second connection claims this server "
                            "id (%s is open too): a restart, or two "
                            "processes running with id %llu",
                            in->name, o->name, (unsigned long long)in->peer);
            break;
        }
    }
    if (out != NULL && out->state == RAFT__UV_WAITING && !in->t->closing) {
        raft_uv_tcp_log(in->t, RAFT_LOG_DEBUG,
                        "%s: connected to us: dialling it now", out->name);
        uv_timer_stop(&out->timer);
        out->backoff_ms = RAFT__UV_BACKOFF_MIN_MS;
        dial(out);
    }
}

/* on_sweep closes the accepted connections that stalled: still in their
 * handshake after RAFT__UV_HANDSHAKE_TIMEOUT_MS, or in the middle of a
 * frame with no byte for RAFT__UV_STALL_TIMEOUT_MS. */
static void on_sweep(uv_timer_t *timer)
{
    struct raft_uv_transport *t = timer->data;
    uint64_t now = uv_now(t->loop);
    unsigned n_silent = 0;
    char example[160] = "";

    if (t->n_refused > 0) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "refused %u connections: %u are still in their "
                        "handshake",
                        t->n_refused, RAFT__UV_MAX_UNVERIFIED);
        t->n_refused = 0;
    }
    for (struct raft_uv_in *in = t->ins; in != NULL; in = in->next) {
        bool mid = in->stage == RAFT__UV_BODY ||
                   (in->stage == RAFT__UV_HEADER && in->hdr_got > 0);
        if (in->closing) {
            continue;
        }
        if (in->peer == 0 &&
            now - in->accepted_at >= RAFT__UV_HANDSHAKE_TIMEOUT_MS) {
            if (n_silent++ == 0) {
                snprintf(example, sizeof example,
                         "%.96s, %zu of at least %d bytes", in->name,
                         in->hs_got, RAFT__UV_HANDSHAKE_FIXED);
            }
            raft_uv_tcp_in_close(in);
        } else if (mid && now - in->last_read_at >= RAFT__UV_STALL_TIMEOUT_MS) {
            raft_uv_tcp_log(t, RAFT_LOG_WARN,
                            "%s: frame stalled for %d ms (%zu of %zu "
                            "bytes): closing",
                            in->name, RAFT__UV_STALL_TIMEOUT_MS, in->body_got,
                            in->body_len);
            raft_uv_tcp_in_close(in);
        }
    }
    if (n_silent > 0) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "closed %u connections with no handshake within %d "
                        "ms (%s%s)",
                        n_silent, RAFT__UV_HANDSHAKE_TIMEOUT_MS, example,
                        n_silent > 1 ? ", ..." : "");
    }
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

/* check_peers validates the peer list and fills the address of each out. */
static int check_peers(raft_id self, const struct raft_uv_peer *peers,
                       unsigned n_peers, struct raft_uv_out *outs, char *errmsg,
                       size_t errmsg_len)
{
    unsigned i, j;

    for (i = 0; i < n_peers; i++) {
        const struct raft_uv_peer *p = &peers[i];
        char host[sizeof p->host + 1];

        if (p->id == 0 || p->id == self) {
            raft_errmsgf(errmsg, errmsg_len, "peer %u: bad id %llu", i,
                         (unsigned long long)p->id);
            return RAFT_INVALID;
        }
        for (j = 0; j < i; j++) {
            if (peers[j].id == p->id) {
                raft_errmsgf(errmsg, errmsg_len, "peer id %llu given twice",
                             (unsigned long long)p->id);
                return RAFT_INVALID;
            }
        }
        memcpy(host, p->host, sizeof p->host);
        host[sizeof p->host] = '\0';
        if (p->port == 0 || uv_ip4_addr(host, p->port, &outs[i].addr) != 0) {
            raft_errmsgf(errmsg, errmsg_len, "peer %llu: bad address %s:%u",
                         (unsigned long long)p->id, host, (unsigned)p->port);
            return RAFT_INVALID;
        }
        outs[i].id = p->id;
        snprintf(outs[i].name, sizeof outs[i].name, "peer %llu (%s:%u)",
                 (unsigned long long)p->id, host, (unsigned)p->port);
    }
    return 0;
}

/* open_listener creates, binds and listens on a plain socket, so that a
 * failure leaves no libuv handle behind. Writes *@out_fd on success. */
static int open_listener(const struct sockaddr_in *addr, const char *host,
                         uint16_t port, int *out_fd, char *errmsg,
                         size_t errmsg_len)
{
    const char *step = "socket";
    int one = 1;
    int fd;
    int err;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        err = errno;
        goto err_report;
    }
    step = "setsockopt";
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
        goto err_close;
    }
    step = "bind";
    if (bind(fd, (const struct sockaddr *)addr, sizeof *addr) != 0) {
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
    raft_errmsgf(errmsg, errmsg_len, "listen %s:%u: %s: %s", host,
                 (unsigned)port, step,
                 uv_strerror(uv_translate_sys_error(err)));
    return RAFT_IOERR;
}

static void on_start_failed_closed(uv_handle_t *handle)
{
    struct raft_uv_transport *t = handle->data;

    free(t->outs);
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
                            const struct raft_uv_peer *peers, unsigned n_peers,
                            uint64_t max_frame_bytes, const char *build_id,
                            raft_uv_recv_cb recv_cb, raft_log_cb log_cb,
                            void *data, struct raft_uv_transport **out,
                            char *errmsg, size_t errmsg_len)
{
    struct raft_uv_transport *t;
    struct sockaddr_in addr;
    struct sockaddr_storage bound;
    int bound_len = sizeof bound;
    unsigned i;
    int fd;
    int rv;
    int rc;

    if (self == 0 || max_frame_bytes < RAFT__UV_MIN_FRAME || recv_cb == NULL ||
        (n_peers > 0 && peers == NULL)) {
        raft_errmsgf(errmsg, errmsg_len, "bad transport arguments");
        return RAFT_INVALID;
    }
    if (listen_host == NULL ||
        uv_ip4_addr(listen_host, listen_port, &addr) != 0) {
        raft_errmsgf(errmsg, errmsg_len, "bad listen address %s",
                     listen_host == NULL ? "(null)" : listen_host);
        return RAFT_INVALID;
    }
    t = calloc(1, sizeof *t);
    if (t == NULL) {
        raft_errmsgf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    t->outs = calloc(n_peers > 0 ? n_peers : 1, sizeof *t->outs);
    if (t->outs == NULL) {
        raft_errmsgf(errmsg, errmsg_len, "out of memory");
        rc = RAFT_NOMEM;
        goto err_free;
    }
    rc = check_peers(self, peers, n_peers, t->outs, errmsg, errmsg_len);
    if (rc == 0) {
        rc = check_build_id(build_id, errmsg, errmsg_len);
    }
    if (rc != 0) {
        goto err_free;
    }
    snprintf(t->build_id, sizeof t->build_id, "%s",
             build_id != NULL ? build_id : "");
    rc =
        open_listener(&addr, listen_host, listen_port, &fd, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_free;
    }
    t->loop = loop;
    t->self = self;
    t->max_frame_bytes = max_frame_bytes;
    t->recv_cb = recv_cb;
    t->log_cb = log_cb;
    t->data = data;
    t->n_outs = n_peers;

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
    rv =
        uv_listen((uv_stream_t *)&t->listener, RAFT__UV_BACKLOG, on_connection);
    if (rv == 0) {
        rv = uv_tcp_getsockname(&t->listener, (struct sockaddr *)&bound,
                                &bound_len);
    }
    if (rv != 0) {
        goto err_close_listener;
    }
    t->port = ntohs(((const struct sockaddr_in *)&bound)->sin_port);
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
    uv_timer_start(&t->sweep, on_sweep, RAFT__UV_SWEEP_MS, RAFT__UV_SWEEP_MS);
    t->n_handles += 3;

    for (i = 0; i < n_peers; i++) {
        struct raft_uv_out *o = &t->outs[i];
        o->t = t;
        o->backoff_ms = RAFT__UV_BACKOFF_MIN_MS;
        o->state = RAFT__UV_WAITING;
        uv_timer_init(loop, &o->timer); /* cannot fail */
        o->timer.data = o;
        t->n_handles++;
    }
    for (i = 0; i < n_peers; i++) {
        dial(&t->outs[i]);
    }
    raft_uv_tcp_log(t, RAFT_LOG_INFO, "listening on %s:%u, %u peers",
                    listen_host, (unsigned)t->port, n_peers);
    *out = t;
    return 0;

err_close_listener:
    /* The handle is registered with the loop: free @t once it is closed. */
    raft_errmsgf(errmsg, errmsg_len, "listen %s:%u: %s", listen_host,
                 (unsigned)listen_port, uv_strerror(rv));
    uv_close((uv_handle_t *)&t->listener, on_start_failed_closed);
    return RAFT_IOERR;
err_free:
    free(t->outs);
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
        struct raft_uv_out *out = &t->outs[i];
        uv_timer_stop(&out->timer);
        uv_close((uv_handle_t *)&out->timer, on_timer_closed);
        raft_uv_tcp_out_fail(out);
        out->state = RAFT__UV_WAITING;
    }
    for (in = t->ins; in != NULL; in = in->next) {
        raft_uv_tcp_in_close(in);
    }
}
