/* The attach client (attach_client.h): one connection to the node's
 * socket per call, so that a connection holds nothing between calls and
 * a node that restarted is found again at the next call.
 *
 * Happy path: read the pointer file -> connect -> write the call -> wait
 * for the answer (polling the caller's interrupt) -> set the result.
 * Failure modes: no pointer file, a dead pid or a refused connection (no
 * node: the caller says so); permission denied (not applied); the
 * connection closed before the answer, or none within the node's
 * exec_timeout_ms and 10 s (outcome unknown; for a read, "no answer";
 * raft_load_sql and raft_backup wait on, as long as their work takes);
 * interrupted (outcome unknown, but for a read); the node refused the
 * connection before reading the call ("<fn>: not applied: busy" or
 * "refused"; for a read "<fn>: busy", "<fn>: refused"). A node serving
 * as many connections as it takes (socket_max_clients=) answers "busy"
 * before reading the call: the caller connects again after a pause, as
 * SQLite's own busy handler retries a locked database, until its
 * connection's busy timeout (bounded by the node's exec_timeout_ms) has
 * passed; then "busy", naming how long it waited. */

#include "attach_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../raft/err.h"
#include "../raftsql.h"
#include "../runtime/attach_sock.h"
#include "attach_conn.h"
#include "func_call.h"
#include "guard_check.h"

SQLITE_EXTENSION_INIT3

/* is_read tells whether @fn only reads the node's state: without an
 * answer, nothing is unknown but the answer. */
static bool is_read(const char *fn)
{
    return strcmp(fn, "raft_leader") == 0 || strcmp(fn, "raft_status") == 0 ||
           strcmp(fn, "raft_metrics") == 0 || strcmp(fn, "raft_members") == 0 ||
           strcmp(fn, "raft_cluster_id") == 0 ||
           strcmp(fn, "raft_barrier") == 0;
}

/* no_answer_code returns the result code (raftsql.h) of call @fn that
 * ended in @rc before an answer came, as say_no_answer words it: a
 * barrier without an answer is a read not made fresh (RAFTSQL_STALE, as
 * its other failures), another read RAFTSQL_NOT_APPLIED. */
static int no_answer_code(const char *fn, int rc)
{
    if (rc == RAFT_CANCELED) {
        return is_read(fn) ? RAFTSQL_INTERRUPTED : RAFTSQL_INTERRUPTED_UNKNOWN;
    }
    if (strcmp(fn, "raft_barrier") == 0) {
        return RAFTSQL_STALE;
    }
    return is_read(fn) ? RAFTSQL_NOT_APPLIED : RAFTSQL_UNKNOWN;
}

/* is_long tells whether @fn runs as long as its work takes (a whole
 * script, a copy of the whole database), each step of it bounded in the
 * node's process: its caller waits without a deadline, until the answer,
 * its interrupt, or the node's process closing the connection. */
static bool is_long(const char *fn)
{
    return strcmp(fn, "raft_load_sql") == 0 || strcmp(fn, "raft_backup") == 0;
}

/* say_no_answer writes into @why the error of call @fn to the node of
 * @file (pid @pid) that ended in @rc before an answer came, having waited
 * at most @wait_ms. */
static void say_no_answer(const char *fn, const char *file, long pid, int rc,
                          int wait_ms, char *why, size_t why_len)
{
    if (rc == RAFT_CANCELED) {
        snprintf(why, why_len,
                 is_read(fn) ? "%s: interrupted before the raftsql node (pid "
                               "%ld) answered"
                             : "%s: interrupted: outcome unknown: the call was "
                               "sent to the raftsql node (pid %ld), which may "
                               "still carry it out",
                 fn, pid);
    } else if (rc == RAFT_TIMEOUT && is_read(fn)) {
        snprintf(why, why_len,
                 "%s: no answer from the raftsql node of %.300s (pid %ld) "
                 "within %d s (the process may be stopped or overloaded)",
                 fn, file, pid, wait_ms / 1000);
    } else {
        snprintf(why, why_len,
                 "%s: %s: %s from the raftsql node of %.300s (pid %ld)%s", fn,
                 is_read(fn) ? "no answer" : "outcome unknown",
                 rc == RAFT_TIMEOUT ? "no answer in time"
                 : rc == RAFT_NOCONN
                     ? "the connection closed before an answer came"
                     : raft_strerror(rc),
                 file, pid,
                 rc == RAFT_NOCONN ? ": its process stopped or died" : "");
    }
}

bool attach_client_served(const char *file)
{
    struct ext_attach_pointer p;
    return attach_sock_find(file, &p) == 0;
}

/* call_once sends @fn(@args) to the node of pointer @pp (for @file) on
 * a connection of its own and decodes its answer into @out, as
 * roundtrip; *@out_busy tells whether that answer is the node's refusal
 * of a connection over socket_max_clients, sent before it read the call
 * (nothing of the call was done). */
