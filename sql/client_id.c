/* Client request ids (raft_exec_id, raft_query_id): a retry under the
 * same id gets the first outcome without applying again, on any node,
 * after a leader change or a restart (thesis §6.3, client sessions, with
 * the id chosen by the client).
 *
 * The table raftsql_client_requests holds, per id, the XXH3-128 digest
 * of what the request asked (its want-rows flag, SQL text and encoded
 * parameters), an ordinal (1, 2, ... over the id'd requests applied), the
 * entry's leader timestamp, and its outcome (rc, errmsg, changes,
 * last_insert_rowid, rows). It is written in the batch transaction, after
 * the request's savepoint ended, so a failed request's outcome is kept
 * too; snapshots carry it; the replica checksum leaves it out (a
 * raftsql_ table).
 *
 * The window, by count and by time, is stamped into each entry by the
 * leader (request_id_window, request_id_window_ms), so every node decides
 * alike. A row counts only when it lies inside the window of the entry
 * looking it up: ordinal > next - count and time_ms >= entry time -
 * window_ms, where next is the ordinal the entry would get. Rows that left
 * an entry's window are deleted when it is recorded (two index range
 * deletes): since the lookup checks the window itself, when rows go
 * changes no result. An unstamped window (0) takes the defaults. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3ext.h>
#include <xxhash.h>

#include "fsm_internal.h"

SQLITE_EXTENSION_INIT3

/* Defaults of an unstamped request (the config keys' defaults). */
#define SQL__CLIENT_WINDOW 100000
#define SQL__CLIENT_WINDOW_MS 86400000

/* window gives the request's window by count and by time. */
static void window(const struct sql_request *req, uint64_t *count, uint64_t *ms)
{
    *count = req->id_window != 0 ? req->id_window : SQL__CLIENT_WINDOW;
    *ms = req->id_window_ms != 0 ? req->id_window_ms : SQL__CLIENT_WINDOW_MS;
}

/* digest computes what the id stands for: the want-rows flag, the SQL
 * text and the encoded parameters. The text and the parameters lie back
 * to back in the payload (sql/request.c); the seed carries the flag and
 * the text's length, so that no two requests share the hashed input. */
static void digest(const struct sql_request *req, uint8_t out[16])
{
    XXH128_canonical_t c;

    uint64_t seed = (uint64_t)req->sql_len << 8 |
                    (uint64_t)(req->want_rows ? SQL_REQUEST_WANT_ROWS : 0);

    /* Invariant: params_data == sql + sql_len (sql_request_decode). */
    XXH128_canonicalFromHash(
        &c,
        XXH3_128bits_withSeed(req->sql, req->sql_len + req->params_len, seed));
    memcpy(out, c.digest, 16);
}

/* format_id writes client id @id (@len bytes) for a message: quoted when
 * printable ASCII, else in hex (cut at 64 bytes). */
static void format_id(const uint8_t *id, size_t len, char *out, size_t cap)
{
    size_t i, at = 0;
    int printable = 1;

    for (i = 0; i < len; i++) {
        if (id[i] < 0x20 || id[i] > 0x7e || id[i] == '\'') {
            printable = 0;
        }
    }
    if (printable) {
        snprintf(out, cap, "'%.*s%s'", len > 64 ? 64 : (int)len,
                 (const char *)id, len > 64 ? "..." : "");
        return;
    }
    at = (size_t)snprintf(out, cap, "x'");
    for (i = 0; i < len && i < 64 && at + 3 < cap; i++) {
        at += (size_t)snprintf(out + at, cap - at, "%02x", id[i]);
    }
    snprintf(out + at, cap - at, "%s'", len > 64 ? "..." : "");
}

/* next_ordinal reads the ordinal the next recorded id gets. */
static int next_ordinal(struct sql_fsm *f, int64_t *out)
{
    sqlite3_stmt *s = f->stmts[STMT_CLIENT_NEXT];
    int rc;

    f->internal = 1;
    rc = sqlite3_step(s);
    f->internal = 0;
    if (rc != SQLITE_ROW) {
        rc = fsm_fail(f, rc, "read raftsql_client_requests");
        sqlite3_reset(s);
        return rc;
    }
    *out = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    return 0;
}

/* dup_text returns a malloc'd copy of column @i of @s, NULL for NULL;
 * *@nomem is set when the copy fails. */
static char *dup_text(sqlite3_stmt *s, int i, int *nomem)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    char *c;

    if (t == NULL) {
        return NULL;
    }
    c = strdup((const char *)t);
    if (c == NULL) {
        *nomem = 1;
    }
    return c;
}

