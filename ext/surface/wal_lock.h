/* The WAL write lock of a host connection, taken only under the write
 * lease (DESIGN.md "The write path for plain SQL"): the shared-memory
 * lock method (xShmLock) of the connection's main database file is
 * wrapped, so that when SQLite asks for the WAL write lock (WAL_WRITE_LOCK,
 * slot 0, exclusive: BEGIN IMMEDIATE, or a deferred transaction's first
 * write) the node serving the file (this process's, or another process's
 * over its attach socket: lease_client.h) is asked for the write lease
 * first,
 * before the lock is held: the node's applier, which needs that lock to
 * catch up, never waits on the host. A statement that opens no snapshot
 * before its write (a write statement with no transaction open, BEGIN
 * IMMEDIATE or EXCLUSIVE) has asked already, at its start
 * (wal_lock_early): then the lock takes the lease it holds. When that
 * ask was answered busy, the statement asks again as SQLite takes its
 * read mark (a read lock, slots 3 to 7) to begin reading, at its first
 * try (for up to 250 ms more) and at each retry of its busy handler
 * (once: the node waits 20 ms for a retry): SQLite reads the WAL-index
 * header again when it moved meanwhile, so a grant that came after
 * another writer's commit leaves it a snapshot that is not stale. Asked
 * with the snapshot held, at the write lock, such a grant was wasted:
 * SQLite found the snapshot stale (SQLITE_BUSY_SNAPSHOT) and let the
 * lock and the lease go, at every retry under contention. A refusal
 * there makes the write lock SQLITE_BUSY without asking again. The
 * lease ends when SQLite releases
 * the lock: at COMMIT, ROLLBACK, a write that failed with
 * SQLITE_BUSY_SNAPSHOT (SQLite takes the lock, sees a stale snapshot and
 * lets it go), and the connection's close.
 *
 * Answers, as SQLite's own: the lease held by another writer (or no
 * leader yet) makes the lock SQLITE_BUSY, so the connection's busy handler
 * (its busy timeout) retries; a node that cannot serve plain writes
 * (lease_client_acquire's other refusals) lets the lock be taken with
 * no lease, keeping the reason: the guard's commit hook then vetoes any
 * replicated change, naming it, and a lock taken for a read (WAL
 * recovery) or a checkpoint is not held up. A checkpoint's lock (it
 * holds WAL_CKPT_LOCK, slot 1, first) asks for no lease.
 *
 * Under a lease the wrapper reads the WAL-index header (sql_wal_header)
 * right after the lock is taken and right before it is let go: between
 * the two only this connection committed. Both readings end the lease
 * with it (lease_client_release), so that the node's applier knows the
 * writer's commit from another process's (sql.h, "Who committed around
 * a plain write").
 *
 * Why a wrapper of the open file rather than a VFS: a VFS cannot be
 * swapped on an open connection, and the connection that loaded raftsql
 * (the shell's, Python's) was opened before. The wrapper is a copy of the
 * file's methods with xShmLock and xClose replaced, allocated per file
 * and freed at its close; the original methods run on the same file
 * object. */

#ifndef EXT_WAL_LOCK_H
#define EXT_WAL_LOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3ext.h>

#include "lease_client.h"

/* wal_lock_wrap wraps the main database file of @db (a host connection
 * on file @path, served by a node of this process or another) as above;
 * the lease is asked for as holder @holder (non-zero, unique in the
 * process). Nothing when it is wrapped already (but the file is then
 * marked shared by connections: wal_lock_set_armed). Returns 0, or -1
 * with @why (@why_len bytes) saying why not (no file, not in WAL mode, a
 * file method version without shared memory, out of memory). Thread: the
 * one using @db. */
int wal_lock_wrap(sqlite3 *db, const char *path, uint64_t holder, char *why,
                  size_t why_len);