static int call_once(sqlite3 *db, const char *file,
                     const struct ext_attach_pointer *pp, const char *fn,
                     const struct sql_value *args, unsigned n,
                     struct ext_attach_answer *out, bool *out_busy, int *code,
                     char *why, size_t why_len)
{
    static const char busy[] = "not applied: busy: ";
    struct ext_exec_probe probe = {func_call_interrupted, db};
    const struct ext_attach_pointer p = *pp;
    char err[400], *text = NULL, *frame = NULL;
    size_t len = 0;
    int fd = -1, rc, wait_ms;

    *out_busy = false;
    wait_ms = is_long(fn) ? -1 : (int)(p.timeout_ms + EXT_ATTACH_GRACE_MS);
    rc = attach_conn_connect(p.socket, &fd, err, sizeof err);
    if (rc == RAFT_NOCONN) {
        return RAFT_NOTFOUND; /* a stale pointer file: no node runs */
    }
    *code = RAFTSQL_NO_NODE;
    if (rc != 0) {
        snprintf(why, why_len,
                 "%s: not applied: cannot reach the raftsql node of %.300s "
                 "(pid %ld): %s (its socket lets in the node's user, root "
                 "and raft_start's socket_group=)",
                 fn, file, p.pid, err);
        return rc;
    }
    rc = attach_codec_call_encode(fn, args, n, &text, &len);
    if (rc == 0) {
        rc = attach_conn_frame_write(fd, text, len);
    }
    free(text);
    *code = rc == RAFT_TOOBIG ? RAFTSQL_TOOBIG : RAFTSQL_NOT_APPLIED;
    if (rc == RAFT_NOCONN &&
        attach_conn_frame_read(fd, EXT_EXEC_POLL_MS, NULL, &frame, &len) == 0) {
        rc = 0; /* it answered before reading: a refusal, "busy" */
    } else if (rc == 0) {
        rc = attach_conn_frame_read(fd, wait_ms, &probe, &frame, &len);
    } else {
        close(fd);
        snprintf(why, why_len,
                 "%s: not applied: cannot send the call to the raftsql node "
                 "(pid %ld): %s%s",
                 fn, p.pid, raft_strerror(rc),
                 rc == RAFT_TOOBIG ? " (over 192 MiB encoded: blobs travel "
                                     "in hex)"
                                   : "");
        return rc;
    }
    close(fd);
    if (rc != 0) {
        *code = no_answer_code(fn, rc);
        say_no_answer(fn, file, p.pid, rc, wait_ms, why, why_len);
        return rc;
    }
    rc = attach_codec_answer_decode(frame, len, out, err, sizeof err);
    free(frame);
    if (rc == 0 && !out->ok && strncmp(out->errmsg, "not applied: ", 13) == 0) {
        /* The node refused the connection before reading the call (busy,
         * or not let in): the error kind, with the caller's name; a read
         * had nothing to apply ("raft_barrier: busy: ..."). */
        char refusal[sizeof out->errmsg];
        *out_busy = out->code == RAFTSQL_BUSY &&
                    strncmp(out->errmsg, busy, sizeof busy - 1) == 0;
        memcpy(refusal, out->errmsg, sizeof refusal);
        snprintf(out->errmsg, sizeof out->errmsg, "%.*s: %.*s",
                 EXT_ATTACH_FN_MAX, fn,
                 (int)(sizeof refusal - EXT_ATTACH_FN_MAX - 3),
                 refusal + (is_read(fn) ? 13 : 0));
    }
    if (rc != 0) {
        *code = RAFTSQL_UNKNOWN;
        snprintf(why, why_len,
                 "%s: outcome unknown: a malformed answer from the raftsql "
                 "node (pid %ld): %s",
                 fn, p.pid, err);
    }
    return rc;
}

/* busy_timeout_ms returns the busy timeout of connection @db (PRAGMA
 * busy_timeout: SQLite has no C call that reads it), 0 when it cannot be
 * read. Prepared with the guard set aside: a host's authorizer never sees
 * raftsql's own statement. */
static int busy_timeout_ms(sqlite3 *db)
{
    struct guard_check seen;
    sqlite3_stmt *s = NULL;
    int ms = 0;
    guard_check_begin(&seen);
    if (sqlite3_prepare_v2(db, "PRAGMA busy_timeout", -1, &s, NULL) ==
            SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW) {
        ms = sqlite3_column_int(s, 0);
    }
    sqlite3_finalize(s);
    guard_check_end();
    return ms > 0 ? ms : 0;
}

/* now_ms is the monotonic clock, ms. */
static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* roundtrip sends @fn(@args) to the node of @file and decodes its answer
 * into @out. A node that serves as many connections as it takes refuses
 * before reading the call: it is called again after a pause (SQLite's
 * busy handler's steps, at most EXT_EXEC_POLL_MS, so an interrupt ends
 * the wait in time) until the busy timeout of @db, at most the node's
 * exec_timeout_ms, has passed; then @out holds the refusal, which says
 * how long the caller waited. Returns 0, RAFT_NOTFOUND (no node), or
 * another code with @code and @why (@why_len bytes) the caller's error
 * (RAFTSQL_INTERRUPTED for an interrupt while waiting for a free
 * connection: nothing was done). */
