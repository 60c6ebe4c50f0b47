/* The plan of raft_load_sql (load_sql.h): a SQL script split into
 * complete statements, its transaction control left out, the rest grouped
 * into bounded chunks, each with a request id chained over the chunks
 * before it, so a rerun of a script whose first chunks are unchanged
 * finds them under the same ids. Pure (SQLite's sqlite3_complete and XXH3
 * only). */

#ifndef EXT_LOAD_PLAN_H
#define EXT_LOAD_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One statement of a script. */
struct ext_load_stmt {
    size_t offset; /* its first byte in the script */
    size_t len;    /* its bytes, up to and with its ';' */
    unsigned line; /* the line (from 1) of its first byte */
    bool open_end; /* the script's last statement, without its ';': its
                      chunk adds "\n;" */
    bool alone;    /* a PRAGMA: a chunk of its own */
};

/* One chunk: statements @first to @first + @n - 1 of the plan, one
 * request (one transaction). */
struct ext_load_chunk {
    unsigned first; /* index of its first statement in stmts */
    unsigned n;     /* statements in it, >= 1 */
    size_t bytes;   /* the length of its SQL text (load_plan_chunk_sql) */
    char chain[33]; /* its link of the id chain, 32 hex digits: XXH3-128
                       of the chain of the chunk before (16 zero bytes
                       for the first), its number (8 bytes, little
                       endian) and its SQL text */
};

/* A script's plan. */
struct ext_load_plan {
    struct ext_load_stmt *stmts;   /* the statements kept, n_stmts, owned */
    unsigned n_stmts;              /* statements kept */
    struct ext_load_chunk *chunks; /* n_chunks, owned */
    unsigned n_chunks;             /* chunks */
    unsigned n_skipped;            /* BEGIN, COMMIT, END left out */
    size_t chunk_bytes;            /* the bound it was made with, bytes */
    unsigned chunk_stmts;          /* the bound on statements per chunk */
};

/* Longest request id load_plan_request_id writes, with its NUL. */
#define EXT_LOAD_ID_MAX 96

/* load_plan_make splits the script @text (@len bytes, not NUL-terminated
 * necessarily) into statements and chunks into *@out:
 *   - a statement ends at a ';' outside quotes ('', "", ``, []) and
 *     comments (-- to the end of the line, C-style) where
 *     sqlite3_complete says the text is complete (so the body of CREATE
 *     TRIGGER ... BEGIN ...; END; stays one statement); a last statement
 *     without its ';' is taken if adding one completes it;
 *   - BEGIN, COMMIT and END statements (the script's own transactions:
 *     each chunk is one) are left out and counted;
 *   - chunks take statements in order while their SQL (the statements
 *     joined by newlines) stays within @chunk_bytes and @chunk_stmts; a
 *     statement longer than @chunk_bytes is a chunk of its own, and so
 *     is a PRAGMA (a cluster-wide setting such as a dump's PRAGMA
 *     foreign_keys=OFF must be a request of its own);
 *   - each chunk gets its link of the id chain (ext_load_chunk.chain): a
 *     chunk's id changes with its content and with any chunk before it.
 * The plan refers to @text by offsets: keep it for load_plan_chunk_sql.
 * Writes *@out only on success (free it with load_plan_free).
 * Errors: RAFT_INVALID with @errmsg (@errmsg_len bytes) naming the line:
 * a NUL byte, an incomplete last statement (an open quote, comment or
 * trigger), ROLLBACK, SAVEPOINT or RELEASE (a script's partial undo
 * cannot hold across chunks), an empty script; RAFT_NOMEM. Any thread. */
int load_plan_make(const char *text, size_t len, size_t chunk_bytes,
                   unsigned chunk_stmts, struct ext_load_plan *out,
                   char *errmsg, size_t errmsg_len);

/* load_plan_free frees what load_plan_make put in @p and zeroes it. */
void load_plan_free(struct ext_load_plan *p);

/* load_plan_chunk_sql returns chunk @k's SQL text (its statements of
 * @text joined by newlines, NUL-terminated, chunks[@k].bytes long),
 * malloc'd (the caller frees it), or NULL when out of memory. Pure. */
char *load_plan_chunk_sql(const struct ext_load_plan *p, const char *text,
                          unsigned k);

/* load_plan_request_id writes chunk @k's request id into @out
 * (EXT_LOAD_ID_MAX bytes): "load2:<k>:<chain>", so that chunk @k of two
 * scripts has the same id exactly when the chunks 0 to @k of both hold
 * the same SQL text (whatever follows, whatever the file). Returns its
 * length. A PRAGMA's chunk has one too (the chain goes through it), which
 * load_sql.c does not send. Pure. */
size_t load_plan_request_id(const struct ext_load_plan *p, unsigned k,
                            char out[EXT_LOAD_ID_MAX]);

#endif /* EXT_LOAD_PLAN_H */
