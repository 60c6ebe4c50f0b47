/* Where a host connection's write lease comes from (lease_client.h): this
 * process's node, or another process's node over its attach socket. */

#include "lease_client.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../raft/err.h"
#include "../raftsql.h"
#include "../runtime/attach_sock.h"
#include "../runtime/leader_call.h"
#include "../runtime/node.h"
#include "attach_codec.h"
#include "attach_conn.h"
#include "registry.h"

/* Lease holder tokens, unique in the process. */
static atomic_uint_fast64_t next_holder = 1;

void lease_hold_init(struct lease_hold *h)
{
    memset(h, 0, sizeof *h);
    h->fd = -1;
}

uint64_t lease_client_holder_new(void)
{
    return (uint64_t)atomic_fetch_add(&next_holder, 1);
}

/* exchange sends the lease request @fn(@args) on @fd and decodes the
 * answer into @out, waiting at most @wait_ms for it. Returns 0, or where
 * it failed: *@sent false when the request did not go whole (the
 * write's code), true when no answer came or it was malformed
 * (RAFT_NOCONN, RAFT_TIMEOUT, RAFT_PROTO...). A node that refused the
 * connection before reading (busy, not let in) answered before the
 * write failed: that answer is read. */
static int exchange(int fd, const char *fn, const struct sql_value *args,
                    unsigned n, int wait_ms, struct ext_attach_answer *out,
                    bool *sent)
{
    char *text = NULL, *frame = NULL, err[200];
    size_t len = 0;
    int rc = attach_codec_call_encode(fn, args, n, &text, &len);

    *sent = false;
    if (rc == 0) {
        rc = attach_conn_frame_write(fd, text, len);
    }
    free(text);
    if (rc == RAFT_NOCONN &&
        attach_conn_frame_read(fd, EXT_EXEC_POLL_MS, NULL, &frame, &len) == 0) {
        rc = 0; /* its refusal, sent before it read the request */
    } else if (rc == 0) {
        *sent = true;
        rc = attach_conn_frame_read(fd, wait_ms, NULL, &frame, &len);
    }
    if (rc != 0) {
        return rc;
    }
    rc = attach_codec_answer_decode(frame, len, out, err, sizeof err);
    free(frame);
    *sent = true;
    return rc;
}

/* refused_early says whether @a is the node's refusal of the connection
 * before it read the request: "not applied: busy: ..." (over
 * socket_max_clients) or "not applied: refused: ..." (not let in); then
 * *@out_rc is RAFT_BUSY or RAFT_IOERR. */
static bool refused_early(const struct ext_attach_answer *a, int *out_rc)
{
    static const char prefix[] = "not applied: ";
    if (a->ok || strncmp(a->errmsg, prefix, sizeof prefix - 1) != 0 ||
        (a->code != RAFTSQL_BUSY && a->code != RAFTSQL_NO_NODE)) {
        return false;
    }
    *out_rc = a->code == RAFTSQL_BUSY ? RAFT_BUSY : RAFT_IOERR;
    return true;
}

/* node_code returns the project code an error answer to a lease request
 * carries, RAFT_PROTO when it is none. */
static int node_code(const struct ext_attach_answer *a)
{
    return a->code > 0 && a->code <= RAFT_DIVERGED ? a->code : RAFT_PROTO;
}

/* remote_acquire asks the node of pointer @p (for @path) for the lease
 * over a connection of its own (lease_client_acquire). */
static int remote_acquire(const char *path, const struct ext_attach_pointer *p,
                          uint64_t holder, unsigned flags,
                          struct lease_hold *out, char *why, size_t why_len)
{
    struct ext_attach_answer a;
    struct sql_value args[2] = {
        {.type = SQL_INTEGER, .integer = (int64_t)holder},
        {.type = SQL_INTEGER, .integer = (int64_t)flags},
    };
    /* The flags only to a node that takes them (attach_codec.h). */
    unsigned n = flags != 0 && p->version >= 4 ? 2 : 1;
    char err[400];
    bool sent;
    int fd = -1, rc;

