/* raft_load_sql's run (load_sql.h).
 *
 * Happy path: the script is mapped read-only and planned (load_plan.c);
 * each chunk goes through ext_node_exec under its request id, one
 * after the other, and the progress is recorded after each; a chunk that
 * an earlier run applied comes back as a duplicate (its first outcome),
 * counted as skipped. A PRAGMA's chunk goes without an id: applied on
 * every run.
 * Chunks go without raft_exec's check of a request (precheck.h): every
 * statement of them passed raft_exec's check of one statement before
 * the first chunk (load_check.h), and a PRAGMA, the only statement that
 * may set a cluster-wide setting, is a chunk of its own; a check of a
 * chunk on the caller's connection would also see less (it stops at the
 * first statement that needs a table an earlier one of the chunk
 * creates).
 * Failure modes: a bad file or plan writes nothing; a chunk's SQL error
 * stops the load naming the chunk and the failing statement's file and
 * line (the chunk rolled back on every node, those before stay); a chunk
 * not applied or of unknown outcome stops it too: a rerun resumes, since
 * the chunks applied come back as duplicates as long as they and those
 * before them are unchanged (within the request id window:
 * request_id_window, request_id_window_ms; beyond it they apply again). */

#include "load_sql.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3ext.h>

#include "../../raft/err.h"
#include "../../sql/sql.h"
#include "../raftsql.h"
#include "load_check.h"
#include "load_plan.h"

SQLITE_EXTENSION_INIT3

/* The script, mapped. */
struct script {
    const char *text; /* its bytes (read-only mapping) */
    size_t len;       /* its size */
};

/* map_script maps file @path into @out. */
static int map_script(const char *path, struct script *out, char *errmsg,
                      size_t errmsg_len)
{
    struct stat st;
    void *p;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        /* Missing, not allowed, a directory on the way: the path. */
        int e = errno;
        snprintf(errmsg, errmsg_len, "%s: %s", path, strerror(e));
        return e == EIO ? RAFT_IOERR : RAFT_INVALID;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(errmsg, errmsg_len, "%s: not a regular file", path);
        close(fd);
        return RAFT_INVALID;
    }
    if (st.st_size == 0) {
        snprintf(errmsg, errmsg_len, "%s is empty", path);
        close(fd);
        return RAFT_INVALID;
    }
    p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(errmsg, errmsg_len, "%s: mmap: %s", path, strerror(errno));
        return RAFT_IOERR;
    }
    out->text = p;
    out->len = (size_t)st.st_size;
    return 0;
}

/* plan plans script @sc (load_plan_split), checks it whole on a
 * temporary database holding the schema of @db_path (load_check_run,
 * which adds the rows of a .dump's virtual tables; *@out_refused says
 * whether raft_exec's policy refused a statement) and makes its chunks
 * of at most @bound bytes (load_plan_finish), into *@out. */
static int plan(const char *db_path, const struct script *sc, size_t bound,
                struct ext_load_plan *out, bool *out_refused, char *why,
                size_t why_len)
{
    int rc = load_plan_split(sc->text, sc->len, out, why, why_len);
    *out_refused = false;
    if (rc != 0) {
        return rc;
    }
    why[0] = '\0';
    rc = load_check_run(db_path, out, sc->text, out_refused, why, why_len);
    if (rc == 0) {
        rc = load_plan_finish(out, sc->text, bound, EXT_LOAD_CHUNK_STMTS, why,
                              why_len);
    }
    if (rc != 0) {
        load_plan_free(out);
    }
    return rc;
}

/* failed_stmt returns the index of the statement of chunk @k of @pl that
 * SQL error offset @err_at (ext_exec_result.err_at, 0: unknown) points
 * into: the first one ending after it. The chunk's first one when
 * unknown. */
static unsigned failed_stmt(const struct ext_load_plan *pl, unsigned k,
                            size_t err_at)
{
    const struct ext_load_chunk *c = &pl->chunks[k];
    size_t pos = 0;
    if (err_at == 0) {
        return c->first;
    }
    for (unsigned i = c->first; i < c->first + c->n; i++) {
        const struct ext_load_stmt *s = &pl->stmts[i];
        pos += s->len + (s->open_end ? 2 : 0);
        if (pos > err_at - 1) {
            return i;
        }
        pos++; /* the newline between two statements */
    }
    return c->first + c->n - 1;
}

/* describe_chunk writes "chunk K of N (<path> line L: <statement>)" for
 * chunk @k of @pl, script @path, into @buf (@len bytes): the statement
 * @i (shortened), where the error is. */
