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

/* What a statement of a script is to the load. */
enum ext_load_role {
    EXT_LOAD_SEND = 0,  /* checked and sent as written */
    EXT_LOAD_CHECK = 1, /* checked, never sent: a .dump's PRAGMA
                           writable_schema and its statements of a
                           virtual table's shadow tables */
    EXT_LOAD_VTAB = 2,  /* a .dump's declaration of a virtual table
                           (INSERT INTO sqlite_schema ...): checked as
                           written, sent as its CREATE VIRTUAL TABLE */
};

/* One statement of a script. */
struct ext_load_stmt {
    size_t offset;     /* its first byte in the script */
    size_t len;        /* its bytes sent, up to and with its ';' (sql's when
                      set) */
    size_t script_len; /* its bytes in the script (0 for one added) */
    unsigned line;     /* the line (from 1) of its first byte */
    bool open_end;     /* the script's last statement, without its ';': its
                      chunk adds "\n;" */
    bool alone;        /* a PRAGMA: a chunk of its own */
    int role;          /* enum ext_load_role */
    char *sql;         /* the text sent when it is not the script's (a virtual
                      table's CREATE, a row rebuilt), NUL-terminated,
                      owned by the plan's script or gen; NULL otherwise */
};

/* A virtual table a .dump declares, of one of SQLite's own modules with
 * shadow tables (shadow.h): its rows are rebuilt (load_check.h). */
struct ext_load_vtab {
    char *name;      /* its name, owned */
    char module[32]; /* its module, as written */
    unsigned line;   /* the line of its declaration */
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
    struct ext_load_stmt *script;  /* the script's statements to check, in
                                      order (load_plan_split), owned */
    unsigned n_script;             /* of them */
    struct ext_load_vtab *vtabs;   /* the virtual tables it declares */
    unsigned n_vtabs;              /* of them */
    unsigned gen_at;               /* where the rows rebuilt go: before
                                      script[gen_at] (the .dump's PRAGMA
                                      writable_schema=OFF), or at the end */
    struct ext_load_stmt *gen;     /* the statements added (load_plan_add),
                                      owned */
    unsigned n_gen;                /* of them */
    unsigned gen_cap;              /* room in gen */
    unsigned n_internal;           /* statements of raftsql_* tables left
                                      out (a replica's own state) */
    struct ext_load_stmt *stmts;   /* the statements sent, n_stmts, owned
                                      (their sql points into script and
                                      gen): load_plan_finish */
    unsigned n_stmts;              /* statements sent */
    struct ext_load_chunk *chunks; /* n_chunks, owned */
    unsigned n_chunks;             /* chunks */
    unsigned n_skipped;            /* BEGIN, COMMIT, END left out */
    size_t chunk_bytes;            /* the bound it was made with, bytes */
    unsigned chunk_stmts;          /* the bound on statements per chunk */
};

/* Longest request id load_plan_request_id writes, with its NUL. */
#define EXT_LOAD_ID_MAX 96

/* load_plan_split splits the script @text (@len bytes, not NUL-terminated
 * necessarily) into statements, into *@out's script:
 *   - a statement ends at a ';' outside quotes ('', "", ``, []) and
 *     comments (-- to the end of the line, C-style) where
 *     sqlite3_complete says the text is complete (so the body of CREATE
 *     TRIGGER ... BEGIN ...; END; stays one statement); a last statement
 *     without its ';' is taken if adding one completes it;
 *   - BEGIN, COMMIT and END statements (the script's own transactions:
 *     each chunk is one) are left out and counted (n_skipped);
 *   - the statements of tables, indexes, triggers and views named
 *     raftsql_* (CREATE, INSERT INTO: a replica's internal state, as
 *     its .dump holds it) are left out and counted (n_internal);
 *   - a .dump's virtual table (PRAGMA writable_schema=ON; INSERT INTO
 *     sqlite_schema(type,name,tbl_name,rootpage,sql) VALUES('table',
 *     'ft','ft',0,'CREATE VIRTUAL TABLE ...'); its shadow tables' CREATE
 *     TABLE and INSERT; PRAGMA writable_schema=OFF) becomes its CREATE
 *     VIRTUAL TABLE (EXT_LOAD_VTAB), the rest being checked only
 *     (EXT_LOAD_CHECK); one of SQLite's own modules with shadow tables
 *     is listed in vtabs, for its rows to be rebuilt (load_plan_add).
 * Writes *@out only on success (free it with load_plan_free; then
 * load_plan_finish). Errors: RAFT_INVALID with @errmsg (@errmsg_len
 * bytes) naming the line: a NUL byte, an incomplete last statement (an
 * open quote, comment or trigger), ROLLBACK, SAVEPOINT or RELEASE (a
 * script's partial undo cannot hold across chunks), another write to
 * sqlite_schema, a contentless FTS4/FTS5 table (content='': its dump
 * holds an index only); RAFT_NOMEM. Any thread. */
int load_plan_split(const char *text, size_t len, struct ext_load_plan *out,
                    char *errmsg, size_t errmsg_len);

/* load_plan_add adds the statement @sql (NUL-terminated, malloc'd: the
 * plan owns it from here, also on failure) to @p, sent where the rows
 * rebuilt go (gen_at), after those added before, with line @line in
 * messages. Errors: RAFT_NOMEM. Any thread. */
int load_plan_add(struct ext_load_plan *p, char *sql, unsigned line);

/* load_plan_finish makes @p's statements sent (script's EXT_LOAD_SEND and
 * EXT_LOAD_VTAB ones, the added ones at gen_at) and its chunks:
 *   - chunks take statements in order while their SQL (the statements
 *     joined by newlines) stays within @chunk_bytes and @chunk_stmts; a
 *     statement longer than @chunk_bytes is a chunk of its own, and so
 *     is a PRAGMA (a cluster-wide setting such as a dump's PRAGMA
 *     foreign_keys=OFF must be a request of its own);
 *   - each chunk gets its link of the id chain (ext_load_chunk.chain): a
 *     chunk's id changes with its content and with any chunk before it.
 * The plan refers to @text by offsets: keep it for load_plan_chunk_sql.
 * Errors: RAFT_INVALID when nothing is left to send (@errmsg says so);
 * RAFT_NOMEM. Any thread. */
int load_plan_finish(struct ext_load_plan *p, const char *text,
                     size_t chunk_bytes, unsigned chunk_stmts, char *errmsg,
                     size_t errmsg_len);

/* load_plan_make is load_plan_split and load_plan_finish in one: *@out is
 * written only on success. Errors: theirs. Any thread. */
int load_plan_make(const char *text, size_t len, size_t chunk_bytes,
                   unsigned chunk_stmts, struct ext_load_plan *out,
                   char *errmsg, size_t errmsg_len);

/* load_plan_stmt_text returns the text of statement @s of a plan of
 * script @text (its sql, or its bytes of @text) and its length in
 * *@out_len (without the "\n;" an open last statement adds). Pure. */
const char *load_plan_stmt_text(const struct ext_load_stmt *s, const char *text,
                                size_t *out_len);

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