    rc = attach_conn_connect(p->socket, &fd, err, sizeof err);
    if (rc == RAFT_NOCONN) {
        snprintf(
            why, why_len,
            "no raftsql node serves %s any more (its node stopped or died): "
            "start it (raft_start) and write again",
            path);
        return RAFT_NOTFOUND; /* a stale pointer file */
    }
    if (rc != 0) {
        snprintf(why, why_len,
                 "cannot reach the raftsql node of %.300s (pid %ld) for the "
                 "write lease: %s (its socket lets in the node's user, root "
                 "and raft_start's socket_group=)",
                 path, p->pid, err);
        return RAFT_IOERR;
    }
    rc = exchange(fd, EXT_ATTACH_LEASE_ACQUIRE, args, n,
                  (int)(p->timeout_ms + EXT_ATTACH_GRACE_MS), &a, &sent);
    if (rc != 0) {
        close(fd);
        snprintf(why, why_len,
                 "no write lease from the raftsql node of %.300s (pid %ld): "
                 "%s",
                 path, p->pid,
                 rc == RAFT_NOCONN ? "the connection closed before an answer "
                                     "came (its process stopped or died)"
                 : rc == RAFT_TIMEOUT ? "no answer in time"
                                      : raft_strerror(rc));
        return rc == RAFT_PROTO ? RAFT_PROTO : RAFT_NOCONN;
    }
    if (!a.ok) {
        close(fd);
        snprintf(why, why_len, "%s", a.errmsg);
        if (!refused_early(&a, &rc)) {
            rc = node_code(&a);
        }
        attach_codec_answer_free(&a);
        return rc;
    }
    if (a.value.type != SQL_INTEGER || a.value.integer == 0) {
        close(fd);
        attach_codec_answer_free(&a);
        snprintf(why, why_len,
                 "no write lease from the raftsql node of %.300s (pid %ld): "
                 "a malformed answer (no lease id)",
                 path, p->pid);
        return RAFT_PROTO;
    }
    out->id = (uint64_t)a.value.integer;
    out->fd = fd;
    out->pid = p->pid;
    out->timeout_ms = p->timeout_ms;
    out->version = p->version;
    return 0;
}

int lease_client_acquire(const char *path, uint64_t holder, unsigned flags,
                         struct lease_hold *out, char *why, size_t why_len)
{
    struct ext_node *node = ext_registry_acquire(path);
    struct ext_attach_pointer p;
    uint64_t id = 0;
    int rc;

    if (node != NULL) {
        rc = ext_node_lease_acquire(node, holder, flags, &id, why, why_len);
        ext_registry_release(node);
        if (rc == 0) {
            lease_hold_init(out);
            out->id = id;
        }
        return rc;
    }
    if (attach_sock_find(path, &p) != 0) {
        snprintf(
            why, why_len,
            "no raftsql node serves %s any more (its node stopped or died): "
            "start it (raft_start) and write again",
            path);
        return RAFT_NOTFOUND;
    }
    if (p.version < 2) {
        snprintf(why, why_len,
                 "the raftsql node of %.300s (pid %ld) runs an older release "
                 "of raftsql, whose socket speaks attach protocol %u and "
                 "grants no write lease to another process (plain SQL "
                 "writes need protocol 2); upgrade that node, or write "
                 "through raft_exec('...')",
                 path, p.pid, p.version);
        return RAFT_FORMAT;
    }
    return remote_acquire(path, &p, holder, flags, out, why, why_len);
}

