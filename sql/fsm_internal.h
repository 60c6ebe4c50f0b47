/* The state machine's struct, shared by the files of sql/ that implement it
 * (fsm.c opens and closes it; the others read its fields directly). Private
 * to sql/ and tests/sql/: nothing else may include this header. */

#ifndef SQL_FSM_INTERNAL_H
#define SQL_FSM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3ext.h>

#include "cache.h"
#include "checksum.h"
#include "determinism.h"
#include "paced_vfs.h"
#include "sql.h"

/* Busy timeout of the apply connection, ms. */
#define SQL__BUSY_TIMEOUT_MS 5000
/* Size of the message buffer of struct sql_fsm. */
#define SQL__ERRMSG 512

/* VM steps between two calls of the apply connection's progress handler
 * (the granularity of the work budget). */
#define SQL__FSM_PROGRESS_OPS 1000

/* Internal statements, prepared once at open (their SQL is in schema.c). */
enum {
    STMT_BEGIN,
    STMT_COMMIT,
    STMT_ROLLBACK,
    STMT_SAVEPOINT,
    STMT_RELEASE,
    STMT_ROLLBACK_TO,
    STMT_ZERO_CHANGES,
    STMT_DUP,
    STMT_RECORD,
    STMT_PRUNE,
    STMT_APPLIED,
    STMT_SET,
    STMT_SETTINGS,
    STMT_CONFIG,
    STMT_CLUSTER,
    STMT_CLUSTER_READ,
    STMT_CLIENT_FIND,
    STMT_CLIENT_NEXT,
    STMT_CLIENT_RECORD,
    STMT_CLIENT_PRUNE_COUNT,
    STMT_CLIENT_PRUNE_TIME,
    STMT_DATA_VERSION,
    STMT__N,
};

/* The checkpointer: a thread with a connection of its own that runs
 * SQLite's passive checkpoints, which the apply connection would
 * otherwise run inside a commit (automatic checkpoint: a backfill and
 * two fsyncs, 10 to 30 ms here) while every caller of the batch waits.
 * Invariant: at most one checkpoint runs at a time on either connection
 * (run_mu), so the durable checkpoint never fails for the checkpointer. */
struct sql_ckpt {
    sqlite3 *db;            /* its connection; NULL: not running,
                                        SQLite's automatic checkpoint
                                        stays on the apply connection */
    pthread_t thread;       /* runs ckpt_main */
    pthread_mutex_t sig_mu; /* guards want and stop */
    pthread_cond_t cond;    /* want or stop became true */
    bool want;              /* the WAL passed SQL__CHECKPOINT_FRAMES
                                        (checkpoint.c) */
    bool stop;              /* the thread returns */
    uint64_t committed;     /* applied index of the apply
                                        connection's last commit (sig_mu) */
    uint64_t durable;       /* the committed index read before the
                                        last checkpoint that backfilled
                                        every frame (sig_mu); 0: none */
    uint64_t gen;           /* bumped when the database is
                                        replaced or reread (sig_mu): a
                                        checkpoint begun before reports
                                        nothing */
    pthread_mutex_t run_mu; /* held while a checkpoint runs */
    int asked_mark;         /* the WAL's frames / SQL__CHECKPOINT_FRAMES
                               when on_wal last woke the thread (the
                               apply thread's: its WAL hook) */
    int restart_tried;      /* the WAL's frames / SQL__CHECKPOINT_FRAMES
                               when on_wal last backfilled for a restart
                               (checkpoint.c); 0: under the mark. The
                               apply thread's (its WAL hook) */
    struct paced_vfs vfs;   /* @db's VFS (registered: else the default),
                               paced by checkpoint_paced */
};

/* sql_fsm_set_busy_ms sets how long the apply connection of @f waits
 * for a lock another connection holds, @ms (SQLite's busy timeout, which
 * the connection's own busy handler keeps, fsm.c, cut short by
 * sql_fsm_interrupt). Apply thread. */
void sql_fsm_set_busy_ms(struct sql_fsm *f, unsigned ms);

