/* A busy timeout that counts raftsql's own waits.
 *
 * SQLite's busy handler (sqlite3_busy_timeout, PRAGMA busy_timeout) adds
 * up only its own sleeps: it sleeps 1, 2, 5 ... 100 ms between retries
 * through the connection's VFS (xSleep) until the sleeps reach the
 * timeout. A plain write waits for the write lease inside the lock calls
 * that SQLite retries (wal_lock.c): up to 250 ms in the node's queue as a
 * statement starts and again as it begins to read, 20 ms or a round trip
 * to the leader at each retry. SQLite never sees those waits, so
 * SQLITE_BUSY came after the busy timeout plus all of them: 2.9 s for a
 * 2 s timeout, up to 2.7 times the timeout on a follower's file.
 *
 * So the waits are owed to the thread that made them (busy_clock_owe),
 * and the default VFS's xSleep, wrapped once per process
 * (busy_clock_install), sleeps that much less: a busy handler's sleep of
 * d ms on a thread owed c ms sleeps max(0, d - c) and leaves max(0,
 * c - d) owed. A retry that comes while something is still owed (the
 * handler's sleep was all taken by it) would come before the handler's
 * time: wal_lock.c answers it busy at once, without asking
 * (busy_clock_ahead), and the next sleep takes the rest. Each retry of
 * SQLite's handler then costs its sleep or the ask, whichever is
 * longer, and SQLite's count of its sleeps, unchanged, ends the wait
 * when the waits and the sleeps together reach the busy timeout, plus
 * at most the last ask. Only the busy handler's sleeps are
 * shortened: sleeps of whole milliseconds, as SQLite's handler and
 * sqlite3_sleep() make them (the WAL's own short backoffs, of 1 us or
 * (n-9)^2 * 39 us, are never whole milliseconds below n = 109, and SQLite
 * gives up at n = 100). What is owed is forgotten as a statement begins
 * and ends (busy_clock_forget), and 1 s after it was owed, so nothing
 * carries over to another statement's sleeps.
 *
 * Limits: only connections of the VFS that was the default when raftsql
 * was first loaded in the process (other VFSes sleep as before); the
 * wrap is a plain store into that VFS's xSleep, made once, at the first
 * init, before any node of raftsql runs: a host thread of another
 * library sleeping through that VFS at that very moment races with it. */

#ifndef EXT_BUSY_CLOCK_H
#define EXT_BUSY_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

/* busy_clock_install wraps the xSleep of the process's default VFS
 * (sqlite3_vfs_find(NULL)) so that sleeps of whole milliseconds are
 * shortened by what the calling thread is owed. Once per process (later
 * calls do nothing); nothing when there is no default VFS. Call it from
 * the extension's init, before any thread of raftsql runs. */
void busy_clock_install(void);

/* busy_clock_owe adds @ns (>= 0, ns) to what the calling thread is owed:
 * time it waited for raftsql (the lease, the node's own work) inside a
 * call SQLite may retry after a busy handler's sleep. Thread: any, for
 * itself. */
void busy_clock_owe(int64_t ns);

/* busy_clock_forget sets what the calling thread is owed to 0, and
 * forgets that it slept. Thread: any, for itself. */
void busy_clock_forget(void);

/* busy_clock_ahead returns whether the calling thread's retry comes
 * before its busy handler's time: it slept through the wrapped xSleep
 * since it last forgot (its handler's sleeps are counted here; a host's
 * handler that sleeps otherwise never is), and is still owed something.
 * Thread: any, for itself. */
bool busy_clock_ahead(void);

/* busy_clock_owed returns what the calling thread is owed, ns. Thread:
 * any, for itself. */
int64_t busy_clock_owed(void);

/* busy_clock_take returns how long a sleep of @us (microseconds) should
 * sleep when *@owed_ns is owed: @us less what is owed for a sleep of
 * whole milliseconds (@us a positive multiple of 1000), never below 0,
 * and takes that much from *@owed_ns; @us, with *@owed_ns unchanged,
 * for any other sleep. Pure. */
int busy_clock_take(int64_t *owed_ns, int us);

#endif /* EXT_BUSY_CLOCK_H */
