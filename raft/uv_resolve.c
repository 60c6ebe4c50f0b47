/* The transport's addresses: the listen, advertised and peer addresses it
 * is given, checked; where a dial goes: a peer's IP literal as it is, its
 * hostname resolved anew before each dial (uv_getaddrinfo on libuv's
 * thread pool, so the loop never blocks); socket addresses named in logs.
 *
 * Happy path: raft_uv_resolve_start asks the pool for the peer's name
 * (IPv4 and IPv6 results alike); the callback takes the result the peer's
 * @pick designates (it moves on after a failed connect, so a name with an
 * unreachable first address reaches the next one on the next dial) and
 * connects there (raft_uv_tcp_connect). Every dial resolves again, so a
 * changed /etc/hosts entry or DNS record is followed on the next
 * reconnect.
 *
 * Failure modes: a failed resolution is logged at WARN once per change of
 * error (and at INFO once it resolves again) and retried with the normal
 * reconnect backoff. A peer removed, re-addressed or failed while its name
 * resolves, or the transport closing, orphans the request: it is cancelled
 * if the pool has not started it, and its result, whenever it comes, is
 * dropped (the request holds a reference to the peer and counts as a
 * handle of the transport, so neither is freed under it). Past
 * RAFT__UV_MAX_RESOLVING resolutions in flight (each holds a pool thread,
 * which storage writes share) a dial waits RAFT__UV_BACKOFF_MIN_MS and
 * tries again. */

#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "uv_internal.h"

/* One resolution in flight; freed by its callback. */
struct raft_uv_resolve {
    uv_getaddrinfo_t req;    /* req.data is this struct */
    struct raft_uv_out *out; /* the peer it resolves for (a reference) */
};

int raft_uv_resolve_numeric(const char *host, unsigned port,
                            struct sockaddr_storage *out)
{
    struct sockaddr_storage ss;

    memset(&ss, 0, sizeof ss);
    if (port > 65535) {
        return RAFT_INVALID;
    }
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)&ss) != 0 &&
        (strchr(host, ':') == NULL ||
         uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)&ss) != 0)) {
        return RAFT_INVALID;
    }
    *out = ss;
    return 0;
}

void raft_uv_resolve_format(const struct sockaddr *sa, char *out, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;

    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        uv_ip6_name(s6, ip, sizeof ip);
        port = ntohs(s6->sin6_port);
        snprintf(out, len, "[%s]:%u", ip, port);
        return;
    }
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        uv_ip4_name(s4, ip, sizeof ip);
        port = ntohs(s4->sin_port);
    }
    snprintf(out, len, "%s:%u", ip, port);
}

int raft_uv_resolve_peers(raft_id self, const struct raft_uv_peer *peers,
                          unsigned n_peers, struct raft_address *addrs,
                          char *errmsg, size_t errmsg_len)
{
    unsigned i, j;

    if (n_peers > RAFT_MAX_SERVERS) {
        raft_errmsgf(errmsg, errmsg_len, "%u peers, at most %d", n_peers,
                     RAFT_MAX_SERVERS);
        return RAFT_INVALID;
    }
    for (i = 0; i < n_peers; i++) {
        const struct raft_uv_peer *p = &peers[i];
        char host[sizeof p->host + 1];
        char why[128];

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
        if (raft_address_parse_host(host, p->port, &addrs[i], why,
                                    sizeof why) != 0) {
            raft_errmsgf(errmsg, errmsg_len, "peer %llu: bad address %s:%u: %s",
                         (unsigned long long)p->id, host, (unsigned)p->port,
                         why);
            return RAFT_INVALID;
        }
    }
    return 0;
}

int raft_uv_resolve_listen(const char *host, uint16_t port,
                           const char *advertise, struct sockaddr_storage *addr,
                           char *shown, size_t shown_len, char *errmsg,
                           size_t errmsg_len)
{
    struct raft_address a;
    char why[128];

    if (host == NULL || raft_uv_resolve_numeric(host, port, addr) != 0) {
        raft_errmsgf(errmsg, errmsg_len,
                     "bad listen address %s (an IPv4 or IPv6 literal)",
                     host == NULL ? "(null)" : host);
        return RAFT_INVALID;
    }
    raft_uv_resolve_format((const struct sockaddr *)addr, shown, shown_len);
    if (advertise != NULL &&
        raft_address_parse(advertise, &a, why, sizeof why) != 0) {
        raft_errmsgf(errmsg, errmsg_len, "bad advertised address '%s': %s",
                     advertise, why);
        return RAFT_INVALID;
    }
    return 0;
}

void raft_uv_resolve_advertised(struct raft_uv_transport *t,
                                const char *advertise,
                                const struct sockaddr_storage *addr)
{
    struct raft_address a;
    char ip[INET6_ADDRSTRLEN] = "";
    int rc;

    if (advertise != NULL) {
        snprintf(t->address, sizeof t->address, "%s", advertise);
        return;
    }
    if (addr->ss_family == AF_INET6) {
        uv_ip6_name((const struct sockaddr_in6 *)addr, ip, sizeof ip);
    } else {
        uv_ip4_name((const struct sockaddr_in *)addr, ip, sizeof ip);
    }
    rc = raft_address_parse_host(ip, t->port, &a, NULL, 0);
    t->address[0] = '\0';
    if (rc == 0 && !raft_address_wildcard(&a)) {
        raft_address_format(&a, t->address, sizeof t->address);
    }
}