/* The state machine (opaque in sql.h). */
struct sql_fsm {
    sqlite3 *db;                    /* the apply connection */
    char *path;                     /* its database file (malloc'd);
                                        immutable after open, so any thread
                                        may read it */
    uint64_t durable;               /* applied index known durable in the
                                        database file (see sql.h) */
    struct sql_determinism det;     /* seeded random(), entry-time VFS */
    sqlite3_stmt *stmts[STMT__N];   /* internal statements */
    pthread_mutex_t tail_mu;        /* guards @applied, @recorded and
                                       @applied_term against a snapshot's
                                       reading on another thread; the
                                       apply thread reads them without it */
    uint64_t applied;               /* last applied index */
    uint64_t recorded;              /* the index raftsql_applied holds:
                                       @applied, or less after batches of
                                       no-ops only (sql_fsm_apply writes
                                       nothing for them): the entries
                                       after it up to @applied are no-ops */
    uint64_t applied_term;          /* its term */
    int64_t applied_time_ms;        /* the latest request stamp applied
                                       (raftsql_applied.time_ms), valid
                                       when @has_applied_time */
    bool has_applied_time;          /* a request was ever applied (or
                                       came with a snapshot) */
    int internal;                   /* 1: our own statement, authorize all */
    bool created;                   /* sql_fsm_open created the raftsql_*
                                       tables (the database had none) */
    bool discard;                   /* sql_fsm_close drops them again
                                       (sql_fsm_discard_on_close) */
    int altered;                    /* 1: the request ran ALTER TABLE */
    unsigned settings;              /* the cluster-wide settings in force
                                       on the apply connection: bit i for
                                       pragma_setting_name(i) ON */
    int pragma_setting;             /* setting captured by the authorizer,
                                        or -1 */
    int pragma_value;               /* its value, -1 when not a boolean */
    char pragma_text[64];           /* the value as written */
    char deny[256];                 /* why the authorizer refused, or "" */
    char errmsg[SQL__ERRMSG];       /* message of the last failure */
    struct sql_cache cache;         /* prepared single-statement requests */
    uint64_t max_steps;             /* the running request's work budget,
                                        VM steps, 0 for none */
    uint64_t steps;                 /* VM steps it took so far (counted
                                        in SQL__FSM_PROGRESS_OPS) */
    int in_request;                 /* 1 while a request's statements
                                        run (the progress handler acts) */
    int budget_hit;                 /* 1: it ran out of its budget */
    atomic_int stopping;            /* sql_fsm_interrupt was called (any
                                        thread) */
    struct changeset_cache *tables; /* changeset_apply's tables learnt
                                       (changeset_apply.c), NULL before
                                       the first */
    unsigned busy_ms;               /* the apply connection's busy timeout,
                                       ms (fsm.c's on_busy; apply
                                       thread) */
    char *text;                     /* the running request's SQL text,
                                        NUL-terminated (malloc'd, reused) */
    size_t text_cap;                /* bytes allocated at text */
    struct sql_ckpt ckpt;           /* background checkpoints */
    int64_t data_version;           /* PRAGMA data_version when the
                                        database last held only the
                                        node's own commits (foreign.c) */
    int foreign;                    /* 1: a commit the node did not make
                                        was seen (sticky until a
                                        snapshot install) */
    char foreign_why[SQL__ERRMSG];  /* what was seen, when @foreign */
    int64_t schema_version;         /* PRAGMA schema_version at the node's
                                        own last commit (checksum on) or
                                        the last baseline (foreign.c) */
    char foreign_note[SQL__ERRMSG]; /* a moved data_version found to be
                                        no foreign write, not yet taken
                                        by sql_fsm_foreign_note, or "" */
    struct sql_checksum *ck;        /* the replica checksum (checksum.h),
                                        NULL until enabled */
    uint64_t landed_index;          /* a changeset entry found already
                                        committed by its writer (the
                                        batch's first, before its
                                        data_version was rebased), 0 */
    bool landed_schema;             /* that entry changes the schema */
    unsigned char wal_base[SQL_WAL_HDR_LEN]; /* the WAL-index header read
                                        at or before the moment the file
                                        last held only the node's own
                                        commits (foreign.c) */
    bool wal_base_ok;                        /* wal_base holds such a reading */
    uint64_t marks_index;                    /* the entry @marks are of, 0 */
    struct sql_wal_marks marks;              /* its writer's readings
                                        (sql_fsm_writer_marks) */
    uint64_t landed_confirm;                 /* the landed entry of the running
                                        batch whose writer's readings do
                                        not show it alone in the file:
                                        confirmed by a scan once counted
                                        (foreign_landed), 0 */
    bool landed_moved;              /* ... and the readings differ (they
                                        are known, and somebody else
                                        committed or checkpointed) */
    struct sql_copy_gate copy_gate; /* sql_fsm_set_copy_gate's (begin
                                       NULL: none) */
    struct sql_pace pace;           /* sql_fsm_set_pace's (rate 0: none) */
    uint64_t copy_slept_ms;         /* the last snapshot copy's pauses
                                       for its pace, ms (copy_pace.h);
                                       the creating thread's */
    uint64_t install_slept_ms;      /* the last install's, ms (the
                                       apply thread's) */
};

