/* The write guard: an authorizer on host connections that refuses direct
 * writes to a replica's database file, whether a node serves it or not. */

#ifndef EXT_GUARD_H
#define EXT_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3ext.h>

/* ext_guard_install sets the guard as @db's authorizer (replacing any
 * other: see https://sqlite.org/c3ref/set_authorizer.html). While a node
 * runs (or ran earlier in this process) for a database file, or a node
 * of another process of the machine serves it (its pointer file names a
 * live process), INSERT,
 * UPDATE, DELETE and schema changes on it (as "main" or ATTACHed under any
 * name) are denied at prepare time (SQLite reports "not authorized"; a
 * line naming raft_exec() is logged to stderr), and so is a PRAGMA
 * journal_mode= other than WAL (the line says the node keeps WAL);
 * TEMP objects and reads stay
 * allowed, but reads of replicated tables while ext_guard_read_refusal
 * refuses them (the node diverged or stale, max_staleness_ms=, or no node
 * serving a file bound by it; the raftsql_*, sqlite_* and raft_* names
 * and TEMP stay readable). While no node serves a replica's file (one
 * whose schema has a raftsql_applied table: its node stopped, died or
 * has not started; asked of @db's schema in memory, or for a VACUUM INTO
 * target on a read-only connection of its own), or a file bound by
 * max_staleness_ms (attach_sock_unserved), its writes are denied too,
 * naming why on stderr: nobody would replicate them. It turns SQLITE_DBCONFIG_DEFENSIVE on for @db
 * and, while @db is DEFENSIVE, leaves the writes to the shadow tables of
 * SQLite's own modules (FTS3/4/5, R*Tree, geopoly) to SQLite, which
 * refuses a statement's own ("table X may not be modified") and lets the
 * module prepare its (R*Tree does when @db opens its table): those tables
 * read; deciding opens a read-only connection of its own on the file,
 * for writes to a name with a '_' only. It sets @db's commit hook too
 * (replacing any other), which vetoes a commit that writes a replica's
 * file (SQLITE_CONSTRAINT_COMMITHOOK, a line on stderr): one that got
 * past no guard, the host having replaced the authorizer after this
 * call. The connection is tracked (a function named
 * raftsql_guarded_connection forgets it at close) for
 * ext_guard_expire_all, and its main file watched (refusal_watch.h).
 * Returns SQLITE_OK or SQLite's error. Any thread. */
int ext_guard_install(sqlite3 *db);

/* ext_guard_plain_start starts the plain-write path of @db
 * (plain_write.h: its capture's hooks, its write lock under the lease)
 * when its main file is served by a node of this process or another
 * (its pointer file), so that the first statement it prepares is
 * followed already, and its read transactions begin through
 * ext_guard_read_begin (the wrapped WAL lock); nothing otherwise, or when
 * started before. raft_start calls it on its connection once the node
 * runs. Thread: the one using @db. */
void ext_guard_plain_start(sqlite3 *db);

/* ext_guard_read_start wraps the WAL lock of @db for its reads
 * (wal_lock_wrap_reads) when its main file is served by a node of this
 * process or another (its pointer file), so that its read transactions
 * begin through ext_guard_read_begin, reads only too: it refuses a
 * statement prepared before its node turned stale on a connection too
 * busy since to be expired. Nothing for a node's apply connection or a
 * file no node serves; its plain-write path still starts with its first
 * write. The extension's entry point calls it on each connection it is
 * loaded on. Thread: the one using @db. */
void ext_guard_read_start(sqlite3 *db);

/* ext_guard_expire_all marks every guarded connection of the process
 * (those ext_guard_install or ext_guard_set_host set up, until they
 * close) to have its prepared statements expired, and expires those it
 * can at once (ext_guard_expire_retry): a statement prepared while reads
 * were allowed is authorized again when next stepped (sqlite3_step
 * reprepares it), so the guard refuses it once a node turned stale.
 * Connections of other files merely reprepare. What the guard's read
 * cache remembered before this call is used no more (guard.c, "The read
 * cache"): a prepare after its connection's expiry asks anew. Any
 * thread (SQLite's
 * connection mutexes are recursive: one the caller holds is expired
 * too; the lock order is a connection's mutex, then the list's). */
void ext_guard_expire_all(void);

/* ext_guard_expire_retry expires the statements of the marked
 * connections whose mutex is free now (sqlite3_mutex_try: a connection in
 * use, or closing, is never waited for; it stays marked for the next
 * call). The authorizer stays as it is (a flag of no consequence,
 * SQLITE_DBCONFIG_TRIGGER_EQP, is turned and turned back: SQLite expires
 * the statements when a flag changes; SQLite 3.22 or later). A
 * connection without a mutex (SQLITE_OPEN_NOMUTEX, or a single-thread
 * SQLite build) cannot be touched from another thread: its mark is
 * dropped and its statements are not expired. A statement stepped
 * meanwhile (rows read, not reset) runs to its end unless it opens a
 * table anew (SQLITE_ABORT_ROLLBACK then). Cheap when nothing is marked.
 * Returns whether marked connections remain. Any thread, as
 * ext_guard_expire_all (the loop thread calls it at every tick, the
 * refusal watch while its marks remain). */
bool ext_guard_expire_retry(void);

