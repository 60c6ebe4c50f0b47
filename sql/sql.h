/* The SQLite state machine: the write-request codec (what a log entry
 * carries) and the apply connection that executes committed entries in log
 * order, deterministically, exactly once across crashes.
 *
 * Sources: SQLite C API (https://sqlite.org/c3ref/intro.html), notably
 * sqlite3_prepare_v2 with pzTail for multi-statement text, sqlite3_bind_*,
 * SAVEPOINT (https://sqlite.org/lang_savepoint.html), and the VFS
 * xCurrentTimeInt64 method (https://sqlite.org/c3ref/vfs.html). */

#ifndef SQL_H
#define SQL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* ---- Requests -------------------------------------------------------- */

/* Storage classes of a bound value; the numbers equal SQLite's
 * SQLITE_INTEGER .. SQLITE_NULL. */
enum sql_value_type {
    SQL_INTEGER = 1,
    SQL_FLOAT = 2,
    SQL_TEXT = 3,
    SQL_BLOB = 4,
    SQL_NULL = 5,
};

/* One bound value. TEXT and BLOB point at @len bytes that the owner of the
 * value keeps alive (TEXT is UTF-8 and may contain NUL bytes; a BLOB with
 * @len 0 is a zero-length blob, distinct from NULL and from ''). */
struct sql_value {
    uint8_t type; /* enum sql_value_type */
    union {
        int64_t integer;
        double real;
        struct {
            const void *p; /* bytes, may be NULL when len is 0 */
            size_t len;    /* bytes */
        } bytes;
    };
};

/* One parameter of a request: bound by @name (":a", "@a", "$a", "?5" as
 * written in the SQL) when @name is not NULL, else by its position: the
 * i-th unnamed parameter (1-based) binds parameter index i of each
 * statement. */
struct sql_param {
    const char *name; /* NUL-terminated, or NULL for positional */
    struct sql_value value;
};

/* Longest client request id, bytes (raft_exec_id's id). */
#define SQL_CLIENT_ID_MAX 256

/* Flags of a request (format version 3, sql/request.c). */
enum sql_request_flag {
    SQL_REQUEST_CLIENT_ID = 1, /* carries a client request id (set by the
                                  encoder from the id's length) */
    SQL_REQUEST_WANT_ROWS = 2, /* the rows its statements return are
                                  collected as JSON (sql_result.rows) */
};

/* What a request carries beyond its SQL and parameters. Zeroed (or a
 * NULL pointer to it): a plain raft_exec request, encoded in format
 * version 2. */
struct sql_request_opts {
    const void *client_id; /* client request id bytes, or NULL */
    size_t client_id_len;  /* 0 (none) or 1..SQL_CLIENT_ID_MAX */
    unsigned flags;        /* SQL_REQUEST_WANT_ROWS or 0 */
};

/* A decoded request. Pointers reference the payload it was decoded from,
 * which must outlive it. */
struct sql_request {
    uint64_t id[2];     /* origin node id, origin sequence number */
    int64_t time_ms;    /* leader's wall clock, ms since the epoch */
    uint64_t seed;      /* seed of random()/randomblob() */
    uint64_t max_steps; /* work budget, VM steps, 0 for none */
    const char *sql;    /* SQL text, sql_len bytes, not NUL-terminated */
    size_t sql_len;
    unsigned n_params;          /* number of parameters */
    struct sql_param *params;   /* n_params, allocated by sql_request_decode */
    const uint8_t *params_data; /* the encoded parameters (params_len
                                   bytes), what the client id's digest
                                   covers with the SQL */
    size_t params_len;
    const uint8_t *client_id;  /* client request id, or NULL (version 3) */
    size_t client_id_len;      /* its bytes, 0 when none */
    int want_rows;             /* 1: collect the returned rows as JSON */
    uint64_t id_window;        /* stamped request_id_window, 0: unstamped */
    uint64_t id_window_ms;     /* stamped request_id_window_ms, 0 likewise */
    uint64_t max_result_bytes; /* stamped max_result_bytes, 0 likewise */
};

/* sql_request_size checks a write request, SQL text @sql (@sql_len bytes;
 * one or more statements, applied as one transaction) and @n_params
 * parameters, and gives the size of its payload in *@out_len, for the
 * caller to allocate the buffer that sql_request_encode fills (so the
 * payload is written once, into the caller's buffer type). Pure; any
 * thread.
 * Errors: SQL_ERR_TOOBIG when the payload would exceed @max_bytes (the
 * max_request_bytes setting; the message says so) or the format's limits,
 * SQL_ERR_INVALID (empty SQL, a NUL byte in it, a bad value type or
 * parameter name). @errmsg (@errmsg_len bytes, may be NULL) receives the
 * message on failure. */
int sql_request_size(const char *sql, size_t sql_len,
                     const struct sql_param *params, unsigned n_params,
                     uint64_t max_bytes, size_t *out_len, char *errmsg,
                     size_t errmsg_len);

/* sql_request_encode writes the payload of the request of @sql, @sql_len,
 * @params and @n_params (as checked by sql_request_size) with request id
 * @id into @out, which holds @out_len bytes, the size sql_request_size
 * gave. The timestamp and seed are left zero for the leader to fill in
 * with sql_request_stamp. @out is the caller's; nothing is allocated.
 * Pure; any thread.
 * Errors: SQL_ERR_INVALID (the request fails sql_request_size, or @out_len
 * is not its size; nothing is written then). */
int sql_request_encode(const uint64_t id[2], const char *sql, size_t sql_len,
                       const struct sql_param *params, unsigned n_params,
                       void *out, size_t out_len);

/* sql_request_size_opts is sql_request_size for a request with options
 * @opts (may be NULL): with a client id or a flag the payload is of format
 * version 3, else of version 2 exactly as sql_request_size gives it.
 * Errors: those of sql_request_size, and SQL_ERR_INVALID for a client id
 * over SQL_CLIENT_ID_MAX bytes or an unknown flag. Pure; any thread. */
int sql_request_size_opts(const char *sql, size_t sql_len,
                          const struct sql_param *params, unsigned n_params,
                          const struct sql_request_opts *opts,
                          uint64_t max_bytes, size_t *out_len, char *errmsg,
                          size_t errmsg_len);

/* sql_request_encode_opts is sql_request_encode with options @opts (may
 * be NULL), for the size sql_request_size_opts gave. The stamp's fields
 * (timestamp, seed, budget, id window, result cap) are left zero.
 * Errors: SQL_ERR_INVALID. Pure; any thread. */
int sql_request_encode_opts(const uint64_t id[2], const char *sql,
                            size_t sql_len, const struct sql_param *params,
                            unsigned n_params,
                            const struct sql_request_opts *opts, void *out,
                            size_t out_len);