/* ---- fsm.c ---------------------------------------------------------- */

/* fsm_from_sqlite translates a SQLite failure code (primary or extended)
 * into a code of sql/err.h: SQL_ERR_NOMEM, SQL_ERR_CORRUPT (SQLITE_CORRUPT,
 * SQLITE_NOTADB) or SQL_ERR_IOERR for anything else. Any thread. */
int fsm_from_sqlite(int rc);

/* fsm_fail records a failure of SQLite code @rc during @what as @f's
 * message, "@what: <connection's message> (<code's text>)", and returns
 * the error code (fsm_from_sqlite). Thread: the apply thread. */
int fsm_fail(struct sql_fsm *f, int rc, const char *what);

/* fsm_is_environmental tells whether SQLite code @rc (primary or
 * extended) is a failure of this node's environment (I/O, full disk,
 * memory, corruption, a lock, an interrupt) rather than a result of the
 * SQL, the same on every node. Pure. */
int fsm_is_environmental(int rc);

/* fsm_bind_value binds @v to parameter @k of @s (a TEXT of length 0 as
 * '', a BLOB of length 0 as a zero-length blob). Returns SQLite's code.
 * Thread: the apply thread. */
int fsm_bind_value(sqlite3_stmt *s, int k, const struct sql_value *v);

struct sql_changeset;
struct changeset_cache;

/* What changeset_apply does. */
enum changeset_mode {
    CHANGESET_CHECK = 0,  /* only tell whether it landed */
    CHANGESET_APPLY = 1,  /* tell, then replay it or note it landed */
    CHANGESET_LANDED = 2, /* known to have landed (f->landed_index): note
                             it */
    CHANGESET_REPLAY = 3, /* known not to have landed: replay it */
};

/* changeset_apply applies changeset @cs of log index @index on the apply
 * connection, inside the running request's savepoint
 * (changeset_apply.c). CHANGESET_APPLY: when the file already holds its
 * effect (its writer's own commit), *@out_landed is set and only the
 * checksum is told; else its records are replayed, triggers and foreign
 * keys off. CHANGESET_CHECK changes nothing and only sets *@out_landed.
 * Returns 0, SQL_ERR_DIVERGED (a record does not apply: this replica is
 * not in the state the writer read; f->errmsg names the record), or an
 * environmental error (fsm_fail). Thread: the apply thread. */
int changeset_apply(struct sql_fsm *f, const struct sql_changeset *cs,
                    uint64_t index, enum changeset_mode mode, bool *out_landed);

/* changeset_cache_clear forgets the tables changeset_apply learnt on @f's
 * apply connection (their columns and statements, kept while the schema
 * stays the same): the database was replaced or reread. Thread: the
 * apply thread. */
void changeset_cache_clear(struct sql_fsm *f);

/* changeset_cache_free frees them, before the connection closes. Thread:
 * the apply thread (or the closing one). */
void changeset_cache_free(struct sql_fsm *f);