int client_id_lookup(struct sql_fsm *f, const struct sql_request *req,
                     struct sql_result *res, int *out_done,
                     struct client_key *out_key)
{
    sqlite3_stmt *s = f->stmts[STMT_CLIENT_FIND];
    uint64_t count, ms;
    int64_t next = 0;
    int rc, nomem = 0;

    *out_done = 0;
    window(req, &count, &ms);
    rc = next_ordinal(f, &next);
    if (rc != 0) {
        return rc;
    }
    out_key->next = next;
    digest(req, out_key->digest);
    sqlite3_bind_blob(s, 1, req->client_id, (int)req->client_id_len,
                      SQLITE_STATIC);
    f->internal = 1;
    rc = sqlite3_step(s);
    f->internal = 0;
    if (rc == SQLITE_ROW) {
        int64_t ordinal = sqlite3_column_int64(s, 1);
        int64_t time_ms = sqlite3_column_int64(s, 2);
        /* Inside the window of this entry, whatever was pruned yet. */
        int inside = (uint64_t)(next - ordinal) < count &&
                     time_ms >= req->time_ms - (int64_t)ms;

        if (inside) {
            const void *d = sqlite3_column_blob(s, 0);
            *out_done = 1;
            if (sqlite3_column_bytes(s, 0) == 16 && d != NULL &&
                memcmp(d, out_key->digest, 16) == 0) {
                res->id_duplicate = 1;
                res->rc = sqlite3_column_int(s, 3);
                res->errmsg = dup_text(s, 4, &nomem);
                res->changes = sqlite3_column_int64(s, 5);
                res->last_insert_rowid = sqlite3_column_int64(s, 6);
                res->rows = dup_text(s, 7, &nomem);
            } else {
                char id[160], msg[320];

                format_id(req->client_id, req->client_id_len, id, sizeof id);
                snprintf(msg, sizeof msg,
                         "request id %s was used for different SQL or "
                         "parameters; nothing applied (use a new id for a "
                         "new request)",
                         id);
                res->rc = SQLITE_CONSTRAINT;
                res->errmsg = strdup(msg);
                nomem = res->errmsg == NULL;
            }
        }
        rc = SQLITE_DONE;
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (rc != SQLITE_DONE) {
        return fsm_fail(f, rc, "read raftsql_client_requests");
    }
    if (nomem) {
        sql_errmsgf(f->errmsg, sizeof f->errmsg,
                    "client id lookup: out of memory");
        return SQL_ERR_NOMEM;
    }
    return 0;
}

int client_id_record(struct sql_fsm *f, const struct sql_request *req,
                     const struct sql_result *res, const struct client_key *key)
{
    sqlite3_stmt *s = f->stmts[STMT_CLIENT_RECORD];
    struct client_key k;
    uint64_t count, ms;
    int64_t next;
    int rc;

    window(req, &count, &ms);
    if (key == NULL) {
        rc = next_ordinal(f, &k.next);
        if (rc != 0) {
            return rc;
        }
        digest(req, k.digest);
        key = &k;
    }
    next = key->next;
    sqlite3_bind_blob(s, 1, req->client_id, (int)req->client_id_len,
                      SQLITE_STATIC);
    sqlite3_bind_blob(s, 2, key->digest, 16, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, next);
    sqlite3_bind_int64(s, 4, req->time_ms);
    sqlite3_bind_int(s, 5, res->rc);
    if (res->errmsg != NULL) {
        sqlite3_bind_text(s, 6, res->errmsg, -1, SQLITE_STATIC);
    }
    sqlite3_bind_int64(s, 7, res->changes);
    sqlite3_bind_int64(s, 8, res->last_insert_rowid);
    if (res->rows != NULL) {
        sqlite3_bind_text(s, 9, res->rows, -1, SQLITE_STATIC);
    }
    rc = schema_run(f, STMT_CLIENT_RECORD, "record client request id");
    if (rc != 0) {
        return rc;
    }
    /* Invariant: neither prune deletes the row just written (ordinal
     * next > next - count, as count >= 1; its time is the entry's). */
    if ((uint64_t)next > count) {
        sqlite3_bind_int64(f->stmts[STMT_CLIENT_PRUNE_COUNT], 1,
                           next - (int64_t)count);
        rc = schema_run(f, STMT_CLIENT_PRUNE_COUNT,
                        "prune raftsql_client_requests");
        if (rc != 0) {
            return rc;
        }
    }
    sqlite3_bind_int64(f->stmts[STMT_CLIENT_PRUNE_TIME], 1,
                       req->time_ms - (int64_t)ms);
    return schema_run(f, STMT_CLIENT_PRUNE_TIME,
                      "prune raftsql_client_requests");
}
