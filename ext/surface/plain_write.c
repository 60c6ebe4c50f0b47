/* Plain SQL writes on a host connection (plain_write.h). */

#include "plain_write.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "../../raft/err.h"
#include "../../sql/changeset.h"
#include "../runtime/node.h"
#include "lease_client.h"
#include "plain_fault.h"
#include "registry.h"
#include "wal_lock.h"

SQLITE_EXTENSION_INIT3

/* The capture's memory bound when the node's max_request_bytes cannot be
 * read (no node of this process: another process's node refuses a larger
 * changeset at the commit): SQLite's own default row limit is far above
 * any request the log takes. */
#define PLAIN_WRITE_DEFAULT_MAX (64u << 20)

struct plain_write {
    struct sql_capture *capture; /* the connection's capture */
    char *path;                  /* its main file (malloc'd) */
    sqlite3 *db;                 /* the connection */
    uint64_t holder;             /* its lease holder token */
    const void *early;           /* the statement that asked for the lease
                                    at its start (wal_lock_early), until
                                    it ends; NULL: none */
    const void *one_try;         /* the statement that writes after its
                                    transaction read (wal_lock_one_try),
                                    until it ends; NULL: none */
    int64_t starved_at;          /* when a write of a transaction that
                                    read was last let go or refused
                                    (wal_lock_stmt_end), CLOCK_MONOTONIC
                                    ns; 0: not within
                                    WAL_LOCK_STARVED_MS */
    uint64_t starved_read;       /* the hash of the SQL text of that
                                    transaction's first statement */
    uint64_t txn_read;           /* the same of the transaction open */
    bool after_begin;            /* the last statement was a deferred
                                    BEGIN: the next one is the first of
                                    its transaction */
    int restart_tried;           /* the WAL's frames / PLAIN_WAL_FRAMES at
                                    the last backfill of on_wal; 0: under
                                    PLAIN_WAL_RESTART_FRAMES */
};