/* What the leader stamps into a request before it enters the log, so
 * that every node applies it alike. */
struct sql_stamp {
    int64_t time_ms;       /* leader's wall clock, ms since the epoch: "now" */
    uint64_t seed;         /* seed of random()/randomblob() */
    uint64_t max_steps;    /* work budget in SQLite virtual machine steps
                           (the leader's max_request_steps), 0 for none */
    uint64_t id_window;    /* client ids remembered, by count (the
                              leader's request_id_window); version 3 only */
    uint64_t id_window_ms; /* and by entry time, ms (request_id_window_ms) */
    uint64_t max_result_bytes; /* cap of a request's rows as JSON, bytes
                                  (the leader's max_result_bytes) */
};

/* sql_request_stamp writes into @out (@len bytes, the caller's) the
 * request payload @in (@len bytes) with the leader's @stamp filled in.
 * @out is either @in itself (stamped in place) or a buffer that does not
 * overlap it. Pure; any thread.
 * Errors: SQL_ERR_CORRUPT (not a request payload), SQL_ERR_FORMAT (format
 * version 1, read from an old log but never proposed again); nothing is
 * written then. */
int sql_request_stamp(const void *in, size_t len, const struct sql_stamp *stamp,
                      void *out);

/* sql_request_id reads the request id of payload @p (@len bytes) into @out
 * without decoding the rest. Errors: SQL_ERR_CORRUPT. */
int sql_request_id(const void *p, size_t len, uint64_t out[2]);

/* sql_request_time reads the leader's stamp (time_ms: "now", ms since
 * the epoch) of request payload @p (@len bytes) into *@out without
 * decoding the rest: the floor of the next stamps (ext/runtime/propose.h)
 * follows each entry so, at the cost of a header check. Pure; any
 * thread. Errors: SQL_ERR_CORRUPT (no request payload this build decodes:
 * a plain write's changeset, a cluster id entry; *@out unchanged). */
int sql_request_time(const void *p, size_t len, int64_t *out);

/* sql_request_version returns the format version (1 to 3) of request
 * payload @p (@len bytes), or 0 when it is no request payload this build
 * decodes. Version 3 (a client request id or rows wanted) cannot be
 * applied by releases of before wire version 3. Pure; any thread. */
unsigned sql_request_version(const void *p, size_t len);

/* sql_request_decode parses payload @p (@len bytes) into @out, whose params
 * array is allocated (free it with sql_request_free). Every length is
 * bounds-checked. Errors: SQL_ERR_CORRUPT (truncated or malformed payload, the
 * message says what), SQL_ERR_FORMAT (unknown version), SQL_ERR_NOMEM. */
int sql_request_decode(const void *p, size_t len, struct sql_request *out,
                       char *errmsg, size_t errmsg_len);

/* sql_request_free frees what sql_request_decode allocated in @r. */
void sql_request_free(struct sql_request *r);

/* sql_request_surplus_msg writes into @out (@out_len bytes, the caller's,
 * always NUL-terminated) why @n_values positional values are too many for
 * SQL whose statements have at most @max_params parameters (@max_params
 * < @n_values) in @n_statements statements. Each statement binds the same
 * values from the first one on, so with several statements the text says
 * so and points to ?NNN, which takes a later value by its number. The
 * caller's check (ext/surface/precheck.c) and the apply connection both use it,
 * so the two agree. Pure; any thread. */
void sql_request_surplus_msg(char *out, size_t out_len, unsigned n_values,
                             int max_params, unsigned n_statements);

/* ---- The apply connection (the state machine) --------------------------- */

/* What a committed entry carries, as the caller maps its log's entry
 * types (ext/ maps Raft's; sql/ knows nothing of them). */
enum sql_entry_kind {
    SQL_ENTRY_REQUEST = 0,    /* a write request, or nothing (a no-op) */
    SQL_ENTRY_CONFIG = 1,     /* the cluster's configuration, opaque bytes */
    SQL_ENTRY_CLUSTER_ID = 2, /* the cluster's id (see "The cluster id") */
};

/* One committed entry to apply. For SQL_ENTRY_REQUEST, @data is the
 * request payload, or NULL for an entry that carries no request (a
 * leader's no-op), which is only counted as applied. For SQL_ENTRY_CONFIG,
 * @data (@len bytes, NULL when 0) is a configuration encoded by the Raft
 * core, stored as is in raftsql_config (see "The configuration" below). */
struct sql_fsm_entry {
    uint64_t index;   /* log index */
    uint64_t term;    /* log term */
    const void *data; /* payload (len bytes), or NULL */
    size_t len;       /* payload length, bytes */
    uint8_t kind;     /* enum sql_entry_kind; 0 (a request) when zeroed */
};

/* The outcome of one request. A SQL error is a result like any other: the
 * request's savepoint rolled back on every node alike. */
struct sql_result {
    uint64_t id[2];            /* request id, {0,0} for a no-op */
    int rc;                    /* SQLITE_OK or the SQLite error code */
    int64_t changes;           /* rows changed (sum over statements) */
    int64_t last_insert_rowid; /* sqlite3_last_insert_rowid after it */
    char *errmsg;              /* SQLite's error text (malloc'd) or NULL */
    size_t err_at;             /* for an error of one of the request's
                                  statements: 1 + the byte offset in the
                                  SQL text where SQLite was given that
                                  statement (blanks and comments before
                                  it included); 0 for an error of the
                                  whole request, and in a first outcome
                                  (id_duplicate) */
    int duplicate;             /* 1 when this id was applied before and
                                  the request was skipped */
    int id_duplicate;          /* 1 when its client request id was applied
                                  before within the window: rc, errmsg,
                                  changes, last_insert_rowid and rows are
                                  that first outcome, nothing applied */
    char *rows;                /* a want-rows request's result as JSON text
                                  (malloc'd; sql/rows.c has its shape)
                                  when rc is SQLITE_OK, else NULL */
    uint64_t checksum;         /* the replica checksum once this entry is
                                  applied (0 while it is off; see "The
                                  replica checksum") */
};

struct sql_fsm; /* opaque */

/* A SQL function, by name and argument count as registered with
 * sqlite3_create_function_v2. */
struct sql_function {
    const char *name; /* NUL-terminated */
    int n_arg;        /* number of arguments, -1 for any */
};

