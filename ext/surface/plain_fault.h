/* Injected crash and failure points of a plain write's COMMIT, for the
 * tests of its three windows (issue #24, "Exactly once, across every
 * crash"). Test builds only (RAFTSQL_TEST_FAULTS): elsewhere every call
 * is a no-op. The point is chosen by the environment variable
 * RAFTSQL_TEST_PLAIN_FAULT of the writer's process, and fires once per
 * process, at the first plain COMMIT that reaches it:
 *   kill-after-quorum       the entry is committed by a quorum, the
 *                           local commit has not happened: the process
 *                           kills itself (SIGKILL);
 *   stop-after-local-commit the local commit is done, the applier has
 *                           not recorded the entry: the process stops
 *                           itself (SIGSTOP) when the connection lets
 *                           the file's write lock go, for the test to
 *                           kill it;
 *   full-at-local-commit    the local commit's first write to the WAL
 *                           fails with SQLITE_FULL (the disk filled up
 *                           after the quorum).
 * and one that fires at every plain write of the process:
 *   stale-at-lock           a statement's ask for the lease at its start
 *                           (wal_lock_early) is skipped, as if answered
 *                           busy, and its next ask (as it begins to read)
 *                           waits first (up to 5 s) until another writer
 *                           commits: the WAL-index header it read moved
 *                           by its grant, as under contention;
 *   slow-ask                every ask for the lease (wal_lock.c) waits
 *                           PLAIN_FAULT_SLOW_ASK_MS first, as a round
 *                           trip to a distant leader would. */

#ifndef EXT_PLAIN_FAULT_H
#define EXT_PLAIN_FAULT_H

#include <sqlite3ext.h>

/* plain_fault_after_quorum is called by the commit hook of @db once the
 * quorum committed the transaction's entry, before it lets SQLite commit
 * locally. Thread: the one committing on @db. */
void plain_fault_after_quorum(sqlite3 *db);

/* plain_fault_after_local_commit is called when a connection lets the
 * WAL write lock go under a lease whose entry committed (its local
 * commit done, or failed). Thread: that connection's. */
void plain_fault_after_local_commit(void);

/* plain_fault_skip_early returns whether stale-at-lock is chosen: the
 * caller then skips its ask for the lease at a statement's start. Any
 * thread. */
int plain_fault_skip_early(void);

/* How long slow-ask makes each ask for the lease wait, ms. */
#define PLAIN_FAULT_SLOW_ASK_MS 100

/* plain_fault_slow_ask is called as a connection asks for the lease
 * (wal_lock.c): with slow-ask chosen it sleeps PLAIN_FAULT_SLOW_ASK_MS;
 * returns at once otherwise. Thread: that connection's. */
void plain_fault_slow_ask(void);

/* plain_fault_before_ask is called as a connection asks for the lease
 * at a lock of its main file @file (wal_lock.c's read_ask): with
 * stale-at-lock chosen, it reads the WAL-index header and returns once
 * the header differs from that reading (another writer committed), or
 * after 5 s; at once otherwise. Thread: that connection's. */
void plain_fault_before_ask(sqlite3_file *file);

#endif /* EXT_PLAIN_FAULT_H */