static void describe_chunk(const struct ext_load_plan *pl, const char *text,
                           const char *path, unsigned k, unsigned i, char *buf,
                           size_t len)
{
    const struct ext_load_stmt *s = &pl->stmts[i];
    char head[81];
    size_t len_all;
    const char *t = load_plan_stmt_text(s, text, &len_all);
    size_t n = len_all < 60 ? len_all : 60;
    for (size_t j = 0; j < n; j++) {
        char c = t[j];
        head[j] = c == '\n' || c == '\r' || c == '\t' ? ' ' : c;
    }
    snprintf(head + n, sizeof head - n, "%s", len_all > 60 ? "..." : "");
    snprintf(buf, len, "chunk %u of %u (%.600s line %u: %s)", k + 1,
             pl->n_chunks, path, s->line, head);
}

/* check_sizes refuses a plan with a chunk whose request would exceed
 * @max_request_bytes (a statement larger than @bound, alone in its chunk),
 * before any chunk is sent: such a chunk would fail alike at every run.
 * Returns 0, or RAFT_TOOBIG with @errmsg (@errmsg_len bytes) naming it;
 * RAFT_NOMEM. */
static int check_sizes(const struct ext_load_plan *pl, const char *text,
                       const char *path, size_t bound,
                       uint64_t max_request_bytes, char *errmsg,
                       size_t errmsg_len)
{
    char id[EXT_LOAD_ID_MAX], why[300], where[800];
    for (unsigned k = 0; k < pl->n_chunks; k++) {
        struct sql_request_opts o = {.client_id = NULL};
        size_t size = 0;
        char *sql;
        int rc;
        if (pl->chunks[k].bytes <= bound) {
            continue; /* its request header is far below the rest */
        }
        sql = load_plan_chunk_sql(pl, text, k);
        if (sql == NULL) {
            snprintf(errmsg, errmsg_len, "out of memory");
            return RAFT_NOMEM;
        }
        if (!pl->stmts[pl->chunks[k].first].alone) {
            o.client_id = id;
            o.client_id_len = load_plan_request_id(pl, k, id);
        }
        rc = sql_request_size_opts(sql, pl->chunks[k].bytes, NULL, 0, &o,
                                   max_request_bytes, &size, why, sizeof why);
        free(sql);
        if (rc == SQL_ERR_TOOBIG) {
            describe_chunk(pl, text, path, k, pl->chunks[k].first, where,
                           sizeof where);
            snprintf(errmsg, errmsg_len,
                     "not loaded: %s: %s: raise max_request_bytes on every "
                     "node (and exec_timeout_ms with it: a large request "
                     "takes seconds), or split the statement",
                     where, why);
            return RAFT_TOOBIG;
        }
    }
    return 0;
}

/* run_chunks writes @pl's chunks through @n, recording progress @p in
 * @ls. */
static int run_chunks(struct ext_node *n, struct ext_load_status *ls,
                      const struct ext_load_plan *pl, const char *text,
                      const char *path, const struct ext_exec_probe *probe,
                      struct ext_load_progress *p, int *out_sqlite_rc,
                      char *errmsg, size_t errmsg_len)
{
    struct ext_exec_result res;
    char id[EXT_LOAD_ID_MAX], where[800];
    int rc = 0;

    for (unsigned k = 0; k < pl->n_chunks && rc == 0; k++) {
        struct ext_exec_opts opts = {.request_id = id};
        char *sql;
        if (probe != NULL && probe->interrupted(probe->data)) {
            describe_chunk(pl, text, path, k, pl->chunks[k].first, where,
                           sizeof where);
            snprintf(errmsg, errmsg_len,
                     "interrupted: not applied: %s; run raft_load_sql "
                     "again to resume",
                     where);
            *out_sqlite_rc = RAFTSQL_INTERRUPTED;
            return RAFT_CANCELED;
        }
        sql = load_plan_chunk_sql(pl, text, k);
        if (sql == NULL) {
            snprintf(errmsg, errmsg_len, "out of memory");
            *out_sqlite_rc = SQLITE_NOMEM;
            return RAFT_NOMEM;
        }
        if (pl->stmts[pl->chunks[k].first].alone) {
            /* A PRAGMA, idempotent as every one raft_exec takes: sent
             * without an id, so that each call sets it again (a setting
             * changed since an earlier load is not left as it is). */
            opts.request_id = NULL;
        } else {
            opts.request_id_len = load_plan_request_id(pl, k, id);
        }
        memset(&res, 0, sizeof res);
        ext_node_exec(n, sql, pl->chunks[k].bytes, NULL, 0, &opts, probe, &res);
        free(sql);
        if (res.kind == EXT_EXEC_OK) {
            if (res.duplicate) {
                p->skipped++;
            } else {
                p->applied++;
            }
            p->chunks_done++;
            p->bytes_done += pl->chunks[k].bytes;
            load_status_publish(ls, p);
        } else if (res.wire_gated) {
            /* A member of an older release: retrying will not help
             * before the upgrade ends. */
            const char *why = res.errmsg;
            if (strncmp(why, "raft_exec: ", 11) == 0) {
                why += 11;
            }
            describe_chunk(pl, text, path, k, pl->chunks[k].first, where,
                           sizeof where);
            snprintf(errmsg, errmsg_len,
                     "%s: %s; raft_load_sql works once every member runs "
                     "this release (its chunks carry request ids)",
                     where, why);
            *out_sqlite_rc = res.sqlite_rc;
            rc = RAFT_FORMAT;
        } else {
            describe_chunk(pl, text, path, k,
                           res.kind == EXT_EXEC_SQL_ERROR
                               ? failed_stmt(pl, k, res.err_at)
                               : pl->chunks[k].first,
                           where, sizeof where);
            snprintf(errmsg, errmsg_len, "%s: %s%s", where, res.errmsg,
                     res.kind == EXT_EXEC_SQL_ERROR
                         ? ""
                         : "; run raft_load_sql again to resume (the "
                           "chunks applied are not applied again)");
            *out_sqlite_rc =
                res.sqlite_rc != SQLITE_OK ? res.sqlite_rc : SQLITE_ERROR;
            rc = res.kind == EXT_EXEC_SQL_ERROR ? RAFT_INVALID : RAFT_TIMEOUT;
        }
        ext_exec_result_clear(&res);
    }
    return rc;
}