/* sql_fsm_open opens the apply connection to database file @path (which
 * must exist and be a SQLite database; it is switched to WAL, and the
 * connection to synchronous=NORMAL: see "The durable point" below),
 * creates the internal raftsql_* tables if missing, installs the
 * determinism shims (seeded random()/randomblob(), a VFS whose current time
 * is the entry's timestamp), re-applies the stored cluster-wide PRAGMA
 * settings, and checkpoints, so that the applied index it read is durable
 * (or, when readers hold the WAL back, the durable index starts at 0).
 * The @n_hidden functions of @hidden (NULL when @n_hidden is 0; read
 * during the call only) are removed from the connection: those that a
 * host registers on every new connection (an auto-extension) and that a
 * request must not reach from inside the apply thread.
 * Errors: SQL_ERR_NOTFOUND (no such file), SQL_ERR_CORRUPT (not a
 * database), SQL_ERR_INVALID (a database holding objects that is no
 * replica, or a host SQLite without a progress handler:
 * sql_fsm_host_check), SQL_ERR_IOERR, SQL_ERR_NOMEM; @errmsg says which. Thread: the
 * apply thread (the connection is used by one thread at a time). */
int sql_fsm_open(const char *path, const struct sql_function *hidden,
                 unsigned n_hidden, struct sql_fsm **out, char *errmsg,
                 size_t errmsg_len);

/* sql_fsm_host_check says whether the SQLite of this process can hold an
 * apply connection: a host whose SQLite is built with
 * SQLITE_OMIT_PROGRESS_CALLBACK (better-sqlite3's is) hands a loadable
 * extension no progress handler, which the apply connection's request
 * budget (max_request_steps) installs. Such a process can still call a
 * node that another process runs. Returns 0, or SQL_ERR_INVALID with
 * @errmsg (@errmsg_len bytes) saying why and what to do. Always 0 in a
 * program that links SQLite (SQLITE_CORE: the function is there, or the
 * program would not link). Thread: any. */
int sql_fsm_host_check(char *errmsg, size_t errmsg_len);

/* sql_fsm_interrupt makes the request running on @f's apply connection,
 * and every later one, stop at once: sql_fsm_apply then fails (the batch
 * is rolled back, not applied; a restart applies it again). For a stop
 * that must not wait for a long request. Thread: any, while @f is open. */
void sql_fsm_interrupt(struct sql_fsm *f);

/* sql_fsm_close closes the connection and frees @f (after
 * sql_fsm_discard_on_close, dropping the raftsql_* tables its open
 * created first). NULL is ignored. */
void sql_fsm_close(struct sql_fsm *f);

/* sql_fsm_discard_on_close makes sql_fsm_close of @f drop the raftsql_*
 * tables that sql_fsm_open created in a database that had none, in one
 * transaction: a node's start that failed after the open leaves the file
 * a plain database again, not a replica that no node serves (whose plain
 * writes every process that loaded raftsql refuses). Nothing is dropped
 * when the tables were there before the open; a failure to drop is
 * ignored (the file then stays a replica, as before this call existed).
 * Thread: the one that then calls sql_fsm_close (the apply thread may
 * still run until then: it never reads what this sets). */
void sql_fsm_discard_on_close(struct sql_fsm *f);

/* sql_fsm_applied returns the last applied index (0 for a new database):
 * the one stored in raftsql_applied, or past it by the no-ops applied
 * since (a batch of no-ops only writes nothing: sql_fsm_apply). */
uint64_t sql_fsm_applied(const struct sql_fsm *f);

/* sql_fsm_settings returns the cluster-wide settings in force on @f's
 * apply connection (PRAGMA foreign_keys=ON and the others a request
 * stores in raftsql_settings): bit i set for sql_setting_name(i) ON.
 * They change only within sql_fsm_open, sql_fsm_apply and the snapshot
 * install and bootstrap calls. Thread: @f's owner. */
unsigned sql_fsm_settings(const struct sql_fsm *f);

/* sql_setting_count returns the number of cluster-wide settings (at
 * most 16). Pure; any thread. */
int sql_setting_count(void);

/* sql_setting_name returns the lowercase name of cluster-wide setting @i
 * (0 <= @i < sql_setting_count(): foreign_keys, recursive_triggers,
 * case_sensitive_like, reverse_unordered_selects). Static storage. */
const char *sql_setting_name(int i);

/* The name of the VFS of every apply connection begins so (the
 * determinism shim's). */
#define SQL__APPLY_VFS_PREFIX "raftsql-"

/* sql_is_apply_vfs says whether VFS name @name is an apply connection's
 * (SQLITE_FCNTL_VFS_POINTER gives a connection's): its settings, and
 * everything else it runs, are the state machine's alone. Pure; any
 * thread. */
bool sql_is_apply_vfs(const char *name);

struct sqlite3;

/* sql_setting_apply sets cluster-wide setting @i to @value (0 or 1) on
 * connection @db, as the apply connection has it: foreign_keys through
 * sqlite3_db_config (no statement runs; also inside a transaction), the
 * others by running "PRAGMA <name>=<value>" on @db (its authorizer must
 * allow it). Returns SQLITE_OK or SQLite's error code. Thread: the one
 * using @db, or any holding its mutex. */
int sql_setting_apply(struct sqlite3 *db, int i, int value);

/* sql_fsm_apply applies @n committed entries, consecutive and starting at
 * sql_fsm_applied(f) + 1, in one SQLite transaction with a SAVEPOINT per
 * request, recording the new applied index in the same transaction (and,
 * for a SQL_ENTRY_CONFIG entry, the configuration it carries: a
 * configuration entry's result is SQLITE_OK with id {0,0}). A batch of
 * no-ops only (a new leader's first entry) is counted as applied with no
 * transaction at all: a commit of raftsql_applied's row alone would make
 * a host transaction that read before it fail at its first write with
 * SQLITE_BUSY_SNAPSHOT; the next batch that writes records past them,
 * and a restart applies them again from the log. On return 0,
 * results[i] (caller-provided, n long) holds each entry's outcome; free
 * their errmsg with sql_result_clear. On an error nothing was applied
 * (nor any configuration of the batch stored) and the applied index is
 * unchanged: the node must stop applying.
 * Errors: SQL_ERR_IOERR (SQLite I/O error, disk full: the message names it),
 * SQL_ERR_CORRUPT (undecodable payload), SQL_ERR_INVALID (indexes not
 * consecutive, or an unknown kind), SQL_ERR_DIVERGED (a commit the node
 * did not make reached the database: sql_fsm_foreign_check), SQL_ERR_NOMEM.
 */
int sql_fsm_apply(struct sql_fsm *f, const struct sql_fsm_entry *entries,
                  unsigned n, struct sql_result *results);

/* sql_fsm_foreign_check says whether a commit the node did not make
 * reached the database since it was opened or last took a snapshot: PRAGMA
 * data_version of the apply connection changed (any other connection, of
 * this process or another, committed: a sqlite3 shell without the
 * extension, say). sql_fsm_apply checks the same inside its transaction
 * before applying anything and then fails with SQL_ERR_DIVERGED, applying
 * nothing. Once seen it stays seen until sql_fsm_snapshot_install replaces
 * the database. Not seen: bytes changed without a commit (another tool
 * writing the file), which only a checksum finds.
 * Returns 0 (only the node's own commits), SQL_ERR_DIVERGED (seen; the
 * message, sql_fsm_errmsg, says so and before which index) or
 * SQL_ERR_IOERR/SQL_ERR_NOMEM (the PRAGMA failed). Thread: the apply
 * thread, between sql_fsm_apply calls. */
