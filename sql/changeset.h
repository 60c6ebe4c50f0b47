/* A transaction's effect as a Raft log entry (a "changeset", after
 * SQLite's session extension): the row changes one host connection made
 * in one write transaction, with whole old and new rows, and the schema
 * statements it ran, in their order among the row changes. A plain SQL
 * write (INSERT, UPDATE, DELETE, DDL, in autocommit or in BEGIN...COMMIT)
 * travels as one; replaying it is deterministic by construction:
 * random(), "now" and changes() were evaluated once, by the writer.
 *
 * Two halves, both pure sql/ (no raft/, no ext/):
 *   - capture (changeset_capture.c): hooks on one host connection (the
 *     pre-update hook, resolved at run time as preupdate.h; the trace
 *     hook, SQLITE_TRACE_STMT|SQLITE_TRACE_PROFILE; the rollback hook)
 *     record the running transaction's records in memory, bounded by
 *     max_bytes, and encode them at COMMIT (called from the host's commit
 *     hook, which must not run SQL: nothing here reads the database);
 *   - codec (changeset_codec.c): the payload format below, encoded by the
 *     capture and decoded, bounds-checked, by the apply connection.
 *
 * Payload format, version 1. Integers little-endian.
 *
 *   offset  size  field
 *   0       2     magic "CS" (0x43 0x53); a request payload starts "RQ"
 *   2       1     version, 1 (a decoder refuses others: SQL_ERR_FORMAT)
 *   3       1     flags, 0 (reserved: a decoder refuses other values)
 *   4       8     id[0]: origin node id (u64)
 *   12      8     id[1]: origin sequence number (u64)
 *   20      8     lease id the writer held (u64; 0: none)
 *   28      4     n_records (u32); 0 for a transaction of no record
 *                 that ran an INSERT, which may have written
 *                 sqlite_sequence with no row (sql_capture_pending)
 *   32      records, each starting with its kind byte:
 *     SQL_CHANGE_SCHEMA (4): 4 len (u32, >= 1), then len bytes of SQL text
 *       (UTF-8, no NUL byte): one schema statement as the writer ran it
 *       (CREATE/DROP/ALTER of tables, indexes, views, triggers, virtual
 *       tables), replayed as text. Row changes the writer's hook saw
 *       while it ran are not recorded (replaying the text makes them).
 *       The writer ran it in autocommit mode: it succeeded.
 *     SQL_CHANGE_SCHEMA_IN_TXN (5): 1 settings (u8: SQL_SCHEMA_* bits,
 *       the writer's connection settings when it ran; other bits must be
 *       0), then 4 len (u32, >= 1) and len bytes of SQL text as above:
 *       a schema statement the writer ran inside BEGIN...COMMIT, where
 *       SQLite does not tell whether it failed (a CREATE UNIQUE INDEX on
 *       duplicate rows, an ALTER TABLE check: the host may ignore the
 *       error and commit). The replay runs it under the writer's
 *       settings on the state the writer had when it ran; a failure that
 *       follows from that state is the writer's own failure and is
 *       skipped, one that depends on the replica (no such function,
 *       collation or module there) is a divergence
 *       (changeset_apply.c). Decoded as SQL_CHANGE_SCHEMA with in_txn 1.
 *     SQL_CHANGE_INSERT (1), SQL_CHANGE_UPDATE (2), SQL_CHANGE_DELETE (3):
 *       2      table name length (u16, >= 1), then the name bytes
 *       8      old rowid (i64; DELETE and UPDATE; 0 for INSERT and for a
 *              WITHOUT ROWID table)
 *       8      new rowid (i64; INSERT and UPDATE; 0 for DELETE and for a
 *              WITHOUT ROWID table)
 *       2      n_cols (u16, >= 1): the values per row image, in the
 *              table's column order (sqlite3_preupdate_count), with
 *              generated columns as SQLite 3.40.1 gives them: a STORED
 *              one has its computed value in its place; a VIRTUAL one
 *              has no value (sqlite3_preupdate_old/new answer
 *              SQLITE_RANGE past the stored columns), so a table with
 *              VIRTUAL columns has n_cols = its columns less those,
 *              the stored columns' values in their order
 *       old row (DELETE, UPDATE): n_cols values
 *       new row (INSERT, UPDATE): n_cols values
 *     a value: 1 byte enum sql_value_type, then
 *       INTEGER 8 (i64), FLOAT 8 (IEEE-754 binary64 bits), TEXT and
 *       BLOB 4 + len (u32 len, then the bytes), NULL nothing.
 *   The payload ends right after the last record: trailing bytes are
 *   refused.
 *
 * Rows are identified the same way on every replica: by rowid for rowid
 * tables (a table without a declared PRIMARY KEY included: every replay
 * inserts with the writer's rowid), by the old row's PRIMARY KEY columns
 * for WITHOUT ROWID tables (the pre-update hook gives them rowid 0; the
 * apply connection knows from its own schema, which equals the writer's,
 * which kind a table is). Only the main database is captured (temp and
 * attached databases are not replicated), and never the raftsql_*
 * internals or sqlite_* tables.
 *
 * What the capture cannot tell, it refuses rather than send a wrong
 * changeset (sql_capture_take: SQL_ERR_INVALID, the message says what):
 * a write through INSTEAD OF triggers, or a statement reset before its
 * last row with foreign keys on, each inside BEGIN...COMMIT (SQLite
 * shows no sign of their failure there; in autocommit mode they are
 * captured), and sqlite3_blob_write. A schema statement inside
 * BEGIN...COMMIT, whose failure SQLite does not show either, travels as
 * SQL_CHANGE_SCHEMA_IN_TXN: its replay decides.
 * changeset_capture.c lists the rules and what they rest on. REINDEX and
 * ANALYZE send nothing (sqlite_stat1 is not captured); VACUUM fires no
 * commit hook and may renumber the rowids of tables without an INTEGER
 * PRIMARY KEY: a replica must not run it. */