/* fsm_exec runs @sql on the apply connection of @f as an internal
 * statement (the authorizer lets it pass), outside sql_fsm_apply. Tests
 * use it to set connection limits. Returns 0, or the error code of the
 * SQLite failure with @f's message saying which. Thread: the apply
 * thread. */
int fsm_exec(struct sql_fsm *f, const char *sql);

/* fsm_reload re-reads the applied index, term and latest stamp of @f
 * from its database (adding the stamp's column to a snapshot of before),
 * makes the checkpointer forget what it knew, and re-applies the stored
 * cluster-wide settings (after the database content was replaced).
 * Returns 0 or an error code with @f's message saying which. Thread: the
 * apply thread. */
int fsm_reload(struct sql_fsm *f);

/* ---- schema.c: the internal tables and statements ------------------- */

/* schema_create creates the internal raftsql_* tables of @f's database if
 * missing and prepares the internal statements into f->stmts. Returns 0
 * or an error code with @errmsg (@errmsg_len bytes) saying which; the
 * statements prepared so far stay for schema_finalize. Thread: the apply
 * thread, at open. */
int schema_create(struct sql_fsm *f, char *errmsg, size_t errmsg_len);

/* snapshot_query_int runs @sql (one row, one integer column) on @db into
 * *@out. Returns SQLITE_OK, SQLITE_CORRUPT when there is no row, or the
 * SQLite code of the failure. Thread: @db's. */
int snapshot_query_int(sqlite3 *db, const char *sql, int64_t *out);

/* snapshot_sync_file fsyncs the file @path. Returns 0 or an errno value.
 * Any thread. */
int snapshot_sync_file(const char *path);

/* schema_tables_sql returns the SQL text (one transaction, BEGIN
 * IMMEDIATE to COMMIT) that creates the internal raftsql_* tables of a
 * database's main schema if missing, with raftsql_applied's row at index
 * and term 0: for schema_create, and for a bootstrap file being made
 * (bootstrap.c). Static storage. Any thread. */
const char *schema_tables_sql(void);

/* schema_applied_columns adds raftsql_applied.time_ms and schema_sum
 * when missing (a snapshot of a release before them was installed).
 * Returns 0 or an error code with @f's message saying which. Thread: the
 * apply thread, outside a batch. */
int schema_applied_columns(struct sql_fsm *f);

/* schema_client_table creates raftsql_client_requests and its indexes
 * when missing (a snapshot of a version before client ids was installed).
 * Returns 0 or an error code with @f's message saying which. Thread: the
 * apply thread, outside a batch. */
int schema_client_table(struct sql_fsm *f);

/* The names of the internal schema objects (tables and their indexes),
 * as an SQL list: every other name starting with raftsql_ (any case) is
 * no internal one. */
#define SCHEMA_INTERNAL_NAMES                                                  \
    "('raftsql_applied', 'raftsql_requests', 'raftsql_settings',"              \
    " 'raftsql_requests_idx', 'raftsql_config', 'raftsql_cluster',"            \
    " 'raftsql_client_requests', 'raftsql_client_requests_ordinal',"           \
    " 'raftsql_client_requests_time')"

/* schema_find_renamed writes into @out (@len bytes) the name of a schema
 * object under a raftsql_ name that is none of the internal ones (left by
 * ALTER TABLE ... RENAME TO raftsql_x), "" when there is none. Returns 0
 * or an error code with @f's message saying which. Thread: the apply
 * thread. */
int schema_find_renamed(struct sql_fsm *f, char *out, size_t len);

/* schema_finalize finalizes the internal statements of @f (NULL ones are
 * ignored). Thread: the apply thread, at close. */
void schema_finalize(struct sql_fsm *f);

/* schema_step runs internal statement @which (STMT_*) to completion and
 * resets it and its bindings. Returns SQLITE_OK or the (extended) SQLite
 * error code, with @f's message holding the connection's message. Thread:
 * the apply thread. */
int schema_step(struct sql_fsm *f, int which);

/* schema_run is schema_step with the failure recorded as "@what: <message>
 * (<code's text>)"; returns 0 or an error code. Thread: the apply
 * thread. */
int schema_run(struct sql_fsm *f, int which, const char *what);