/* wal_lock_wrap_reads wraps the main database file of @db (on file
 * @path, served by a node of this process or another) for its read
 * transactions only: they begin through the read-begin check
 * (wal_lock_set_read_begin), every other lock is SQLite's own. A later
 * wal_lock_wrap of @db (its plain writes start) makes it a full wrap.
 * Returns 0, or -1 with @why as wal_lock_wrap. Thread: the one using
 * @db. */
int wal_lock_wrap_reads(sqlite3 *db, const char *path, char *why,
                        size_t why_len);

/* wal_lock_read_begin_cb is asked, with the connection a wrapped file
 * was wrapped for, as a read transaction of it begins (SQLite locks a
 * read mark), in that connection's thread, holding its mutex, inside a
 * step: SQLITE_OK lets the read begin; any other code fails the lock
 * with SQLITE_SCHEMA (nothing read yet: sqlite3_step prepares the
 * statement anew, as after a schema change). Not asked on a file
 * wrapped for more than one connection (a shared cache), nor while the
 * connection holds the write lock (a commit restarting the WAL takes a
 * read mark after its commit hook accepted it) or a checkpoint's. */
typedef int (*wal_lock_read_begin_cb)(sqlite3 *db);

/* wal_lock_set_read_begin makes @cb (NULL: none, the default) the
 * process's read-begin check (the guard's, ext_guard_read_begin). Any
 * thread. */
void wal_lock_set_read_begin(wal_lock_read_begin_cb cb);

/* wal_lock_set_armed tells @db's wrapper whether the connection's
 * capture is armed (sql_capture_arm). While it is not, a write
 * transaction's write lock is refused (SQLITE_READONLY, before anything
 * is written; wal_lock_busy_reason says why): the write got past the
 * guard, whose prepare of any write arms the capture. Not on a file
 * wrapped for more than one connection (a shared cache). Nothing when
 * @db's file is not wrapped. Thread: the one using @db. */
void wal_lock_set_armed(sqlite3 *db, bool armed);

/* wal_lock_early asks for the lease of @db's main file before a statement
 * that will take the WAL write lock opens its transaction (a write
 * statement with no transaction open, BEGIN IMMEDIATE or EXCLUSIVE):
 * held from then on, the lock takes it without asking. Waiting here, the
 * statement holds no snapshot yet, so it reads what the writers before it
 * committed; waiting at the lock, it would hold the snapshot it had
 * before the wait, which SQLite then finds stale (SQLITE_BUSY_SNAPSHOT),
 * and the lease would go unused. A refusal (busy, no node) leaves nothing
 * held: the lock asks again as without this call. Nothing when the file
 * is not wrapped or holds a lease or the lock already. @stmt names the
 * statement (compared only). Thread: the one using @db (its trace hook,
 * at the statement's start). */
void wal_lock_early(sqlite3 *db, const void *stmt);

/* wal_lock_one_try tells @db's wrapped main file that statement @stmt
 * writes after its transaction read: SQLite calls no busy handler for
 * its WAL write lock (a transaction holding a snapshot answers
 * SQLITE_BUSY at once), so the lock asks for the lease with
 * EXT_LEASE_ONE_TRY (node.h): with no leader, it waits for one, up to
 * the node's exec_timeout_ms, rather than end the transaction at an
 * election. Until @stmt ends (wal_lock_stmt_end) or the lock is let go.
 * Nothing when the file is not wrapped or holds a lease or the lock
 * already. Thread: the one using @db (its trace hook, at the statement's
 * start). */
void wal_lock_one_try(sqlite3 *db, const void *stmt);

/* How long after a write of a transaction that read was let go for a
 * stale snapshot (or refused the lease) the connection's transactions
 * that begin with the same read ask for the lease at that read
 * (wal_lock_txn_early, plain_write.c), ms: the application's retry,
 * after its own back-off, and the same transactions after it while the
 * contention lasts. */
#define WAL_LOCK_STARVED_MS 2000