#ifndef SQL_CHANGESET_H
#define SQL_CHANGESET_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3ext.h>

#include "sql.h"

/* The kind of one record. */
enum sql_change_kind {
    SQL_CHANGE_INSERT = 1,
    SQL_CHANGE_UPDATE = 2,
    SQL_CHANGE_DELETE = 3,
    SQL_CHANGE_SCHEMA = 4,
    SQL_CHANGE_SCHEMA_IN_TXN = 5, /* on the wire only: decoded as
                                     SQL_CHANGE_SCHEMA with in_txn 1 */
};

/* The writer's connection settings a SQL_CHANGE_SCHEMA_IN_TXN record
 * carries (sqlite3_db_config), under which the replay runs it: each
 * changes what a schema statement does or whether it fails. */
#define SQL_SCHEMA_FKEY 0x01         /* SQLITE_DBCONFIG_ENABLE_FKEY */
#define SQL_SCHEMA_TRIGGER 0x02      /* SQLITE_DBCONFIG_ENABLE_TRIGGER */
#define SQL_SCHEMA_LEGACY_ALTER 0x04 /* SQLITE_DBCONFIG_LEGACY_ALTER_TABLE */
#define SQL_SCHEMA_DQS_DDL 0x08      /* SQLITE_DBCONFIG_DQS_DDL */
#define SQL_SCHEMA_SETTINGS_ALL 0x0f

/* Fixed header size of a changeset payload, bytes. */
#define SQL_CHANGESET_HEADER 32

/* One decoded record. Pointers reference the payload it was decoded from
 * (or the capture's memory), which must outlive it. */
struct sql_change {
    uint8_t kind;      /* enum sql_change_kind */
    const char *table; /* table name, table_len bytes, not NUL-terminated;
                           NULL for SQL_CHANGE_SCHEMA */
    size_t table_len;
    int64_t old_rowid;         /* DELETE, UPDATE */
    int64_t new_rowid;         /* INSERT, UPDATE */
    unsigned n_cols;           /* values per row image */
    struct sql_value *old_row; /* n_cols values (DELETE, UPDATE), else NULL */
    struct sql_value *new_row; /* n_cols values (INSERT, UPDATE), else NULL */
    const char *sql; /* SQL_CHANGE_SCHEMA: the statement, sql_len bytes */
    size_t sql_len;
    uint8_t in_txn;   /* SQL_CHANGE_SCHEMA: 1 when run inside a
                         transaction (SQL_CHANGE_SCHEMA_IN_TXN on the
                         wire): whether it failed is unknown */
    uint8_t settings; /* in_txn: the writer's SQL_SCHEMA_* bits */
};