/* mono_ns returns CLOCK_MONOTONIC now, ns. */
static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The WAL's frames from which a plain writer's connection backfills it
 * after its commits, once per PLAIN_WAL_FRAMES more (the node's
 * checkpointer's marks, sql/checkpoint.c). */
#define PLAIN_WAL_RESTART_FRAMES 4000
#define PLAIN_WAL_FRAMES 1000

/* on_wal is the connection's WAL hook, called at the end of a step that
 * committed, its read transaction ended, with the WAL's frame count.
 * SQLite restarts the WAL (writes it from its start again) only in a
 * writer whose snapshot found every frame backfilled. Under plain writes
 * back to back none did: the writer waits for its entry's application in
 * the unlock of its write lock (wal_lock.c), still reading the frame
 * before its commit, so the node's checkpoints, run while it applies,
 * left that frame, and the WAL grew by two pages a plain write for as
 * long as they came (50 MB in 6,000 writes, 730 MB in five minutes:
 * tests/e2e/test_plain_wal.py). Here nothing holds a frame back (the
 * node applied the entry, this connection reads no more), so a passive
 * checkpoint backfills them all, and this connection's next write
 * transaction restarts the WAL. Once per PLAIN_WAL_FRAMES frames past
 * PLAIN_WAL_RESTART_FRAMES: a backfill fsyncs the database file (SQLite's
 * automatic checkpoint after every commit, which this replaces, cost 11 %
 * of the client threads' time with 64 plain writers). A failure (the
 * node's checkpointer runs one) is left to the next. */
static int on_wal(void *arg, sqlite3 *db, const char *name, int n_frames)
{
    struct plain_write *p = arg;

    if (n_frames < PLAIN_WAL_RESTART_FRAMES) {
        p->restart_tried = 0;
        return SQLITE_OK;
    }
    if (n_frames / PLAIN_WAL_FRAMES == p->restart_tried) {
        return SQLITE_OK;
    }
    p->restart_tried = n_frames / PLAIN_WAL_FRAMES;
    (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL,
                                    NULL);
    return SQLITE_OK;
}

/* What statement text begin_kind finds. */
enum { NOT_BEGIN, BEGIN_DEFERRED, BEGIN_WRITE };

/* begin_kind says whether statement text @sql is BEGIN IMMEDIATE or
 * BEGIN EXCLUSIVE (BEGIN_WRITE; sqlite3_stmt_readonly calls them
 * read-only: transaction statements), another BEGIN (BEGIN_DEFERRED), or
 * none (NOT_BEGIN), leading blanks skipped. */
static int begin_kind(const char *sql)
{
    static const char *const kinds[] = {"IMMEDIATE", "EXCLUSIVE"};

    if (sql == NULL) {
        return NOT_BEGIN;
    }
    sql += strspn(sql, " \t\r\n");
    if ((*sql | 0x20) != 'b' || sqlite3_strnicmp(sql, "BEGIN", 5) != 0) {
        return NOT_BEGIN;
    }
    sql += 5;
    sql += strspn(sql, " \t\r\n");
    for (unsigned i = 0; i < 2; i++) {
        if (sqlite3_strnicmp(sql, kinds[i], 9) == 0) {
            return BEGIN_WRITE;
        }
    }
    return BEGIN_DEFERRED;
}

/* first_read runs at the start of @stmt (text @sql), the first statement
 * of a deferred transaction, a read: notes its text's hash, and when a
 * write of a transaction that began with the same read was let go for a
 * stale snapshot (or refused the lease) within WAL_LOCK_STARVED_MS, this
 * is most likely its retry, which would meet the same: the lease is
 * asked for now and held to the transaction's end (wal_lock_txn_early).
 * Only then: a transaction that merely reads takes no lease, which would
 * hold every writer of the cluster while it reads. */
static void first_read(struct plain_write *pw, sqlite3_stmt *stmt,
                       const char *sql)
{
    if (sqlite3_get_autocommit(pw->db)) {
        return; /* its BEGIN failed */
    }
    pw->txn_read = XXH3_64bits(sql, strlen(sql));
    if (pw->starved_at == 0) {
        return;
    }
    if (mono_ns() - pw->starved_at >= WAL_LOCK_STARVED_MS * 1000000LL) {
        pw->starved_at = 0;
    } else if (pw->txn_read == pw->starved_read &&
               sqlite3_txn_state(pw->db, "main") == SQLITE_TXN_NONE) {
        wal_lock_txn_early(pw->db, stmt);
        pw->early = stmt;
    }
}

/* on_stmt is the capture's statement callback (sql_capture_stmt_cb) of
 * the connection of @arg (its struct plain_write): a statement that will
 * take the WAL write lock with no transaction open, hence no snapshot,
 * takes the lease at its start (wal_lock_early); one that writes in a
 * transaction that read first has one try at the lock (wal_lock_one_try);
 * a statement that ended without the lock lets an unused lease go. */
static void on_stmt(void *arg, sqlite3_stmt *stmt, int end)
{
    struct plain_write *pw = arg;
    const char *sql;
    bool readonly;
    int state;
    int kind;

    if (end == SQL_CAPTURE_STMT_END) {
        if (pw->early == stmt || pw->one_try == stmt) {
            pw->early = pw->early == stmt ? NULL : pw->early;
            pw->one_try = pw->one_try == stmt ? NULL : pw->one_try;
            if (wal_lock_stmt_end(pw->db, stmt)) {
                pw->starved_at = mono_ns();
                pw->starved_read = pw->txn_read;
            }
        }
        return;
    }
    readonly = sqlite3_stmt_readonly(stmt);
    sql = sqlite3_sql(stmt);
    kind = readonly ? begin_kind(sql) : NOT_BEGIN;
    if (readonly && kind != BEGIN_WRITE) {
        if (pw->after_begin && kind == NOT_BEGIN && sql != NULL) {
            first_read(pw, stmt, sql);
        }
        pw->after_begin = kind == BEGIN_DEFERRED;
        return;
    }
    pw->after_begin = false;
    /* (The transaction's state last: it costs a lookup of the schema by
     * name, and most statements are reads.) */
    state = sqlite3_txn_state(pw->db, "main");
    if (state == SQLITE_TXN_NONE) {
        wal_lock_early(pw->db, stmt);
        pw->early = stmt;
    } else if (state == SQLITE_TXN_READ && !readonly) {
        wal_lock_one_try(pw->db, stmt);
        pw->one_try = stmt;
    }
}

/* on_armed is the capture's armed callback (sql_capture_armed_cb) of
 * the connection of @arg (its struct plain_write): the wrapped write lock
 * follows (wal_lock_set_armed). */
static void on_armed(void *arg, int armed)
{
    struct plain_write *pw = arg;

    wal_lock_set_armed(pw->db, armed != 0);
}

int plain_write_enable(struct plain_write **pw, sqlite3 *db, const char *path,
                       char *why, size_t why_len)
{
    struct plain_write *p = *pw;
    struct ext_node *node;
    uint64_t max = PLAIN_WRITE_DEFAULT_MAX;
    char msg[256] = "";

    if (p != NULL) {
        return 0;
    }
    p = calloc(1, sizeof *p);
    if (p == NULL || (p->path = strdup(path)) == NULL) {
        free(p);
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    p->holder = lease_client_holder_new();
    node = ext_registry_acquire(path);
    if (node != NULL) {
        max = ext_node_max_request_bytes(node);
        ext_registry_release(node);
    }
    if (sql_capture_open(db, max, &p->capture, msg, sizeof msg) != 0) {
        snprintf(why, why_len,
                 "plain SQL writes need SQLite's pre-update hook: %s", msg);
        plain_write_free(p, 0);
        return -1;
    }
    if (wal_lock_wrap(db, path, p->holder, msg, sizeof msg) != 0) {
        snprintf(why, why_len, "plain SQL writes cannot take the lease: %s",
                 msg);
        plain_write_free(p, 0);
        return -1;
    }
    p->db = db;
    sql_capture_set_stmt_cb(p->capture, on_stmt, p);
    sql_capture_set_armed_cb(p->capture, on_armed, p);
    /* The node's checkpointer backfills the replica's WAL (the apply
     * connection's WAL hook, sql/checkpoint.c). SQLite's automatic
     * checkpoint on this connection (its default WAL hook: a passive
     * checkpoint after each commit once the WAL holds 1,000 frames) ran
     * after every plain COMMIT while the WAL was past that mark, an fsync
     * of the database file each, beside the next writer: 11 % of the
     * client threads' samples with 64 plain writers. Replaced by on_wal,
     * which backfills for the WAL's restart only. A host that sets
     * PRAGMA wal_autocheckpoint or a WAL hook afterwards has its own
     * way. */
    sqlite3_wal_hook(db, on_wal, p);
    *pw = p;
    return 0;
}

int plain_write_commit(struct plain_write *pw, sqlite3 *db, char *why,
                       size_t why_len)
{
    const struct lease_hold *lease;
    uint64_t id[2] = {0, 0};
    char reason[600] = "";
    void *payload = NULL;
    size_t len = 0;
    int rc;

    if (!sql_capture_intact(pw->capture)) {
        sql_capture_reset(pw->capture);
        snprintf(why, why_len,
                 "commit to %s refused, rolled back: a hook raftsql sets "
                 "to capture plain writes (the pre-update, trace or "
                 "rollback hook) was replaced on this connection, so its "
                 "changes cannot be replicated; leave those hooks to "
                 "raftsql on a connection that writes to a replica",
                 pw->path);
        return 1;
    }
    if (sql_capture_pending(pw->capture) == 0) {
        return 0;
    }
    lease = wal_lock_lease(db, reason, sizeof reason);
    if (lease == NULL) {
        sql_capture_reset(pw->capture);
        snprintf(why, why_len, "commit to %s refused, rolled back: %s",
                 pw->path,
                 reason[0] != '\0' ? reason
                                   : "this transaction holds no write lease");
        return 1;
    }
    rc = sql_capture_take(pw->capture, id, lease->id, &payload, &len, reason,
                          sizeof reason);
    if (rc != 0) {
        snprintf(why, why_len, "commit to %s refused, rolled back: %s",
                 pw->path, reason);
        return 1;
    }
    rc = lease_client_commit(pw->path, lease, payload, len,
                             wal_lock_locked_mark(db), reason, sizeof reason);
    free(payload);
    if (rc != 0) {
        snprintf(why, why_len, "commit to %s refused, rolled back: %s",
                 pw->path, reason);
        return 1;
    }
    plain_fault_after_quorum(db);
    wal_lock_skip_sync(db);
    return 0;
}

void plain_write_arm(struct plain_write *pw)
{
    sql_capture_arm(pw->capture);
}

void plain_write_set_gate(struct plain_write *pw, sql_capture_gate_cb gate,
                          void *arg)
{
    sql_capture_set_gate(pw->capture, gate, arg);
}

void plain_write_free(struct plain_write *pw, int closed)
{
    if (pw == NULL) {
        return;
    }
    sql_capture_close(pw->capture, closed);
    free(pw->path);
    free(pw);
}