int sql_fsm_foreign_check(struct sql_fsm *f);

/* sql_fsm_foreign_note copies to @out (@out_len bytes) the note of a
 * moved data_version that sql_fsm_foreign_check or sql_fsm_apply found
 * to be no foreign write (with the checksum on: the schema cookie and a
 * full scan equal to the running sums, e.g. after another process's
 * wal_checkpoint(TRUNCATE)), and forgets it. Returns 1 when there was
 * one, else 0. Thread: the apply thread. */
int sql_fsm_foreign_note(struct sql_fsm *f, char *out, size_t out_len);

/* sql_fsm_verify compares the database file with the running checksum by
 * a full scan on the apply connection (one read transaction), table by
 * table: what raft_verify() does, for the node itself (at a start after
 * the file may have changed while no node ran). With the checksum off it
 * does nothing and returns 0. Writes the names of the tables that differ
 * to @differ (@differ_len bytes, "" when none). Returns 0 (equal),
 * SQL_ERR_DIVERGED (some differ), or SQL_ERR_IOERR/SQL_ERR_NOMEM (the
 * scan failed, sql_fsm_errmsg says how). Thread: the apply thread (or
 * the opener, before the apply thread starts), between sql_fsm_apply
 * calls. */
int sql_fsm_verify(struct sql_fsm *f, char *differ, size_t differ_len);

/* sql_fsm_landed says (in *@out) whether entry @e, the next to apply
 * (index sql_fsm_applied(f) + 1), is a plain write's changeset that the
 * file already holds: its writer's local commit landed before the apply
 * connection recorded it (a writer killed in between). The file alone
 * decides (sql/changeset.h's landed check); sql_fsm_apply then only
 * records it. What a start's verification finds different from the
 * running checksum may be that entry, until it is recorded. Returns 0,
 * or SQL_ERR_IOERR/SQL_ERR_NOMEM (the check's read failed). Thread: the
 * apply thread, between sql_fsm_apply calls. */
int sql_fsm_landed(struct sql_fsm *f, const struct sql_fsm_entry *e, bool *out);

/* ---- Who committed around a plain write ------------------------------
 *
 * The WAL-index header of a database in WAL mode: the first 48 bytes of
 * its -shm file (sqlite.org/walformat.html: iVersion, unused, iChange,
 * isInit, bigEndCksum, szPage, mxFrame, nPage, aFrameCksum, aSalt,
 * aCksum), kept there twice. SQLite rewrites it, under the WAL write
 * lock, at each commit and each restart of the WAL (a TRUNCATE or
 * RESTART checkpoint, or a writer starting over a WAL checkpointed
 * whole), never at a passive checkpoint, and never back to a value it
 * had (iChange counts the rewrites, the checksums chain, a restart
 * moves the salts). Two equal readings thus mean that nobody committed
 * in between; two different ones, that somebody committed or
 * checkpointed with TRUNCATE or RESTART.
 *
 * A plain writer's commit lands in the file before the node's applier
 * records its entry, and moves the apply connection's data_version as a
 * foreign commit would. The writer's connection reads the header right
 * after it took the WAL write lock and right before it lets it go after
 * its commit (ext/surface/wal_lock.c), and its lease's release carries
 * both readings to the node (sql_fsm_writer_marks). When the first
 * equals the applier's own last reading (taken after each of its
 * commits, and when it last checked for foreign commits) and the
 * second equals the header when the entry's batch starts, only the
 * writer committed in between, and the moved data_version is its
 * commit. Otherwise (another commit, a checkpoint, or no readings: the
 * writer died, its lease ended at its deadline) the entry is recorded
 * and then the file compared with the running checksum, as a moved
 * data_version is when the applier is idle: a commit of a process
 * without raftsql between the writer's and the batch is caught, not
 * taken for the writer's. */

/* Bytes of a WAL-index header. */
#define SQL_WAL_HDR_LEN 48

/* What a plain writer read of the WAL-index header of its file under
 * the WAL write lock (above). */
struct sql_wal_marks {
    unsigned char locked[SQL_WAL_HDR_LEN]; /* right after it took the lock */
    unsigned char done[SQL_WAL_HDR_LEN];   /* right before it let the lock
                                              go, after its commit */
};

struct sqlite3_file;

/* sql_wal_header copies the WAL-index header of open database file
 * @file (a connection's main file in WAL mode: its methods' xShmMap and
 * xShmBarrier) to @out: both copies read until they agree, as SQLite's
 * own readers do. Returns 0, or -1 (no shared memory mapped, the copies
 * never agreed, the header not initialised): no reading. Thread: one
 * using a connection of @file; exact while that connection holds the
 * WAL write lock, else a reading of some recent moment. */
int sql_wal_header(struct sqlite3_file *file,
                   unsigned char out[SQL_WAL_HDR_LEN]);

/* sql_fsm_writer_marks gives @f the readings @m of the writer whose
 * changeset is entry @index (copied; NULL: none), for the batch that
 * starts with that entry (sql_fsm_apply). Thread: the apply thread,
 * between sql_fsm_apply calls. */
void sql_fsm_writer_marks(struct sql_fsm *f, uint64_t index,
                          const struct sql_wal_marks *m);

/* sql_fsm_wal_base copies to @out the WAL-index header that @f read at
 * or before the moment its file last held only the node's own commits
 * (after its own commits and checkpoints, and at checks that found no
 * other: sql/foreign.c). Returns whether it holds such a reading (false:
 * none since data_version last moved, @out untouched). A plain writer
 * whose header, read as it took the write lock, differs from it read a
 * file some other connection committed to. Thread: the apply thread. */
bool sql_fsm_wal_base(const struct sql_fsm *f,
                      unsigned char out[SQL_WAL_HDR_LEN]);

/* sql_fsm_applied_term returns the term of the last applied entry, as
 * stored in the database (0 for a new one). Thread: the apply thread. */
uint64_t sql_fsm_applied_term(const struct sql_fsm *f);

/* sql_fsm_applied_time gives in *@out the latest leader stamp ("now", ms
 * since the epoch, sql_request_time) among the requests applied, as
 * stored in the database with the applied index (raftsql_applied.time_ms,
 * so a snapshot carries it) and returns true; false (*@out untouched)
 * when none was ever applied. A leader stamps no entry below it, which
 * keeps "now" from running backwards in log order where the log was
 * compacted (ext/runtime/propose.h). Thread: the apply thread (or the
 * opener, before it starts; or the installer, while nothing applies). */