/* A decoded changeset. */
struct sql_changeset {
    uint64_t id[2];             /* origin node id, origin sequence number */
    uint64_t lease;             /* lease id, 0 for none */
    unsigned n;                 /* records */
    struct sql_change *changes; /* n records (allocated by the decoder) */
    struct sql_value *values;   /* the rows' values (allocated likewise) */
};

/* sql_changeset_is reports whether payload @p (@len bytes) is a changeset
 * (starts with the magic "CS"), without decoding it. Pure; any thread. */
int sql_changeset_is(const void *p, size_t len);

/* sql_changeset_decode parses payload @p (@len bytes) into @out, whose
 * arrays it allocates (free them with sql_changeset_free); the names,
 * texts and blobs point into @p. Every length is bounds-checked.
 * Errors: SQL_ERR_CORRUPT (truncated or malformed: @errmsg, @errmsg_len
 * bytes, says what and at which record), SQL_ERR_FORMAT (a version this
 * build does not know), SQL_ERR_NOMEM. Pure; any thread. */
int sql_changeset_decode(const void *p, size_t len, struct sql_changeset *out,
                         char *errmsg, size_t errmsg_len);

/* sql_changeset_free frees what sql_changeset_decode allocated in @cs
 * (not @cs itself) and zeroes it. NULL-safe. */
void sql_changeset_free(struct sql_changeset *cs);

/* The capture of one host connection. Opaque. */
struct sql_capture;

/* sql_capture_open starts capturing the write transactions of host
 * connection @db: it installs the pre-update hook, the trace hook
 * (SQLITE_TRACE_STMT | SQLITE_TRACE_PROFILE, its mask 0 while not armed:
 * sql_capture_arm) and the rollback hook on
 * @db, replacing whatever was there (the caller checks later, with
 * sql_capture_intact, that nobody replaced them). The running
 * transaction's records are kept in memory up to @max_bytes of encoded
 * payload; past it the transaction is marked too big (sql_capture_take
 * then refuses it) and recording stops, so memory stays bounded.
 * Returns 0 with *@out set (free with sql_capture_close), or
 * SQL_ERR_INVALID when the SQLite in use has no pre-update hook
 * (@why, @why_len bytes, says why: preupdate_resolve), SQL_ERR_NOMEM.
 * Thread: any, with @db not in use by another thread. */
int sql_capture_open(sqlite3 *db, uint64_t max_bytes, struct sql_capture **out,
                     char *why, size_t why_len);

/* sql_capture_intact reports whether @c's three hooks are still the ones
 * installed on its connection (1) or a host replaced one (0; the trace
 * hook also when it was replaced while the capture was not armed, and
 * sql_capture_arm put it back): then its records are not the
 * transaction's whole effect. Each of SQLite's hook
 * setters returns the previous one, so it re-installs each to read it
 * back. Thread: the connection's. */
int sql_capture_intact(struct sql_capture *c);

/* sql_capture_pending returns how many records the running transaction
 * has (0: it wrote nothing that is replicated), and at least 1 when it
 * did something that sql_capture_take refuses (poisoned, too big, out of
 * memory), so that a caller that skips take on 0 never lets such a
 * transaction commit unseen; 1 too for one with no record that ran an
 * INSERT (or REPLACE) into a table not internal, which may have written
 * sqlite_sequence with no row (an INSERT of no row into an AUTOINCREMENT
 * table): sql_capture_take sends it as a changeset of no record, whose
 * apply settles sqlite_sequence on every replica (changeset_apply.c).
 * Thread: the connection's. */
unsigned sql_capture_pending(const struct sql_capture *c);

/* sql_capture_take encodes the running transaction's records into a
 * changeset payload with origin id @id and lease @lease, and forgets
 * them: *@out (malloc'd, the caller frees) holds *@out_len bytes. Called
 * from the connection's commit hook: it runs no SQL.
 * Errors: SQL_ERR_TOOBIG (the transaction exceeded max_bytes; @errmsg
 * says by how much: the records are forgotten), SQL_ERR_INVALID (nothing
 * to send: sql_capture_pending is 0, or the transaction did something that cannot be replicated as rows, such as
 * sqlite3_blob_write on a replicated table: @errmsg says which),
 * SQL_ERR_NOMEM (a hook ran out of memory, or this call). In every case
 * the transaction's records are forgotten. Thread: the connection's. */
int sql_capture_take(struct sql_capture *c, const uint64_t id[2],
                     uint64_t lease, void **out, size_t *out_len, char *errmsg,
                     size_t errmsg_len);