static int roundtrip(sqlite3 *db, const char *file, const char *fn,
                     const struct sql_value *args, unsigned n,
                     struct ext_attach_answer *out, int *code, char *why,
                     size_t why_len)
{
    static const int delays_ms[] = {1, 2, 5, 10, 15, 20, 25, 25, 25, 50};
    struct ext_attach_pointer p;
    int64_t start = 0, waited = 0, limit = -1;
    unsigned tries = 0;
    bool busy;
    int rc;

    for (;;) {
        int delay;
        if (attach_sock_find(file, &p) != 0) {
            return RAFT_NOTFOUND;
        }
        rc = call_once(db, file, &p, fn, args, n, out, &busy, code, why,
                       why_len);
        if (rc != 0 || !busy) {
            return rc;
        }
        if (limit < 0) {
            start = now_ms();
            limit = busy_timeout_ms(db);
            if (limit > (int64_t)p.timeout_ms) {
                limit = (int64_t)p.timeout_ms;
            }
        }
        waited = now_ms() - start;
        if (waited >= limit) {
            break;
        }
        delay = delays_ms[tries < sizeof delays_ms / sizeof delays_ms[0]
                              ? tries
                              : sizeof delays_ms / sizeof delays_ms[0] - 1];
        if (delay > limit - waited) {
            delay = (int)(limit - waited);
        }
        tries++;
        if (func_call_interrupted(db)) {
            attach_codec_answer_free(out);
            *code = RAFTSQL_INTERRUPTED;
            snprintf(why, why_len,
                     is_read(fn)
                         ? "%s: interrupted while waiting for a free "
                           "connection to the raftsql node (pid %ld)"
                         : "%s: interrupted: not applied: it waited for "
                           "a free connection to the raftsql node "
                           "(pid %ld)",
                     fn, p.pid);
            return RAFT_CANCELED;
        }
        attach_codec_answer_free(out);
        usleep((useconds_t)delay * 1000);
    }
    {
        /* The refusal, with how long this caller waited for its turn. */
        static const char retry[] = "; retry";
        size_t len = strlen(out->errmsg);
        if (len >= sizeof retry - 1 &&
            strcmp(out->errmsg + len - (sizeof retry - 1), retry) == 0) {
            len -= sizeof retry - 1;
        }
        snprintf(out->errmsg + len, sizeof out->errmsg - len,
                 "; none came free within %lld ms (this connection's busy "
                 "timeout, at most the node's exec_timeout_ms=%u); retry "
                 "later",
                 (long long)waited, (unsigned)p.timeout_ms);
    }
    return 0;
}

/* result_value sets @v as @ctx's result. */
static void result_value(sqlite3_context *ctx, const struct sql_value *v)
{
    switch (v->type) {
        case SQL_INTEGER:
            sqlite3_result_int64(ctx, v->integer);
            break;
        case SQL_FLOAT:
            sqlite3_result_double(ctx, v->real);
            break;
        case SQL_TEXT:
            sqlite3_result_text64(ctx, v->bytes.p, v->bytes.len,
                                  SQLITE_TRANSIENT, SQLITE_UTF8);
            break;
        case SQL_BLOB:
            sqlite3_result_blob64(ctx, v->bytes.p, v->bytes.len,
                                  SQLITE_TRANSIENT);
            break;
        default:
            sqlite3_result_null(ctx);
            break;
    }
}

bool attach_client_call(sqlite3_context *ctx, const char *file, const char *fn,
                        int argc, sqlite3_value **argv, int64_t *out_rowid)
{
    struct ext_attach_answer a;
    struct sql_value *args = NULL;
    char why[1400];
    int code = SQLITE_ERROR, rc;

    if (argc > 0 && (args = calloc((size_t)argc, sizeof *args)) == NULL) {
        sqlite3_result_error_nomem(ctx);
        return true;
    }
    for (int i = 0; i < argc; i++) {
        func_call_value(argv[i], &args[i]);
    }
    rc = roundtrip(sqlite3_context_db_handle(ctx), file, fn, args,
                   (unsigned)argc, &a, &code, why, sizeof why);
    free(args);
    if (rc == RAFT_NOTFOUND) {
        return false;
    }
    if (rc != 0) {
        sqlite3_result_error(ctx, why, -1);
        sqlite3_result_error_code(ctx, code);
        return true;
    }
    if (a.ok) {
        result_value(ctx, &a.value);
        if (out_rowid != NULL) {
            *out_rowid = a.rowid;
        }
    } else {
        sqlite3_result_error(ctx, a.errmsg, -1);
        sqlite3_result_error_code(ctx, a.code != 0 ? a.code : SQLITE_ERROR);
    }
    attach_codec_answer_free(&a);
    return true;
}

int attach_client_table(sqlite3 *db, const char *file, const char *fn,
                        struct ext_attach_answer *out, char **errmsg)
{
    char why[1400];
    int code = 0;
    int rc = roundtrip(db, file, fn, NULL, 0, out, &code, why, sizeof why);
    if (rc != 0 && rc != RAFT_NOTFOUND) {
        *errmsg = sqlite3_mprintf("%s", why);
    }
    return rc;
}