/* schema_read_applied loads the applied index, term and latest stamp of
 * @f from raftsql_applied into f->applied, f->applied_term and
 * f->applied_time_ms (f->has_applied_time). Returns 0 or an
 * error code with @f's message saying which (SQL_ERR_CORRUPT when the row
 * is missing). Thread: the apply thread. */
int schema_read_applied(struct sql_fsm *f);

/* schema_load_settings applies the cluster-wide settings stored in
 * raftsql_settings to the apply connection, with SQLite's default (0) for
 * those never stored. Returns 0 or an error code with @f's message saying
 * which. Thread: the apply thread. */
int schema_load_settings(struct sql_fsm *f);

/* ---- config.c: the stored configuration ------------------------------ */

/* config_store records configuration entry @e (SQL_ENTRY_CONFIG) as the
 * stored configuration (raftsql_config), inside the running batch
 * transaction: a failed batch rolls it back with the rest. Returns 0 or an
 * error code with @f's message saying which. Thread: the apply thread. */
int config_store(struct sql_fsm *f, const struct sql_fsm_entry *e);

/* ---- cluster_id.c: the stored cluster id ---------------------------- */

/* cluster_id_store records cluster id entry @e (SQL_ENTRY_CLUSTER_ID) in
 * raftsql_cluster unless an id is stored already, inside the running
 * batch transaction. Returns 0 or an error code with @f's message saying
 * which: SQL_ERR_CORRUPT (not a cluster id payload), SQL_ERR_FORMAT (a
 * version it does not know), SQL_ERR_IOERR. Thread: the apply thread. */
int cluster_id_store(struct sql_fsm *f, const struct sql_fsm_entry *e);

/* ---- client_id.c: client request ids (raft_exec_id) ----------------- */

/* What client_id_lookup computed for a request, for client_id_record. */
struct client_key {
    uint8_t digest[16]; /* XXH3-128 of the request (canonical bytes) */
    int64_t next;       /* the ordinal the request gets when recorded */
};

/* client_id_lookup looks request @req's client id up in
 * raftsql_client_requests, counting only a row inside the request's
 * stamped window. Same digest: *@out_done is 1 and @res holds the first
 * outcome (id_duplicate set; nothing is to run). A different digest:
 * *@out_done is 1 and @res holds the SQL error saying so. Else *@out_done
 * is 0: run the request. Returns 0 or an error code with @f's message
 * saying which (the batch then fails). *@out_key gets the digest and the
 * next ordinal, valid for client_id_record of this request until the
 * batch changes the table. Thread: the apply thread, inside the batch
 * transaction. */
int client_id_lookup(struct sql_fsm *f, const struct sql_request *req,
                     struct sql_result *res, int *out_done,
                     struct client_key *out_key);

/* client_id_record stores outcome @res of request @req under its client
 * id (replacing an expired row of the same id) and prunes the rows that
 * left the request's window. @key is client_id_lookup's for @req, or NULL
 * (then computed anew). Returns 0 or an error code with @f's message
 * saying which. Thread: the apply thread, inside the batch transaction
 * (after the request's savepoint ended). */
int client_id_record(struct sql_fsm *f, const struct sql_request *req,
                     const struct sql_result *res,
                     const struct client_key *key);

/* ---- rows.c: the rows of a want-rows request, as JSON --------------- */

struct sql_rows; /* opaque */

/* rows_new starts the rows of one request, of at most @cap bytes of JSON;
 * NULL when out of memory. Free with rows_free. Thread: the apply thread. */
struct sql_rows *rows_new(uint64_t cap);

/* rows_free frees @r (NULL is ignored). */
void rows_free(struct sql_rows *r);

/* rows_statement starts the result of prepared statement @s, when it
 * returns rows (it has result columns). Returns 0, SQL_ERR_TOOBIG or
 * SQL_ERR_INVALID (SQL errors of the request: @errmsg, @errmsg_len bytes,
 * says why), or SQL_ERR_NOMEM. */
int rows_statement(struct sql_rows *r, sqlite3_stmt *s, char *errmsg,
                   size_t errmsg_len);