/* sql_capture_reset forgets the running transaction's records (after a
 * refused COMMIT, say). Thread: the connection's. */
void sql_capture_reset(struct sql_capture *c);

/* sql_capture_arm makes sure @c traces the statements of its connection
 * from the next one that starts. While every statement prepared on the
 * connection is a read (read-only, and SELECT, WITH or VALUES) and none
 * runs, no transaction being open, the capture stops tracing (SQLite
 * then reads no clock and calls no hook for a statement); the caller
 * arms it as a statement that is not such a read is prepared (the guard,
 * its authorizer, sees a write, a transaction, a PRAGMA), before that
 * statement can step. A write that runs unarmed anyway (prepared past
 * the guard) is not replicated: a row it writes poisons its
 * transaction, and sql_capture_pending and sql_capture_take treat a
 * commit while unarmed as such (refused: nothing was traced). Two calls
 * into SQLite (the trace hook read back and set). Thread: the
 * connection's (an authorizer). */
void sql_capture_arm(struct sql_capture *c);

/* Told when a capture arms (@armed 1) or disarms (0): @arg as given to
 * sql_capture_set_armed_cb. Runs on the connection's thread, inside
 * SQLite's trace hook, an authorizer or a commit hook; must not step
 * statements. */
typedef void (*sql_capture_armed_cb)(void *arg, int armed);

/* sql_capture_set_armed_cb makes @cb (with @arg; NULL: none, the default)
 * the armed callback of @c, told as above. Thread: the connection's. */
void sql_capture_set_armed_cb(struct sql_capture *c, sql_capture_armed_cb cb,
                              void *arg);

/* A gate asked at the start of each statement that may write (not
 * sqlite3_stmt_readonly; a statement's own start, not a trigger's or a
 * nested one's) on a captured connection: @arg as given to
 * sql_capture_set_gate, @stmt the statement. Returns 0 to let the
 * transaction be replicated, or non-zero with @why (@why_len bytes)
 * saying why it must not: the transaction is then poisoned with that
 * reason (sql_capture_take refuses it). Runs inside SQLite's trace
 * hook, on the connection's thread, which may prepare (not step)
 * statements on the connection. */
typedef int (*sql_capture_gate_cb)(void *arg, sqlite3_stmt *stmt, char *why,
                                   size_t why_len);

/* sql_capture_set_gate makes @gate (with @arg; NULL: none, the default)
 * the gate of @c, asked as above. Thread: the connection's. */
void sql_capture_set_gate(struct sql_capture *c, sql_capture_gate_cb gate,
                          void *arg);

/* What a statement callback is told (its @end). */
enum {
    SQL_CAPTURE_STMT_START = 0, /* a statement starts */
    SQL_CAPTURE_STMT_END = 1    /* a statement ended or was reset */
};

/* A statement callback told, from SQLite's trace hook on a captured
 * connection, when a statement starts (@end SQL_CAPTURE_STMT_START: its
 * own start, not a trigger's or a nested one's) and when a statement
 * ends or is reset (SQL_CAPTURE_STMT_END: any statement, nested ones
 * too): @arg as given to sql_capture_set_stmt_cb, @stmt the statement.
 * The start comes before the statement opens its transaction
 * (OP_Transaction), so a caller that must wait for something before the
 * statement reads can wait there. A read at rest (a SELECT, WITH or
 * VALUES with no transaction open and nothing recorded) is not told its
 * start, nor its end while the capture is not armed (sql_capture_arm);
 * a statement that runs unarmed is told nothing. Runs on the
 * connection's thread; must not step statements on it. */
typedef void (*sql_capture_stmt_cb)(void *arg, sqlite3_stmt *stmt, int end);

/* sql_capture_set_stmt_cb makes @cb (with @arg; NULL: none, the default)
 * the statement callback of @c, told as above. Thread: the connection's. */
void sql_capture_set_stmt_cb(struct sql_capture *c, sql_capture_stmt_cb cb,
                             void *arg);

/* sql_capture_close removes the three hooks from @c's connection (SQLite
 * cannot read a hook without replacing it, so one a host put over ours
 * goes too: sql_capture_intact says whether that happened) and frees
 * @c. NULL-safe. Thread: the connection's, or any
 * once the connection is closed (@closed 1: the hooks are gone with it). */
void sql_capture_close(struct sql_capture *c, int closed);

#endif /* SQL_CHANGESET_H */