bool sql_fsm_applied_time(const struct sql_fsm *f, int64_t *out);

/* ---- The durable point ------------------------------------------------
 *
 * The apply connection runs with synchronous=NORMAL in WAL mode: a commit
 * is written to the WAL but not fsynced. A process crash loses nothing (the
 * WAL is in the OS page cache and WAL recovery finds it at the next open);
 * a power loss or kernel crash may drop the last commits (whole
 * transactions, never half of one, so the database stays consistent and
 * its raftsql_applied row still says which entries it holds). The log
 * replays what was dropped, provided it still holds those entries.
 *
 * The durable index is the highest applied index known to survive a power
 * loss: the applied index at the last checkpoint that backfilled every WAL
 * frame into the database file and fsynced it (sql_fsm_checkpoint, or the
 * one sql_fsm_open runs after WAL recovery), the applied index noted
 * before a passive checkpoint of the background checkpointer that copied
 * every frame it saw (it fsyncs the WAL before copying; the frames then
 * survive in the file or in the WAL, which SQLite restarts only after a
 * checkpoint that fsynced the file; sql_fsm_apply takes the index in at
 * its next commit), or of the last installed snapshot (written with a
 * synchronous commit). It is 0 after an open whose checkpoint could not
 * complete (readers held WAL frames back).
 *
 * Only what raftsql_applied records counts: no-ops applied past it (see
 * sql_fsm_apply) are not durable until a later batch records them.
 *
 * Invariant (the durable point): the Raft log may only be compacted up to
 * the durable index: lmdb_log_compact(index) with index <= sql_fsm_durable
 * (f). Then after any crash the database's applied index A (which may go
 * back, after a power loss, but never below the durable index) is >= the
 * log's snapshot boundary, so entries A + 1 onwards are still in the log
 * (or will come from the leader) and are applied again, exactly once. */

/* sql_fsm_durable returns the durable index of @f (see above). It never
 * exceeds sql_fsm_applied(f). Thread: the apply thread. */
uint64_t sql_fsm_durable(const struct sql_fsm *f);

/* How long sql_fsm_checkpoint waits for others' checkpoints and readers. */
enum sql_checkpoint_wait {
    /* For a caller that needs the durable point now (the log is full, the
     * node stops, the file was just opened): waits for a checkpoint of the
     * background checkpointer to end, if one runs (measured 0 to 12 ms),
     * then at most 100 ms for readers on other connections that hold
     * older WAL frames. */
    SQL_CHECKPOINT_WAIT,
    /* For the apply thread between batches while a long reader holds
     * frames back (a snapshot's or a backup's copy holds its reader for
     * the whole copy, a minute at a few GB: a waiting try gave up):
     * waits for nobody. A running background checkpoint, or readers
     * holding frames back, make it give up at once; the caller tries
     * again later (the apply thread after its next batch, or within a
     * second when idle). */
    SQL_CHECKPOINT_NOWAIT,
};

/* sql_fsm_checkpoint backfills the WAL of the apply connection into the
 * database file, fsyncs the file and empties the WAL (a TRUNCATE
 * checkpoint; under SQL_CHECKPOINT_NOWAIT a passive one, followed by the
 * TRUNCATE only if every frame was backfilled, and that one waits for
 * no reader either). When every WAL frame was copied, the applied index
 * becomes the durable index and is written to *@out_durable_index; else
 * it gives up (after the waits @wait allows) with SQL_ERR_BUSY, leaving
 * the durable index (and *@out_durable_index) as they were: call it again
 * later. The background checkpointer moves the durable index by itself
 * while writes go on (see above), so this is needed only when it cannot:
 * a WAL under its threshold, readers holding frames back, or the log
 * full. Thread: the apply thread, between sql_fsm_apply calls. Errors:
 * SQL_ERR_BUSY (readers held frames back, or under SQL_CHECKPOINT_NOWAIT
 * the background checkpoint ran; the message says which), SQL_ERR_IOERR
 * (the message names the SQLite failure), SQL_ERR_NOMEM. */
int sql_fsm_checkpoint(struct sql_fsm *f, enum sql_checkpoint_wait wait,
                       uint64_t *out_durable_index);

/* ---- Snapshots --------------------------------------------------------
 *
 * A snapshot is a standalone SQLite database file (rollback journal mode,
 * no WAL): a consistent copy of the node's database at one applied index,
 * with the user's tables and the internal raftsql_* tables, i.e. the
 * applied index and term it reflects (raftsql_applied), the request ids
 * of the dedup window (raftsql_requests), the client request ids with
 * their first outcomes (raftsql_client_requests; a snapshot of a release
 * before them lacks the table, which the install makes anew), the
 * cluster-wide settings
 * (raftsql_settings), and the last configuration applied
 * (raftsql_config; see "The configuration"). */

/* A copy's gate (sql_snapshot_write, sql_fsm_snapshot_create): a plain
 * writer of the node commits its transaction to the file itself, and the
 * apply thread records that entry (the applied index, the running
 * checksum) only after, so a copy whose read transaction began in
 * between would hold the transaction's rows under the index before it,
 * and differ from its own running checksum (taken for a foreign write).
 * @begin is called before the copy's read transaction begins: it returns
 * 0 once no such commit is in between, and holds new ones back until
 * @end; else SQL_ERR_BUSY, @why (@why_len bytes) saying why, and no copy
 * is made. @end is called once the copy's read transaction began (or the
 * copy failed before), on the same thread. */
struct sql_copy_gate {
    int (*begin)(void *arg, char *why, size_t why_len);
    void (*end)(void *arg);
    void *arg;
};

/* sql_fsm_set_copy_gate makes sql_fsm_snapshot_create pass through @gate
 * (copied; NULL: none, the default). Thread: before any snapshot of @f is
 * made. */
void sql_fsm_set_copy_gate(struct sql_fsm *f, const struct sql_copy_gate *gate);

/* The pace of a snapshot's large writes: the copy of
 * sql_fsm_snapshot_create and the install's copy into the live database
 * (sql_fsm_snapshot_install). While the cluster takes writes (@commit
 * moved within the last second), each writes at most @rate bytes a
 * second; with or without a rate, what they wrote is handed to the disk
 * every 8 MiB (sync_file_range; an fdatasync for the install's
 * checkpoint) rather than left dirty for their final fsync, and a paced copy runs on a thread of its own at the lowest CPU
 * priority (sql/copy_pace.h). */
struct sql_pace {
    uint64_t rate;                 /* bytes a second, 0: no limit */
    uint64_t (*commit)(void *arg); /* the cluster's commit index as this
                                      node knows it (a leader's, or what
                                      its leader last told a follower);
                                      called on the writer's thread, any
                                      thread. NULL: @f's applied index */
    void *arg;                     /* @commit's */
};