/* rows_add adds the row @s stands on (sqlite3_step returned SQLITE_ROW).
 * Returns as rows_statement (SQL_ERR_TOOBIG: over the cap;
 * SQL_ERR_INVALID: TEXT that is not UTF-8). */
int rows_add(struct sql_rows *r, sqlite3_stmt *s, char *errmsg,
             size_t errmsg_len);

/* rows_finish writes the request's JSON (shape: sql/rows.c), with
 * @changes and @last_insert_rowid, into *@out (malloc'd, the caller's).
 * Returns 0, SQL_ERR_TOOBIG (over the cap) or SQL_ERR_NOMEM, with
 * @errmsg. */
int rows_finish(struct sql_rows *r, int64_t changes, int64_t last_insert_rowid,
                char **out, char *errmsg, size_t errmsg_len);

/* ---- authorize.c: what a request may not do ------------------------- */

/* authorize_install sets the authorizer of the apply connection of @f,
 * which refuses to requests what would differ between nodes or break the
 * apply transaction (the reason goes to f->deny), captures the
 * cluster-wide settings a request sets (f->pragma_*), notes ALTER TABLE
 * (f->altered), and lets every statement pass while f->internal is set.
 * Thread: the apply thread. */
void authorize_install(struct sql_fsm *f);

/* authorize_is_vacuum tells whether statement text @sql (NULL gives 0) is
 * a VACUUM, which the authorizer does not see. Pure; any thread. */
int authorize_is_vacuum(const char *sql);

/* ---- checkpoint.c: the checkpointer thread and the durable index ---- */

/* checkpoint_init initializes the locks of @c (zeroed before). Any thread;
 * before any other checkpoint_ call. */
void checkpoint_init(struct sql_ckpt *c);

/* checkpoint_destroy destroys the locks of @c, after checkpoint_stop. */
void checkpoint_destroy(struct sql_ckpt *c);

/* checkpoint_start opens the checkpointer's connection to f->path and its
 * thread, and moves SQLite's automatic checkpoint from the apply
 * connection to it (a WAL hook). On any failure the apply connection
 * keeps the automatic checkpoint: slower, same result. Thread: the apply
 * thread, at the end of open. */
void checkpoint_start(struct sql_fsm *f);

/* checkpoint_stop stops the checkpointer thread, if it runs, and closes
 * its connection. Thread: the apply thread, at close. */
void checkpoint_stop(struct sql_fsm *f);

/* checkpoint_committed tells the checkpointer the applied index of the
 * commit just made, and folds the durable index its last complete
 * checkpoint found into f->durable. Thread: the apply thread, after a
 * COMMIT. */
void checkpoint_committed(struct sql_fsm *f);

/* checkpoint_reset makes the checkpointer forget what it knew of the
 * database after it was replaced (snapshot install) or reread: a
 * checkpoint already running reports nothing. Thread: the apply thread. */
void checkpoint_reset(struct sql_fsm *f);

/* checkpoint_paced backfills the WAL into the database file through the
 * checkpointer's connection at f->pace (copy_pace.h: the file synced
 * every 8 MiB, at most the rate while the cluster takes writes): for the
 * whole database an install put into the WAL, which an unpaced
 * checkpoint wrote in one burst that every log fsync on the disk waited
 * behind. Best effort (a passive checkpoint, nothing recorded; none
 * without the checkpointer or its VFS): the durable checkpoint that
 * follows finds the frames copied. Adds its pauses to
 * f->install_slept_ms. Limitation: a reader holding an older WAL
 * snapshot (a long read on a serving follower) keeps the frames from
 * being copied here, and a later checkpoint copies them unpaced. Thread:
 * the one installing (sql_fsm_snapshot_install's). */
void checkpoint_paced(struct sql_fsm *f);

/* checkpoint_set_durable sets the durable index of @f to @index, which
 * must be durable in the database file, and resets the checkpointer.
 * Thread: the apply thread. */
void checkpoint_set_durable(struct sql_fsm *f, uint64_t index);

/* ---- foreign.c: commits the node did not make ---------------------- */

