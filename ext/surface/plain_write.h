/* Plain SQL writes on a host connection (issue #24, DESIGN.md "The write
 * path for plain SQL"): an INSERT, UPDATE, DELETE or schema statement
 * run by the application itself, in autocommit or in BEGIN...COMMIT, on
 * the main database of a replica that a node of this process serves,
 * becomes one Raft log entry, its changeset (sql/changeset.h).
 *
 * Happy path, per write transaction: the write guard (guard.c) lets the
 * write be prepared and calls plain_write_enable, which starts the
 * connection's capture (its pre-update, trace and rollback hooks) and
 * wraps its WAL write lock (wal_lock.h); when the transaction asks for
 * that lock the node grants the write lease first (the leader's
 * applied state is this node's); SQLite runs the transaction, the
 * capture records its rows; at COMMIT the guard's commit hook calls
 * plain_write_commit, which takes the changeset and has the node append
 * it under the lease and wait for a quorum; the hook then returns 0 and
 * SQLite commits locally: this replica holds the entry, and the applier
 * only records it. ROLLBACK sends nothing; the lease ends with the lock.
 *
 * Failure modes: every one vetoes the COMMIT (SQLite rolls back; the
 * statement fails with SQLITE_CONSTRAINT_COMMITHOOK, "constraint
 * failed"), with the reason kept for raft_last_error(): no lease (this
 * node cannot serve plain writes, e.g. a follower in this release), a
 * hook replaced by the host (set_trace_callback), what the capture
 * cannot replicate (a write through INSTEAD OF triggers inside BEGIN,
 * sqlite3_blob_write),
 * a transaction over max_request_bytes, the lease lost (expired, leader
 * change: "not applied"), no quorum in time ("outcome unknown": the entry
 * may still commit; then every replica, this one included, applies it). */

#ifndef EXT_PLAIN_WRITE_H
#define EXT_PLAIN_WRITE_H

#include <stddef.h>

#include <sqlite3ext.h>

#include "../../sql/changeset.h"

/* One host connection's plain-write state. Opaque. */
struct plain_write;

/* plain_write_enable makes @db (whose state is *@pw, NULL before the
 * first call) able to write plain SQL to its main database file @path,
 * which a node of this process serves: it creates the state, starts the
 * capture and wraps the write lock, once. Returns 0, or -1 with @why
 * (@why_len bytes) saying why plain writes cannot work on @db (its SQLite
 * has no pre-update hook, its file is no WAL file, out of memory).
 * Thread: the one using @db (its authorizer). */
int plain_write_enable(struct plain_write **pw, sqlite3 *db, const char *path,
                       char *why, size_t why_len);

/* plain_write_commit is @db's commit hook's part for a transaction that
 * wrote its main file: it sends the captured changeset under the lease
 * and waits for the quorum (see above). Returns 0 (let SQLite commit),
 * or 1 (veto) with @why (@why_len bytes) saying why. A transaction that
 * captured nothing returns 0. Thread: the one committing on @db. */
int plain_write_commit(struct plain_write *pw, sqlite3 *db, char *why,
                       size_t why_len);

/* plain_write_set_gate makes @gate (with @arg) the gate of @pw's capture
 * (sql_capture_set_gate): asked at the start of each statement that may
 * write on its connection; a transaction it refuses is vetoed at COMMIT
 * with its reason. Thread: the one using the connection. */
void plain_write_set_gate(struct plain_write *pw, sql_capture_gate_cb gate,
                          void *arg);

/* plain_write_arm arms @pw's capture (sql_capture_arm): the ends of the
 * connection's statements are traced again from its next statement.
 * Called by the guard as it authorizes a statement that is not a read
 * (a write, a transaction, a PRAGMA). Cheap when armed. Thread: the one
 * using the connection (its authorizer). */
void plain_write_arm(struct plain_write *pw);

/* plain_write_free frees @pw (NULL-safe); @closed: its connection is
 * closing (its hooks go with it). */
void plain_write_free(struct plain_write *pw, int closed);

#endif /* EXT_PLAIN_WRITE_H */