/* sql_fsm_set_pace paces @f's snapshot copies and installs at @pace
 * (copied; NULL: none, the default). Thread: before any snapshot of @f
 * is made or installed. */
void sql_fsm_set_pace(struct sql_fsm *f, const struct sql_pace *pace);

/* sql_fsm_snapshot_create writes a snapshot of @f's database to the new
 * file @path (which must not exist; the caller removes it when done) and
 * gives the applied index and term it reflects (past the no-ops @f
 * applied after the copy's recorded index without recording them: the
 * copy's raftsql_applied row then says so). The copy is taken with
 * VACUUM INTO on a separate read-only connection, in one read transaction,
 * so it never blocks the apply connection: writers go on meanwhile (only
 * checkpoints cannot pass it). The file is fsynced before return. On
 * failure nothing is left at @path (nor its -journal, -wal, -shm) and
 * @errmsg (@errmsg_len bytes) says
 * why. Thread: any, also concurrently with sql_fsm_apply and
 * sql_fsm_checkpoint on the apply thread (it uses only its own connection
 * and @f's immutable path); not concurrently with sql_fsm_snapshot_install
 * or sql_fsm_close.
 * Errors: SQL_ERR_INVALID (@path exists), SQL_ERR_IOERR (the copy or the fsync
 * failed, e.g. disk full), SQL_ERR_CORRUPT (the copy lacks raftsql_applied),
 * SQL_ERR_NOMEM, SQL_ERR_BUSY (the copy's gate, sql_fsm_set_copy_gate). */
int sql_fsm_snapshot_create(struct sql_fsm *f, const char *path,
                            uint64_t *out_index, uint64_t *out_term,
                            char *errmsg, size_t errmsg_len);

/* sql_snapshot_write is sql_fsm_snapshot_create of the replica file
 * @src_path, from a read-only connection of its own: for raft_backup()
 * on any connection, the node's apply connection untouched. Its read
 * transaction begins through @gate (NULL: none). Errors: as
 * sql_fsm_snapshot_create's, and SQL_ERR_CORRUPT when @src_path is no
 * replica (no raftsql_applied). Thread: any. */
int sql_snapshot_write(const char *src_path, const char *path,
                       const struct sql_copy_gate *gate, uint64_t *out_index,
                       uint64_t *out_term, char *errmsg, size_t errmsg_len);

/* sql_fsm_snapshot_install replaces the content of @f's database with the
 * snapshot file @path (made by sql_fsm_snapshot_create, possibly on
 * another node). It first verifies the file: a SQLite database passing
 * PRAGMA quick_check, holding the raftsql_* tables with one
 * raftsql_applied row, and of the same page size as the live database.
 * Then it copies it into the live database with the backup API in one
 * write transaction on the apply connection, committed with a fsync, so
 * readers on other connections see either the old or the new database,
 * never a mix (a reader inside a transaction keeps the old one until it
 * ends). Then it re-reads the applied index and term, re-applies the
 * cluster-wide settings, makes the new applied index the durable one, and
 * forgets a foreign commit seen before (sql_fsm_foreign_check: the
 * database holds the snapshot only).
 * The result may lie behind the previous applied index: the caller (the
 * Raft core, paper Fig. 13) decides whether to install. After it, the
 * caller empties the log with lmdb_log_reset(*out_index, *out_term); a
 * crash in between leaves a database ahead of its log, which the node
 * must detect at start (applied index beyond the log) and settle with the
 * same reset. On failure the live database is unchanged and
 * sql_fsm_errmsg says why; @path is never modified.
 * Thread: the apply thread, between sql_fsm_apply calls.
 * Errors: SQL_ERR_NOTFOUND (no file at @path), SQL_ERR_CORRUPT (not a database,
 * truncated, fails quick_check, or lacks the raftsql_* tables),
 * SQL_ERR_INVALID (page size differs from the live database), SQL_ERR_BUSY (the
 * live database stayed locked), SQL_ERR_IOERR, SQL_ERR_NOMEM. */
int sql_fsm_snapshot_install(struct sql_fsm *f, const char *path,
                             uint64_t *out_index, uint64_t *out_term);

/* ---- Bootstrap from a file -------------------------------------------
 *
 * A new cluster may start from the content of an existing SQLite file
 * (bootstrap_from=): a plain database, a VACUUM INTO copy of a replica, or
 * a raft_backup() file. A replica copy's content is first verified
 * against the running checksum stored in it (none stored: nothing to
 * check). Its raftsql_* tables, if any, are dropped: the copy gets fresh
 * ones (applied index and term as given, the given configuration, no
 * request ids, no cluster id, so the cluster's first leader proposes a
 * new one), holding the copy's cluster-wide settings (raftsql_settings:
 * replicated state, PRAGMA foreign_keys=ON and the like). */

/* sql_fsm_bootstrap_from makes the content of the SQLite file @src the
 * content of @f's database, as a snapshot at @index and @term holding
 * configuration @config (@config_len bytes, an entry of index 1 and term
 * 1). @src is opened read-only and copied with the backup API (one read
 * transaction) into the new file @tmp_path, which is then reshaped (the
 * raftsql_* tables dropped and made anew, the page size set to the live
 * database's, rollback journal) and installed with
 * sql_fsm_snapshot_install; @tmp_path is removed in every case. @f must
 * be a fresh replica: nothing applied, no table of its own.
 * Writes *@out_tables (the tables copied, raftsql_* ones not counted) on
 * success. On failure @f's database is unchanged and @errmsg
 * (@errmsg_len bytes) names @src and what is wrong.
 * Errors: SQL_ERR_NOTFOUND (no file at @src), SQL_ERR_CORRUPT (not a
 * SQLite database, or one that fails quick_check), SQL_ERR_INVALID (@src
 * is not a regular file, is @f's own file, is a replica copy whose
 * content differs from its stored running checksum (naming the tables),
 * or @f's database holds tables or applied entries), SQL_ERR_IOERR (unreadable, or the copy
 * failed), SQL_ERR_NOSPACE, SQL_ERR_NOMEM. Thread: the caller that holds
 * @f before it hands it to the applier (at start). */
int sql_fsm_bootstrap_from(struct sql_fsm *f, const char *src,
                           const char *tmp_path, uint64_t index, uint64_t term,
                           const void *config, size_t config_len,
                           unsigned *out_tables, char *errmsg,
                           size_t errmsg_len);

/* ---- The configuration -----------------------------------------------
 *
 * The cluster's configuration is part of the state machine: the last
 * SQL_ENTRY_CONFIG entry applied is stored in the internal table
 * raftsql_config (one row: its index, its term and its payload as a
 * BLOB), in the transaction that advances raftsql_applied, so the stored
 * configuration always matches the applied index, a crash or a failed
 * batch never leaves one without the other, and a snapshot carries the
 * configuration it reflects. The payload is opaque here: the Raft core
 * encodes it and the caller decodes it. Requests can neither write nor
 * read raftsql_config (the write guard of host connections refuses writes
 * to it like to any table of a replica). */