/* foreign_reset takes the current PRAGMA data_version of the apply
 * connection as the baseline and forgets any foreign commit seen: the
 * database holds only what the node applied (at open, after a snapshot
 * install). Returns 0 or an error code with @f's message saying which.
 * Thread: the apply thread, outside a transaction. */
int foreign_reset(struct sql_fsm *f);

/* foreign_check compares PRAGMA data_version of the apply connection with
 * the baseline: any change means another connection committed to the
 * database (the node's own apply connection never changes it, and its
 * checkpointer and snapshot connections commit nothing). Inside the
 * batch's BEGIN IMMEDIATE it is race-free: no other writer can commit
 * before that transaction ends. Returns 0, SQL_ERR_DIVERGED (sticky, with
 * @f's message and f->foreign_why saying what was seen) or an error code
 * of the PRAGMA. Thread: the apply thread. */
int foreign_check(struct sql_fsm *f);

/* foreign_rebase takes the current PRAGMA data_version as the baseline
 * after a transaction of the apply connection itself failed past a check
 * (foreign_check, or the lock a backup holds): SQLite resets the page
 * cache of a connection after an I/O error or a full disk, which changes
 * data_version as a foreign commit does. Nothing when a foreign commit was
 * seen already (sticky). Limitation: a foreign commit in the instant
 * between that failure and this read goes unseen. Returns 0 or an error
 * code. Thread: the apply thread, outside a transaction. */
int foreign_rebase(struct sql_fsm *f);

/* foreign_note_schema takes PRAGMA schema_version as the baseline of the
 * schema cookie when the checksum is on (else it does nothing): inside
 * each batch's write transaction before its COMMIT, so the node's own schema changes are never taken for a
 * foreign one. Returns 0 or an error code. Thread: the apply thread. */
int foreign_note_schema(struct sql_fsm *f);

/* foreign_mark reads the WAL-index header of the apply connection's file
 * and then PRAGMA data_version: when that is still the baseline, the
 * file held only the node's own commits when the header was read, which
 * becomes f->wal_base; else f->wal_base is no such reading until the
 * next baseline. After each of the apply connection's own commits and
 * checkpoints. Failures only leave no reading. Thread: the apply thread,
 * outside a transaction. */
void foreign_mark(struct sql_fsm *f);

/* foreign_landed decides, at the start of a batch whose first entry
 * @index its writer's commit put in the file (first_landed) and under
 * the batch's write lock, whether that commit was alone: the writer's
 * readings (f->marks) begin at f->wal_base and end at the header now.
 * Alone: the new data_version and schema cookie are the baseline
 * (foreign_rebase). Not alone, or no readings: only the new
 * data_version is, and f->landed_confirm asks foreign_landed_confirm to
 * compare the file with the running checksum once the entry is counted.
 * Returns 0 or an error code of the PRAGMA. Thread: the apply thread. */
int foreign_landed(struct sql_fsm *f, uint64_t index);

/* foreign_landed_confirm, after the batch's first entry (the landed one
 * of f->landed_confirm) was counted in the running sums, in the batch's
 * transaction: the schema cookie as at the node's last commit (unless
 * that entry changes the schema) and a full scan equal to the running
 * sums (foreign_confirm), or, with the checksum off, readings that
 * differ taken for a foreign commit. Returns 0 (the node's own content),
 * SQL_ERR_DIVERGED (sticky, as foreign_check's) or an error code of the
 * scan. Nothing when f->landed_confirm is not @index. Thread: the apply
 * thread. */
int foreign_landed_confirm(struct sql_fsm *f, uint64_t index);

/* foreign_confirm scans every table the checksum covers on the apply
 * connection, in the running transaction, and compares each with its
 * running sum. Requires the checksum on (f->ck->on). Writes the names
 * of the tables that differ to @differ (@differ_len bytes, "" when none;
 * cut with "..." when long). Returns 0 (equal), SQL_ERR_DIVERGED (some
 * differ) or an error code of the scan (@f's message). Thread: the apply
 * thread. */
int foreign_confirm(struct sql_fsm *f, char *differ, size_t differ_len);

#endif /* SQL_FSM_INTERNAL_H */