/* pick_result returns the @pick-th stream address of @res (modulo their
 * number), or NULL when it holds none; *@out_n counts them. */
static const struct addrinfo *pick_result(const struct addrinfo *res,
                                          unsigned pick, unsigned *out_n)
{
    const struct addrinfo *ai;
    unsigned n = 0;

    for (ai = res; ai != NULL; ai = ai->ai_next) {
        n += ai->ai_family == AF_INET || ai->ai_family == AF_INET6;
    }
    *out_n = n;
    if (n == 0) {
        return NULL;
    }
    pick %= n;
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) {
            continue;
        }
        if (pick-- == 0) {
            break;
        }
    }
    return ai;
}

/* resolved connects @out to the address @ai, one of @n its name gave. */
static void resolved(struct raft_uv_out *out, const struct addrinfo *ai,
                     unsigned n)
{
    struct sockaddr_storage was = out->addr;
    char ip[RAFT_ADDRESS_TEXT_MAX + 16];

    memset(&out->addr, 0, sizeof out->addr);
    memcpy(&out->addr, ai->ai_addr, ai->ai_addrlen);
    raft_uv_resolve_format(ai->ai_addr, ip, sizeof ip);
    if (out->resolve_err != 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_INFO, "%s: %s resolves again: %s",
                        out->name, out->address.host, ip);
        out->resolve_err = 0;
    } else if (n == 1 && was.ss_family != AF_UNSPEC &&
               memcmp(&was, &out->addr, sizeof was) != 0) {
        raft_uv_tcp_log(out->t, RAFT_LOG_INFO, "%s: %s now resolves to %s",
                        out->name, out->address.host, ip);
    }
    raft_uv_tcp_log(out->t, RAFT_LOG_DEBUG,
                    "%s: dialling %s (address %u of %u of %s)", out->name, ip,
                    out->pick % n + 1, n, out->address.host);
    raft_uv_tcp_connect(out);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct raft_uv_resolve *r = req->data;
    struct raft_uv_out *out = r->out;
    struct raft_uv_transport *t = out->t;
    const struct addrinfo *ai = NULL;
    unsigned n = 0;

    t->n_resolving--;
    if (out->resolving == r && !t->closing) {
        out->resolving = NULL;
        if (status == 0) {
            ai = pick_result(res, out->pick, &n);
            status = ai == NULL ? UV_EAI_NODATA : 0;
        }
        if (status == 0) {
            resolved(out, ai, n);
        } else {
            if (status != out->resolve_err) {
                raft_uv_tcp_log(
                    t, RAFT_LOG_WARN, "%s: cannot resolve %s: %s: retrying",
                    out->name, out->address.host, uv_strerror(status));
                out->resolve_err = status;
            }
            raft_uv_tcp_out_fail(out);
        }
    }
    uv_freeaddrinfo(res);
    free(r);
    raft_uv_tcp_req_done(out);
}

void raft_uv_resolve_start(struct raft_uv_out *out)
{
    struct raft_uv_transport *t = out->t;
    struct raft_uv_resolve *r;
    struct addrinfo hints;
    char port[8];
    int rv;

    if (t->n_resolving >= RAFT__UV_MAX_RESOLVING) {
        raft_uv_tcp_log(t, RAFT_LOG_DEBUG,
                        "%s: %u names resolving already: dial deferred",
                        out->name, t->n_resolving);
        out->state = RAFT__UV_WAITING;
        raft_uv_tcp_retry(out, RAFT__UV_BACKOFF_MIN_MS);
        return;
    }
    r = calloc(1, sizeof *r);
    if (r == NULL) {
        raft_uv_tcp_log(t, RAFT_LOG_ERROR, "%s: resolve: out of memory",
                        out->name);
        raft_uv_tcp_out_fail(out);
        return;
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    snprintf(port, sizeof port, "%u", (unsigned)out->address.port);
    r->out = out;
    r->req.data = r;
    rv = uv_getaddrinfo(t->loop, &r->req, on_resolved, out->address.host, port,
                        &hints);
    if (rv != 0) {
        free(r);
        raft_uv_tcp_log(t, RAFT_LOG_WARN, "%s: resolve %s: %s", out->name,
                        out->address.host, uv_strerror(rv));
        raft_uv_tcp_out_fail(out);
        return;
    }
    out->refs++;
    t->n_handles++;
    t->n_resolving++;
    out->resolving = r;
    out->state = RAFT__UV_RESOLVING;
}

void raft_uv_resolve_cancel(struct raft_uv_out *out)
{
    struct raft_uv_resolve *r = out->resolving;

    if (r == NULL) {
        return;
    }
    out->resolving = NULL;
    uv_cancel((uv_req_t *)&r->req); /* fails once the pool runs it */
}