/* A stored configuration, as read back. */
struct sql_config {
    uint64_t index; /* log index of its entry; 0: none was ever applied */
    uint64_t term;  /* log term of its entry; 0 when none */
    void *data;     /* the payload (malloc'd, the caller's: free it with
                       sql_config_clear), NULL when @len is 0 */
    size_t len;     /* payload length, bytes */
};

/* sql_fsm_config_read reads the configuration stored in @f's database
 * into *@out (index 0 and no data when none was applied yet). *@out is
 * written only on success; release it with sql_config_clear. Thread: the
 * apply thread, or the caller that holds @f before it hands it to the
 * applier (at start), between sql_fsm_apply calls.
 * Errors: SQL_ERR_CORRUPT (a row that is not an index, a term and a BLOB),
 * SQL_ERR_IOERR, SQL_ERR_NOMEM; sql_fsm_errmsg says why. */
int sql_fsm_config_read(struct sql_fsm *f, struct sql_config *out);

/* sql_snapshot_config_read reads the configuration stored in snapshot file
 * @path (a database file received from the leader, not yet installed, or
 * one made by sql_fsm_snapshot_create) into *@out, opening the file
 * read-only on a connection of its own; @path is never modified. *@out is
 * written only on success; release it with sql_config_clear. Thread: any.
 * Errors: SQL_ERR_NOTFOUND (no file at @path), SQL_ERR_CORRUPT (not a
 * database, or no raftsql snapshot: raftsql_config is missing, or its row
 * is malformed), SQL_ERR_IOERR, SQL_ERR_NOMEM; @errmsg (@errmsg_len bytes,
 * may be NULL) says why. */
int sql_snapshot_config_read(const char *path, struct sql_config *out,
                             char *errmsg, size_t errmsg_len);

/* sql_config_clear frees the payload of @c and zeroes it. */
void sql_config_clear(struct sql_config *c);

/* ---- The cluster id -------------------------------------------------
 *
 * The cluster's id (16 random bytes, ext/runtime/cluster_id.h) is part of the
 * state machine too: the first leader of a cluster proposes it in an entry of
 * its own, a SQL_ENTRY_CLUSTER_ID whose payload is
 *
 *   offset 0   magic "CI" (0x43 0x49; a request's payload starts "RQ")
 *   offset 2   version, 1
 *   offset 3   the id, SQL_CLUSTER_ID_LEN bytes, not all zero
 *
 * Applying it stores the id in the internal table raftsql_cluster (one
 * row, id 0: cluster_id, and idx and term of the entry) unless one is
 * stored already: the first such entry of the log wins, on every node
 * alike, and a later one (from a leader that proposed its own before it
 * had applied the first) changes nothing. Snapshots carry the table.
 * Requests may read it, not write it. */

/* Bytes of a cluster id, and of the payload of its entry. */
#define SQL_CLUSTER_ID_LEN 16
#define SQL_CLUSTER_ENTRY_LEN (3 + SQL_CLUSTER_ID_LEN)

/* sql_cluster_entry_encode writes the payload of the entry of cluster id
 * @id into @out. Pure; any thread. */
void sql_cluster_entry_encode(const uint8_t id[SQL_CLUSTER_ID_LEN],
                              uint8_t out[SQL_CLUSTER_ENTRY_LEN]);

/* sql_cluster_entry_is returns 1 when the payload @p (@len bytes) is that
 * of a cluster id entry (its magic), 0 otherwise (a request): for the
 * caller that maps its log's entries to kinds. Pure; any thread. */
int sql_cluster_entry_is(const void *p, size_t len);

/* sql_fsm_cluster_id reads the cluster id stored in @f's database into
 * @out, all zero when none was applied yet. Thread: as
 * sql_fsm_config_read. Errors: SQL_ERR_CORRUPT (a row that is no
 * 16-byte BLOB), SQL_ERR_IOERR, SQL_ERR_NOMEM; sql_fsm_errmsg says why. */
int sql_fsm_cluster_id(struct sql_fsm *f, uint8_t out[SQL_CLUSTER_ID_LEN]);

/* ---- The replica checksum -------------------------------------------
 *
 * A checksum of the replicated content (every table of the database but
 * the raftsql_* internals, sqlite_schema, views, virtual tables and
 * their shadow tables): the sum modulo 2^64 of a hash of every row, keyed
 * by its table (sql/checksum.h has the canonical row encoding). It is
 * kept up to date as entries apply, from SQLite's pre-update hook, and
 * rescanned for a table after what the hook does not see (ALTER TABLE,
 * ANALYZE, sqlite_sequence, DROP TABLE); a request whose savepoint rolls
 * back, or a batch that rolls back, takes its changes with it. Every
 * node that applied the same entries has the same value at the same
 * index, however its batches fell: sql_result.checksum gives it per
 * entry. The tables' sums are stored in raftsql_applied.sums, in the row
 * and the transaction of the applied index, so it goes with the applied index, survives restarts and
 * travels in snapshots.
 *
 * The hook is not in the API table of a loadable extension: it is
 * looked up at run time in the SQLite copy whose API is in use, and
 * without it (a build without SQLITE_ENABLE_PREUPDATE_HOOK, a host that
 * exports nothing) the checksum is unavailable and everything else works.
 *
 * LIMITATIONS: a table with generated columns, or one an ALTER TABLE
 * gave a column with a DEFAULT (SQLite 3.40's hook reads NULL for that
 * column of older rows), is rescanned after every request that writes
 * it: O(its rows). A REAL that holds a whole number hashes as that
 * INTEGER (the hook sees some as one, some as the other). */

/* sql_fsm_checksum_enable turns the replica checksum of @f on or off
 * (@on 0). On: the hook is installed and the stored sums read, or, when
 * none are stored (a database of before, a snapshot of a node that had
 * it off), computed by a scan of every table (one transaction: O(the
 * database)). Off: the stored sums are deleted, so that a later start
 * with it on computes them afresh. An unavailable hook is not an error:
 * the checksum is then off, and sql_fsm_checksum_why says why. Errors:
 * SQL_ERR_IOERR, SQL_ERR_NOMEM, SQL_ERR_CORRUPT (sql_fsm_errmsg says
 * which; the checksum is off then). Thread: the apply thread, between
 * sql_fsm_apply calls. */
int sql_fsm_checksum_enable(struct sql_fsm *f, int on);

/* sql_fsm_checksum writes the replica checksum at sql_fsm_applied(@f)
 * into *@out and returns 1, or returns 0 when it is off or unavailable
 * (sql_fsm_checksum_why). Thread: the apply thread. */