int load_sql_run(struct ext_node *n, struct ext_load_status *ls,
                 uint64_t max_request_bytes, const char *db_path,
                 const char *path, const struct ext_exec_probe *probe,
                 char **out_json, int *out_sqlite_rc, char *errmsg,
                 size_t errmsg_len)
{
    struct ext_load_progress p;
    struct ext_load_plan pl;
    struct script sc = {NULL, 0};
    size_t bound = EXT_LOAD_CHUNK_BYTES;
    char why[1000];
    bool refused = false;
    json_t *o;
    int rc;

    *out_sqlite_rc = SQLITE_ERROR;
    if (max_request_bytes / 2 < bound) {
        bound = (size_t)(max_request_bytes / 2);
    }
    rc = load_status_begin(ls, path, &p, errmsg, errmsg_len);
    if (rc != 0) {
        *out_sqlite_rc = RAFTSQL_BUSY;
        return rc;
    }
    rc = map_script(path, &sc, why, sizeof why);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "%s", why);
    } else {
        rc = plan(db_path, &sc, bound, &pl, &refused, why, sizeof why);
        if (rc != 0) {
            snprintf(errmsg, errmsg_len, "%.3000s: %s", path, why);
        }
    }
    if (rc == 0) {
        rc = check_sizes(&pl, sc.text, path, bound, max_request_bytes, errmsg,
                         errmsg_len);
        if (rc != 0) {
            load_plan_free(&pl);
        }
    }
    if (rc != 0) {
        /* Nothing written: the file (its path, its type) or its plan; a
         * statement raft_exec refuses has raft_exec's code. */
        *out_sqlite_rc = rc == RAFT_NOMEM    ? SQLITE_NOMEM
                         : rc == RAFT_IOERR  ? SQLITE_IOERR
                         : rc == RAFT_TOOBIG ? RAFTSQL_TOOBIG
                         : refused           ? RAFTSQL_REFUSED
                                             : RAFTSQL_INVALID;
        goto out;
    }
    p.n_chunks = pl.n_chunks;
    p.n_stmts = pl.n_stmts;
    for (unsigned k = 0; k < pl.n_chunks; k++) {
        p.bytes_total += pl.chunks[k].bytes;
    }
    load_status_publish(ls, &p);
    rc = run_chunks(n, ls, &pl, sc.text, path, probe, &p, out_sqlite_rc, errmsg,
                    errmsg_len);
    if (rc == 0) {
        o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "path", path, "chunks",
                      (json_int_t)pl.n_chunks, "statements",
                      (json_int_t)pl.n_stmts, "applied", (json_int_t)p.applied,
                      "skipped", (json_int_t)p.skipped, "bytes",
                      (json_int_t)p.bytes_total);
        *out_json = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (*out_json == NULL) {
            snprintf(errmsg, errmsg_len, "out of memory");
            rc = RAFT_NOMEM;
        }
    }
    load_plan_free(&pl);
out:
    if (sc.text != NULL) {
        munmap((void *)sc.text, sc.len);
    }
    p.state = rc == 0 ? EXT_LOAD_DONE : EXT_LOAD_FAILED;
    if (rc != 0) {
        snprintf(p.error, sizeof p.error, "%s", errmsg);
    }
    load_status_publish(ls, &p);
    return rc;
}