/* wal_lock_txn_early is wal_lock_early for @stmt, the first statement
 * of a deferred transaction, a read, on a connection where a write of a
 * transaction that began with the same read was let go for a stale
 * snapshot or refused the lease (wal_lock_stmt_end returned true) less
 * than WAL_LOCK_STARVED_MS ago (plain_write.c): a grant is held past the
 * statement, to the transaction's end (its read lock let go: COMMIT or
 * ROLLBACK; a write under it commits as BEGIN IMMEDIATE's would), so that
 * nothing commits between its read and its write. Beside writers that
 * commit back to back such a transaction otherwise never commits (a new
 * user's trial: 0 of 3,430 tries beside six writers): each commit holds
 * the lease for a quorum's round trip and an fsync, so another one lands
 * in every read-to-write window. A refusal holds nothing: the read goes
 * on without the lease. Thread: the one using @db (its trace hook, at
 * the statement's start). */
void wal_lock_txn_early(sqlite3 *db, const void *stmt);

/* wal_lock_stmt_end tells @db's wrapped main file that statement @stmt
 * ended: a lease wal_lock_early took for it is let go when it ended
 * without taking the WAL write lock (it failed first, or wrote only to
 * another database), but for wal_lock_txn_early's, and its
 * wal_lock_one_try ends. Nothing when @stmt is another statement (a
 * nested one), the lock was taken, or no lease is held. Returns true
 * when a write after its transaction read (wal_lock_one_try) was let go
 * since the last call for a stale snapshot (SQLITE_BUSY_SNAPSHOT) or
 * refused the lease: the connection's next such transaction then asks
 * at its first read (wal_lock_txn_early). Thread: the one using @db (its
 * trace hook, at a statement's end). */
bool wal_lock_stmt_end(sqlite3 *db, const void *stmt);

/* wal_lock_skip_sync makes the local commit of @db's transaction, whose
 * changeset a quorum committed under the lease its main file holds, skip
 * the -wal file's fsync (what synchronous=NORMAL skips): the entry is
 * durable in the Raft log already, and a commit lost to a power failure
 * is replayed from there by this node's applier (the file shows the
 * state before it: sql/changeset.h's landed check). The skip ends when
 * the connection lets the write lock go; checkpoints still sync. Nothing
 * when the file holds no lease or has no -wal file open. Thread: the one
 * committing on @db (its commit hook). */
void wal_lock_skip_sync(sqlite3 *db);

/* wal_lock_locked_mark returns the WAL-index header @db's main file read
 * as it took the write lock under the lease it holds now
 * (SQL_WAL_HDR_LEN bytes, owned by the wrapper, valid until the lock is
 * released), or NULL when there is none. Thread: the one using @db (its
 * commit hook). */
const unsigned char *wal_lock_locked_mark(sqlite3 *db);

/* wal_lock_lease returns the lease @db's main file holds now (the WAL
 * write lock is held under it; owned by the wrapper, valid until the lock
 * is released), or NULL, and when NULL copies to @why (@why_len bytes,
 * may be 0) why the lock was taken without one ("" when it is not held,
 * or not wrapped). Thread: the one using @db (its commit hook). */
const struct lease_hold *wal_lock_lease(sqlite3 *db, char *why, size_t why_len);

/* wal_lock_busy_reason writes into @why (@why_len bytes) why the latest
 * lease ask of @db's main file answered busy (the connection then met
 * SQLITE_BUSY: another writer holds the lease, no leader is known, the
 * start's scan runs...), and returns when, CLOCK_MONOTONIC ns; or 0 with
 * @why "" when none did since the file was wrapped (or it is not), or a
 * lease was granted since (the busy handler's wait ended in a write).
 * Thread: the one using @db. */
int64_t wal_lock_busy_reason(sqlite3 *db, char *why, size_t why_len);

#endif /* EXT_WAL_LOCK_H */