int sql_fsm_checksum(const struct sql_fsm *f, uint64_t *out);

/* sql_fsm_checksum_why says why the checksum is not maintained ("off
 * (checksum=off)", "unavailable: <reason>", "failed: <message>"), "" when
 * it is. Valid until the next sql_fsm_checksum_enable. */
const char *sql_fsm_checksum_why(const struct sql_fsm *f);

/* A table whose rows do not sum to its stored sum (sql_checksum_verify). */
struct sql_verify_table {
    char *name;       /* the table (malloc'd) */
    uint64_t stored;  /* the running sum stored with the applied index */
    uint64_t scanned; /* the sum of its rows as read from the file */
};

/* What sql_checksum_verify found. */
struct sql_verify {
    int available;                   /* 0: no stored sums (the checksum is
                                      off or unavailable on this node) */
    uint64_t index;                  /* the applied index it read at */
    uint64_t stored;                 /* the running checksum there */
    uint64_t scanned;                /* the checksum of the rows read */
    unsigned n_differ;               /* tables that differ */
    struct sql_verify_table *differ; /* them (malloc'd) */
    int schema_available;            /* 0: no schema sum stored (a file of
                                        before, or not known yet) */
    uint64_t schema_stored;          /* the schema sum stored with index */
    uint64_t schema_scanned;         /* the schema sum of the file read:
                                        they differ when its schema,
                                        user_version or application_id
                                        changed behind the node */
};

/* sql_checksum_verify recomputes the replica checksum of database file
 * @path from its rows, by a full scan on a read-only connection of its
 * own, in one read transaction (so at one applied index, while the apply
 * connection goes on), and compares each table's sum with the running
 * one stored with that index. That finds changes that bypassed every
 * hook: a byte changed in the file, a write from a process without the
 * extension. It also computes the file's schema sum when one is stored
 * (schema_available): a schema change behind the node shows as
 * schema_stored != schema_scanned, not in differ (which holds tables
 * only, as the checks of snapshots and raft_verify() compare). *@out is
 * written on success; free it with
 * sql_verify_clear. Errors: SQL_ERR_NOTFOUND (no file), SQL_ERR_CORRUPT
 * (not a database, or a page that does not read), SQL_ERR_IOERR,
 * SQL_ERR_NOMEM; @errmsg (@errmsg_len bytes, may be NULL) says which.
 * Thread: any; it takes O(the database). */
int sql_checksum_verify(const char *path, struct sql_verify *out, char *errmsg,
                        size_t errmsg_len);

/* What a caller of sql_checksum_verify_hooked hears during the scan. */
struct sql_verify_hooks {
    void *data; /* passed to both */
    /* The read transaction holds its snapshot, at applied index @index
     * (0 for a database that records none): the scan reads that state,
     * whatever commits after. Called once, on the scanning thread, before
     * any table is read; it may block (a test's gate). May be NULL. */
    void (*snapshot)(void *data, uint64_t index);
    /* Every few thousand virtual machine steps of the scan: non-zero
     * interrupts it (the call then fails, SQL_ERR_IOERR, "interrupted").
     * The scanning thread. May be NULL. */
    int (*interrupted)(void *data);
};

/* sql_checksum_verify_hooked is sql_checksum_verify with @hooks (NULL for
 * none): the scan's snapshot is told, and the scan can be interrupted
 * (a node stopping while its start's verification runs). Same results
 * and errors. Thread: any; it takes O(the database). */
/* sql_verify_opening says whether the calling thread is opening the
 * read connection of a scan (sql_checksum_verify): a connection that is
 * the state machine's own, which an auto-extension that guards the
 * process's connections (raftsql's init) leaves alone, as it does no
 * read of the replica: a guard that expires the statements of the
 * connections it knows when its node's staleness verdict changes would
 * abort the scan ("abort due to ROLLBACK"). Any thread. */
bool sql_verify_opening(void);

int sql_checksum_verify_hooked(const char *path,
                               const struct sql_verify_hooks *hooks,
                               struct sql_verify *out, char *errmsg,
                               size_t errmsg_len);

/* sql_verify_clear frees what @v holds and zeroes it. */
void sql_verify_clear(struct sql_verify *v);

/* sql_source_id returns the source id (sqlite3_sourceid()) of the SQLite
 * library the state machine runs requests on: nodes whose source ids
 * differ may count a request's virtual machine steps (its work budget)
 * differently. Static storage. Any thread. */
const char *sql_source_id(void);

/* sql_fsm_errmsg returns the message of the last failed call on @f. */
const char *sql_fsm_errmsg(const struct sql_fsm *f);

/* sql_result_clear frees @r's errmsg and zeroes it. */
void sql_result_clear(struct sql_result *r);

/* What a request may not do, because its effect or its answer would
 * differ between nodes or it would break the apply transaction: the
 * apply connection's authorizer refuses it (the request's SQL error is
 * then SQLITE_AUTH with the reason), and a caller checks its request
 * against the same policy before the request enters the log. */

/* sql_refusal_action says whether raft_exec refuses the authorizer
 * action @action with arguments @a1, @a2 and schema @db_name (as
 * https://sqlite.org/c3ref/set_authorizer.html passes them): 1 with the
 * reason in @why (@why_len bytes, "VACUUM cannot be used in raft_exec:
 * ...", "temporary objects cannot be created through raft_exec: ...",
 * "PRAGMA x cannot be set through raft_exec: ...", "x is an internal
 * raftsql table: ..."), else 0 (a cluster-wide PRAGMA setting included).
 * It depends on the action's names alone, never on a connection. Pure;
 * any thread. */
int sql_refusal_action(int action, const char *a1, const char *a2,
                       const char *db_name, char *why, size_t why_len);

/* sql_refusal_statement says whether raft_exec refuses statement text
 * @sql (one statement, NUL-terminated; NULL gives 0) for what its text
 * shows and no authorizer action does: VACUUM, and a 'localtime' or
 * 'utc' literal written as an argument of a date and time function. 1
 * with the reason in @why (@why_len bytes), else 0. Pure; any thread. */
int sql_refusal_statement(const char *sql, char *why, size_t why_len);

/* sql_refusal_setting returns the name of the cluster-wide setting
 * (PRAGMA foreign_keys=ON...) that authorizer action @action (@a1, @a2,
 * @db_name) sets, or NULL for any other action. Static storage. Pure;
 * any thread. */
const char *sql_refusal_setting(int action, const char *a1, const char *a2,
                                const char *db_name);

/* sql_refusal_setting_alone writes into @why (@why_len bytes) why a
 * request that sets the setting named @name beside other statements is
 * refused ("PRAGMA %s must be a raft_exec request of its own: ...") and
 * returns 1. Pure; any thread. */
int sql_refusal_setting_alone(const char *name, char *why, size_t why_len);

#endif /* SQL_H */