/* ext_guard_read_begin is asked as a read transaction of @db's main
 * file begins (wal_lock.c, at its read mark), in @db's own thread,
 * holding its mutex, inside a step. When an expiry of @db is still
 * pending (ext_guard_expire_all asked for it while @db was busy, so that
 * no ext_guard_expire_retry could take it) and the guard refuses reads
 * of the file now (ext_guard_read_refusal), @db expires its statements
 * itself and SQLITE_SCHEMA is returned, which the caller returns from
 * the lock: the statement that begins the read fails with it before
 * reading anything, and sqlite3_step prepares it anew, as after a schema
 * change, through the guard, which refuses it. Else SQLITE_OK (reads
 * allowed: the statement reads on, and a pending expiry is left to the
 * next retry). Without this, a connection busy from before a refusal
 * until after it (a long statement, a raft_barrier's wait) ran its next
 * statement, prepared before, unexpired: a read of a stale replica
 * served past max_staleness_ms for as long as it stayed busy. One atomic
 * load when no expiry is pending. Thread: @db's, holding its mutex. */
int ext_guard_read_begin(sqlite3 *db);

/* ext_guard_settings_sync sets on @db the cluster-wide settings (PRAGMA
 * foreign_keys and the others of sql_setting_name) that the node of its
 * main file has in force, as its settings notice says
 * (attach_sock_settings): what a user reads there is what the node
 * enforces. Nothing when no node keeps a notice for the file (none
 * runs, or the file is no replica). ext_guard_install and
 * ext_guard_set_host call it; raft_exec and the other writes call it on
 * their caller's connection once answered. One stat(), and a small read
 * when there is a notice. Thread: the one using @db (it may run PRAGMA
 * statements on @db, unseen by a host's authorizer). */
void ext_guard_settings_sync(sqlite3 *db);

/* ext_guard_settings_push sets foreign_keys as @mask says (bit 0: ON) on
 * every guarded connection of database file @file whose mutex is free
 * now (sqlite3_mutex_try; a connection without a mutex is left alone):
 * its statements are expired by SQLite when the flag changes. The other
 * settings need a statement on the connection, which only its own
 * thread may run: they follow at the connection's next
 * ext_guard_settings_sync. Returns whether a busy connection is left to
 * a later call. Any thread (the refusal watch calls it when the notice
 * changes). */
bool ext_guard_settings_push(const char *file, unsigned mask);

/* What ext_guard_read_refusal answers besides 0 (reads allowed). */
#define EXT_GUARD_STALE 1    /* a stale replica, or no node serves it */
#define EXT_GUARD_DIVERGED 2 /* a diverged replica */

/* ext_guard_read_refusal says whether the guard refuses reads of the
 * replicated tables of database file @file now, and why into @why
 * (@why_len bytes): EXT_GUARD_DIVERGED while its node (in this process,
 * or another: its notice beside the file, attach_sock_diverged) is a
 * diverged replica; EXT_GUARD_STALE while it is a stale one
 * (max_staleness_ms=, staleness.h; attach_sock_stale), or while no node
 * serves a file bound by max_staleness_ms (attach_sock_unserved); else
 * 0. A few stat() calls when no node of the process runs for @file. Any
 * thread. */
int ext_guard_read_refusal(const char *file, char *why, size_t why_len);

/* ext_guard_allowed_gen returns a count for database file @file that
 * moves each time the guard allows a read of it, no node of this process
 * serving it, after asking the files beside it (not from its short
 * cache); files share 16 counts by a hash of their name, so another
 * file's reads may move it too. The refusal watch (refusal_watch.c)
 * takes a move as "reads were allowed since my last look", so that a
 * refusal it sees next expires the statements prepared meanwhile even
 * when it saw the file refused at its last look too (a node that went
 * from starting to serving to stopped within one watch period). Any
 * thread. */
uint64_t ext_guard_allowed_gen(const char *file);

/* ext_guard_last_error returns the reason of the latest refusal the guard
 * made on @db (a direct write, a read of a diverged or stale replica, a
 * VACUUM or journal mode, a vetoed commit), as its line on stderr says it
 * without "raftsql: ", or of the latest SQLITE_BUSY of a plain write's
 * lease (wal_lock_busy_reason: another writer holds it, no leader, the
 * start's scan runs), whichever came last; NULL when there was none since
 * @db opened (or it is not guarded, or out of memory). Each refusal replaces the one before;
 * nothing else clears it. The caller frees it with sqlite3_free. Thread:
 * the one using @db (a function call on it). */
char *ext_guard_last_error(sqlite3 *db);

/* ext_guard_asking says whether the calling thread is asking a question
 * of the guard's own about a file's schema on disk (a VACUUM INTO
 * target, the file of a commit, a shadow table's module) on a read-only
 * connection it opens for that one question and closes at once: one that
 * needs neither raftsql's functions nor the guard, so the init leaves it
 * alone (where every connection runs the init, such a connection opens
 * at each commit to a file that is no replica's). The calling thread's
 * answer; any thread. */
bool ext_guard_asking(void);

/* A host's authorizer (the callback of sqlite3_set_authorizer). */
typedef int (*ext_guard_host_cb)(void *arg, int action, const char *a1,
                                 const char *a2, const char *db_name,
                                 const char *trigger);

/* ext_guard_set_host sets on @db the guard followed by @cb (with @arg),
 * or, @cb NULL, the guard alone: the guard decides first and its DENY
 * wins; otherwise @cb's answer (SQLITE_OK, SQLITE_DENY, SQLITE_IGNORE)
 * stands. @db is made DEFENSIVE, and gets the commit hook, as by
 * ext_guard_install. @cb never
 * sees the statements raftsql prepares to check a
 * request. The state lives until the next call or the connection closes
 * (a SQL function named raftsql_host_authorizer holds it). Returns
 * SQLITE_OK, SQLITE_NOMEM, or SQLITE_BUSY while statements of @db run
 * (nothing changed then). Thread: the one using @db. */
int ext_guard_set_host(sqlite3 *db, ext_guard_host_cb cb, void *arg);

#endif /* EXT_GUARD_H */
