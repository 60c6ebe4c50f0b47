/* The transport's accepting side: accepted connections (the cap on those
 * still in their handshake), a verified handshake, and the sweep that
 * closes stalled connections.
 *
 * Happy path: the listener's callback accepts a connection, names it after
 * its remote address and starts reading its handshake (uv_recv.c); once
 * verified, a dial to that peer waiting out its backoff starts at once.
 * Under TLS each accepted connection gets its TLS server session first,
 * and the sweep also checks the certificate files for a change
 * (uv_tls_stream.c).
 * Failure modes: past RAFT__UV_MAX_UNVERIFIED connections in their
 * handshake (TLS included), new ones are closed at once (counted, logged
 * by the sweep); the sweep closes connections whose handshake or frame
 * stalled. */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "uv_internal.h"

/* name_incoming writes "ip:port" (or "[ip]:port") of the remote end of
 * @in into its name. */
static void name_incoming(struct raft_uv_in *in)
{
    struct sockaddr_storage ss;
    int ss_len = sizeof ss;
    char remote[INET6_ADDRSTRLEN + 16] = "?:0";

    memset(&ss, 0, sizeof ss);
    if (uv_tcp_getpeername(&in->tcp, (struct sockaddr *)&ss, &ss_len) == 0) {
        raft_uv_resolve_format((const struct sockaddr *)&ss, remote,
                               sizeof remote);
    }
    snprintf(in->name, sizeof in->name, "incoming %s", remote);
}

void raft_uv_accept_on_connection(uv_stream_t *server, int status)
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
    if (t->tls != NULL && raft_uv_tls_stream_in_start(in) != 0) {
        raft_uv_tcp_log(t, RAFT_LOG_ERROR, "%s: TLS: out of memory: closing",
                        in->name);
        raft_uv_tcp_in_close(in);
        return;
    }
    if (raft_uv_recv_start(in) != 0) {
        raft_uv_tcp_in_close(in);
    }
}

void raft_uv_accept_verified(struct raft_uv_in *in)
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
        raft_uv_tcp_dial(out);
    }
}

/* bytes_waiting returns whether @in's socket holds bytes not yet read. */
static bool bytes_waiting(struct raft_uv_in *in)
{
    uv_os_fd_t fd;
    int n = 0;

    if (uv_fileno((uv_handle_t *)&in->tcp, &fd) != 0) {
        return false;
    }
    return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

void raft_uv_accept_sweep(uv_timer_t *timer)
{
    struct raft_uv_transport *t = timer->data;
    uint64_t now = uv_now(t->loop);
    unsigned n_silent = 0;
    char example[160] = "";

    raft_uv_tls_stream_check(t);
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
        bool late = in->peer == 0 && now - in->accepted_at >= t->handshake_ms;
        bool stalled = mid && now - in->last_read_at >= t->stall_ms;

        if (in->closing || (!late && !stalled)) {
            continue;
        }
        /* Invariant: a handshake gets at most twice its time, however
         * its bytes trickle in. */
        if (bytes_waiting(in) &&
            (!late || now - in->accepted_at < 2 * t->handshake_ms)) {
            in->last_read_at = now;
            continue;
        }
        if (late) {
            if (n_silent++ == 0) {
                snprintf(example, sizeof example,
                         "%.96s, %zu of at least %d bytes", in->name,
                         in->hs_got, RAFT__UV_HANDSHAKE_FIXED);
            }
        } else {
            raft_uv_tcp_log(t, RAFT_LOG_WARN,
                            "%s: frame stalled for %llu ms (%zu of %zu "
                            "bytes): closing",
                            in->name, (unsigned long long)t->stall_ms,
                            in->body_got, in->body_len);
        }
        raft_uv_tcp_in_close(in);
    }
    if (n_silent > 0) {
        raft_uv_tcp_log(t, RAFT_LOG_WARN,
                        "closed %u connections with no handshake within "
                        "%llu ms (%s%s)",
                        n_silent, (unsigned long long)t->handshake_ms, example,
                        n_silent > 1 ? ", ..." : "");
    }
}

void raft_uv_transport_set_timeouts(struct raft_uv_transport *t,
                                    uint64_t handshake_ms, uint64_t stall_ms)
{
    t->handshake_ms = handshake_ms;
    t->stall_ms = stall_ms;
}