/* remote_commit is lease_client_commit over @h's attach connection. */
static int remote_commit(const char *path, const struct lease_hold *h,
                         const void *p, size_t len, const unsigned char *locked,
                         char *why, size_t why_len)
{
    struct ext_attach_answer a;
    struct sql_value args[3] = {
        {.type = SQL_INTEGER, .integer = (int64_t)h->id},
        {.type = SQL_BLOB, .bytes = {.p = p, .len = len}},
        {.type = SQL_BLOB, .bytes = {.p = locked, .len = SQL_WAL_HDR_LEN}},
    };
    int wait_ms = (int)(h->timeout_ms + EXT_ATTACH_GRACE_MS);
    unsigned n = locked != NULL && h->version >= 3 ? 3 : 2;
    bool sent;
    int rc =
        exchange(h->fd, EXT_ATTACH_LEASE_COMMIT, args, n, wait_ms, &a, &sent);

    if (rc != 0 && !sent) {
        snprintf(why, why_len,
                 "not applied: cannot send the commit to the raftsql node "
                 "of %.300s (pid %ld): %s",
                 path, h->pid,
                 rc == RAFT_NOCONN ? "the connection closed (its node "
                                     "stopped, or its process stopped or "
                                     "died)"
                                   : raft_strerror(rc));
        return rc == RAFT_TOOBIG ? RAFT_TOOBIG : RAFT_NOCONN;
    }
    if (rc != 0) {
        snprintf(why, why_len,
                 "outcome unknown: %s from the raftsql node of %.300s (pid "
                 "%ld)%s",
                 rc == RAFT_NOCONN    ? "the connection closed before an "
                                        "answer came"
                 : rc == RAFT_TIMEOUT ? "no answer in time"
                 : rc == RAFT_PROTO   ? "a malformed answer"
                                      : raft_strerror(rc),
                 path, h->pid,
                 rc == RAFT_NOCONN ? ": its node stopped, or its process "
                                     "stopped or died"
                                   : "");
        return RAFT_UNKNOWN;
    }
    if (!a.ok) {
        snprintf(why, why_len, "%s", a.errmsg);
        rc = node_code(&a);
    }
    attach_codec_answer_free(&a);
    return rc;
}

int lease_client_commit(const char *path, const struct lease_hold *h,
                        const void *p, size_t len, const unsigned char *locked,
                        char *why, size_t why_len)
{
    struct ext_node *node;
    int rc;

    if (h->fd >= 0) {
        return remote_commit(path, h, p, len, locked, why, why_len);
    }
    node = ext_registry_acquire(path);
    if (node == NULL) {
        snprintf(
            why, why_len,
            "no raftsql node serves it any more (its node stopped or died): "
            "start it (raft_start) and write again");
        return RAFT_NOTFOUND;
    }
    /* No probe: it would run SQL on the holder's connection, which a
     * commit hook must not. The wait is bounded by exec_timeout_ms. */
    rc = ext_node_lease_commit(node, h->id, p, len, NULL, locked, why, why_len);
    ext_registry_release(node);
    return rc;
}

void lease_client_release(const char *path, struct lease_hold *h,
                          const struct sql_wal_marks *marks)
{
    if (h->fd >= 0) {
        struct ext_attach_answer a;
        struct sql_value args[2] = {
            {.type = SQL_INTEGER, .integer = (int64_t)h->id},
            {.type = SQL_BLOB, .bytes = {.p = marks, .len = sizeof *marks}},
        };
        /* A node of version 2 takes a second argument for a malformed
         * call: it goes from version 3 on. */
        unsigned n = marks != NULL && h->version >= 3 ? 2 : 1;
        bool sent;
        /* The answer comes once the node applied the lease's entry; the
         * node ends the lease with the connection anyway. */
        if (h->id != 0 && exchange(h->fd, EXT_ATTACH_LEASE_RELEASE, args, n,
                                   (int)(h->timeout_ms + EXT_ATTACH_GRACE_MS),
                                   &a, &sent) == 0) {
            attach_codec_answer_free(&a);
        }
        close(h->fd);
    } else if (h->id != 0) {
        struct ext_node *node = ext_registry_acquire(path);
        if (node != NULL) {
            ext_node_lease_release(node, h->id, marks);
            ext_registry_release(node);
        }
    }
    lease_hold_init(h);
}
