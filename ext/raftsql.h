/* raftsql public C API: make a SQLite database one replica of a Raft
 * group. Link libraftsql.a (or load raftsql.so) and register
 * the extension; then use the SQL functions on any connection:
 *
 *     sqlite3_auto_extension((void (*)(void))sqlite3_raftsql_init);
 *     sqlite3_open("node1.db", &db);
 *     sqlite3_exec(db, "SELECT raft_start('id=1 cluster=1@127.0.0.1:7001,"
 *                      "2@127.0.0.1:7002,3@127.0.0.1:7003')", 0, 0, &err);
 *     sqlite3_exec(db, "SELECT raft_exec('INSERT INTO t VALUES(1)')", ...);
 *
 * SQL functions (docs/reference.md "SQL functions" has the full reference):
 *   raft_start(config)        start this process's node for the database
 *   raft_exec(sql, param...)  replicated write; returns rows changed
 *   raft_last_insert_rowid()  rowid of this connection's last raft_exec
 *   raft_status()             JSON status of the node
 *   raft_metrics()            the node's figures as Prometheus text
 *   raft_leader()             the leader's id, NULL when unknown
 *   raft_barrier()            linearizable reads: the read index, once
 *                             this node applied it
 *   raft_stop()               stop the node
 *
 * Errors: a failing function sets its message (sqlite3_errmsg) and a
 * stable extended result code (sqlite3_extended_errcode), one of the
 * RAFTSQL_* codes below or, for a SQL error of the write itself, SQLite's
 * own code of the failing statement (docs/errors.md).
 *
 * C functions: sqlite3_raftsql_init (the entry point),
 * raftsql_set_authorizer (a host's authorizer behind the write guard),
 * raftsql_config_check (a configuration string checked, nothing started),
 * raftsql_metrics_listen_check (where raft_metrics() may be served),
 * raftsql_node_state (whether this process's node runs, stopped or
 * failed) and raftsql_barrier (raft_barrier() from C).
 *
 * Build: cc app.c $(pkg-config --cflags --libs raftsql), after
 * `make install` (README "From a C program").
 *
 * Threads: any connection of the process, on any thread, may call these
 * concurrently; the node belongs to the process and the database file. */

#ifndef RAFTSQL_H
#define RAFTSQL_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes of raftsql's SQL functions, as sqlite3_extended_errcode()
 * gives them (and Python's sqlite3.Error.sqlite_errorcode, and a caller in
 * another process through the node's socket, unchanged). Each is
 * primary | (n << 8), SQLite's own layout of extended codes
 * (https://sqlite.org/rescode.html), with n from 101 on, far above the
 * extended numbers SQLite uses (under 40): sqlite3_errcode() and hosts
 * that look at the primary code only (code & 0xff) see a code of SQLite's
 * whose meaning fits, and whose handling by SQLite itself fits too:
 *   - SQLITE_BUSY for what was not done and can be retried as it is
 *     ("try again later": a host's retry loop on SQLITE_BUSY does the
 *     right thing, nothing was applied);
 *   - SQLITE_ERROR for what must not be retried blindly: an outcome
 *     unknown (a blind retry may apply the write twice) and bad
 *     arguments (a retry fails alike);
 *   - SQLITE_INTERRUPT for an interrupted caller, as SQLite's own
 *     interrupted statements (Python: OperationalError "interrupted");
 *   - SQLITE_FULL and SQLITE_TOOBIG as SQLite's own "disk full" and
 *     "string or blob too big" (raft_exec refuses to run inside a
 *     transaction, so SQLite's rollback of an open transaction on
 *     SQLITE_FULL or SQLITE_INTERRUPT never applies);
 *   - SQLITE_CANTOPEN when no node can serve the call;
 *   - SQLITE_ERROR too for a node removed from the cluster: a retry
 *     there never succeeds.
 * A SQL error of the write itself (a constraint, a missing table, a
 * runaway request over max_request_steps) keeps SQLite's own code of the
 * failing statement, e.g. SQLITE_CONSTRAINT_UNIQUE; it was rolled back on
 * every node. Other failures (a raft_start that cannot listen, raft_verify
 * failing to read the file) are SQLITE_ERROR, or SQLITE_NOMEM.
 * Only RAFTSQL_UNKNOWN and RAFTSQL_INTERRUPTED_UNKNOWN leave the outcome
 * open: after every other error nothing of the call was applied. */

/* Not applied, retry is safe: refused before it entered the log (no
 * leader reachable within exec_timeout_ms, the node shutting down, the
 * leader refusing it); "<fn>: not applied: ...". */
#define RAFTSQL_NOT_APPLIED (SQLITE_BUSY | (101 << 8))
/* Not applied, busy: the node's queue is full (4096 writes), or (for a
 * caller in another process) it served as many connections of other
 * processes as it takes (socket_max_clients) for as long as the
 * caller's busy timeout, at most exec_timeout_ms, or another
 * membership change is pending, or another raft_load_sql runs on it;
 * retry later. "<fn>: not applied: busy", "raft_load_sql: a load of ...
 * runs on this node: one at a time". */
#define RAFTSQL_BUSY (SQLITE_BUSY | (102 << 8))
/* Stale: this node cannot answer fresh enough (raft_barrier on a node
 * that cannot confirm a leader, a function refusing past a
 * max_staleness_ms bound); retry later or on another node. "<fn>: stale
 * replica: ...". A plain SELECT that the write guard refuses as stale
 * fails in its prepare with SQLITE_AUTH instead: an authorizer cannot
 * choose the code. */
#define RAFTSQL_STALE (SQLITE_BUSY | (103 << 8))
/* Not applied, this replica is diverged (docs/processes.md "Foreign writes"): retry
 * on another node, or here once it is repaired. "<fn>: not applied:
 * diverged replica: ...", "raft_backup: this replica is diverged ...". */
#define RAFTSQL_DIVERGED (SQLITE_BUSY | (104 << 8))
/* Not applied, the log is full (log_max_mb) or its disk is: writes resume
 * by themselves once space is freed. "raft_exec: not applied: the log is
 * full ..." or "... not applied: disk full: ...". */
#define RAFTSQL_FULL (SQLITE_FULL | (105 << 8))
/* Not applied, the request is too big: over max_request_bytes (this
 * node's or the leader's), or over 192 MiB encoded for the socket; a
 * retry as it is fails alike. "raft_exec: not applied: ...". */
#define RAFTSQL_TOOBIG (SQLITE_TOOBIG | (106 << 8))
/* Outcome unknown: the request left this node but its result did not
 * come back in time (leadership lost, a partition, the node's process
 * died); it ends up applied on every node or on none. Read before
 * retrying. "<fn>: outcome unknown: ...". */
#define RAFTSQL_UNKNOWN (SQLITE_ERROR | (107 << 8))
/* Interrupted, not applied: the caller's connection was interrupted
 * (sqlite3_interrupt) before the request left this node.
 * "<fn>: interrupted: not applied ..." (for a read: "interrupted ..."). */
#define RAFTSQL_INTERRUPTED (SQLITE_INTERRUPT | (108 << 8))
/* Interrupted, outcome unknown: interrupted after the request had left
 * this node (or was sent to another process's node), which still carries
 * it out. "<fn>: interrupted: outcome unknown: ...". */
#define RAFTSQL_INTERRUPTED_UNKNOWN (SQLITE_INTERRUPT | (109 << 8))
/* Bad arguments: the call cannot succeed whatever the data (a wrong
 * argument, a bad configuration string, a syntax error or a parameter
 * without value in the request, raft_exec inside a
 * transaction, an in-memory database, a server that is no member; a
 * bad path or argument count of raft_backup or raft_load_sql, a backup
 * target that exists, a script that is missing or refused by the
 * split); fix the call. "<fn>: ..." naming what is wrong. */
#define RAFTSQL_INVALID (SQLITE_ERROR | (110 << 8))
/* No node: none runs for the database file, in this process or another
 * of the machine, or this process may not use it (the node's socket
 * refuses its user). "<fn>: no raftsql node runs for ...", "<fn>: not
 * applied: cannot reach ...", "<fn>: not applied: refused: ...". */
#define RAFTSQL_NO_NODE (SQLITE_CANTOPEN | (111 << 8))
/* Removed: this node was removed from the cluster (raft_remove, its
 * configuration entry committed): it takes no writes and receives no
 * more entries, so a retry here never succeeds; write on a member.
 * "<fn>: not applied: this node was removed from the cluster ...". Not
 * sent, nothing of the call applied. (A request with a client id answers
 * RAFTSQL_UNKNOWN there instead: an earlier try under the id may have
 * applied; a request that had left the node before the removal
 * committed, RAFTSQL_UNKNOWN too.) Reads of replicated tables on it are
 * refused as stale (SQLITE_AUTH, "stale replica: removed from the
 * cluster ..."). */
#define RAFTSQL_REMOVED (SQLITE_ERROR | (112 << 8))

/* Refused, not applied: raft_exec does not run what the request's SQL
 * does, because its effect or answer would differ between nodes or it
 * would break the request's transaction: VACUUM, ATTACH/DETACH, TEMP
 * objects, transaction control (BEGIN, COMMIT, SAVEPOINT...), functions
 * that describe the node (sqlite_version(), load_extension(),
 * total_changes()), the 'localtime' and 'utc' modifiers, node-local
 * tables (dbstat, sqlite_dbpage...), PRAGMAs other than the replicated
 * ones, writes to raftsql_* tables. Refused by the caller's node before
 * the request enters the log; a request whose text the caller could not
 * prepare (a table it does not have yet) is refused alike when applied,
 * rolled back on every node. A retry fails alike: change the SQL (run a
 * node-local statement outside raft_exec). "<fn>: not applied: <the
 * reason>". SQLITE_AUTH as primary: SQLite's code of an authorizer's
 * refusal. */
#define RAFTSQL_REFUSED (SQLITE_AUTH | (113 << 8))

/* RAFTSQL_IS_OWN_CODE(code): true for raftsql's own codes above (n from
 * 101 to 199 is kept for them), false for SQLite's codes. */
#define RAFTSQL_IS_OWN_CODE(code) (((code) >> 8) >= 101 && ((code) >> 8) <= 199)

/* sqlite3_raftsql_init registers the raftsql SQL functions on @db and the
 * authorizer that refuses direct writes to a replicated database (see
 * https://sqlite.org/loadext.html). @pApi is the host's API table, which
 * SQLite passes when the extension is loaded or registered with
 * sqlite3_auto_extension (call it only that way). Loaded as
 * build/raftsql.so, its first success also registers it with
 * sqlite3_auto_extension, so every connection the process opens later
 * gets the same, and keeps the library loaded until the process exits
 * (SQLite would unload it when the loading connection closes); linked
 * from libraftsql.a, it registers nothing more: the program does.
 * Returns SQLITE_OK, or SQLITE_ERROR/SQLITE_NOMEM with *pzErrMsg
 * (sqlite3_malloc'd) saying why. Any thread. */
int sqlite3_raftsql_init(sqlite3 *db, char **pzErrMsg,
                         const sqlite3_api_routines *pApi);

/* raftsql_set_authorizer sets an authorizer of the host's on @db behind
 * raftsql's write guard. Loading raftsql installs the guard with
 * sqlite3_set_authorizer, and SQLite keeps one authorizer per connection
 * and cannot read it back: a host calling sqlite3_set_authorizer itself
 * afterwards removes the guard (direct writes to the replica then run,
 * and raftsql's commit hook vetoes their commit:
 * SQLITE_CONSTRAINT_COMMITHOOK). Call this instead, with the same arguments as
 * sqlite3_set_authorizer (https://sqlite.org/c3ref/set_authorizer.html):
 *   - the guard decides first: an action it refuses is SQLITE_DENY,
 *     whatever @x says; @x is not called for it;
 *   - otherwise @x(@arg, action, ...) is called and its answer stands
 *     (SQLITE_OK, SQLITE_DENY or SQLITE_IGNORE);
 *   - @x NULL removes the host's authorizer and keeps the guard.
 * @x sees the statements prepared on @db, raft_exec() as an
 * SQLITE_FUNCTION call among them, never the statements raft_exec()
 * replicates (they run on the node's own connection). @arg is the
 * caller's and must stay valid until the next call for @db or until @db
 * is closed; raftsql frees its own state (held by a SQL function named
 * raftsql_host_authorizer, which does nothing when called) then.
 * Call it after raftsql was registered on @db (sqlite3_load_extension or
 * sqlite3_auto_extension); a program that loaded build/raftsql.so finds
 * it with dlsym(). Returns SQLITE_OK; SQLITE_NOMEM; SQLITE_BUSY while
 * statements of @db run (nothing changed then); SQLITE_MISUSE when
 * raftsql.so was never loaded in this process. Thread: the one using @db,
 * as for sqlite3_set_authorizer. */
int raftsql_set_authorizer(sqlite3 *db,
                           int (*x)(void *, int, const char *, const char *,
                                    const char *, const char *),
                           void *arg);

/* raftsql_config_check checks @config, a raft_start() configuration
 * string, for the database file @db_path (which gives the default dir=),
 * as raft_start checks it, without starting anything: every key, its value
 * and the rules between keys (docs/reference.md "Configuration keys"), and the paths
 * the start needs (the database's directory exists and is writable, the
 * database file, when it exists, is readable and writable, the log
 * directory is writable or can be created: "database: the directory ...
 * does not exist"), and the files the tls_ keys and secret_file name, as
 * the start loads them (each readable, the key matching the certificate,
 * the certificate signed by tls_ca, the secret's size and mode: "tls_cert:
 * /x.pem: not signed by tls_ca /ca.pem (...)"), and that a log already in
 * the log directory belongs to this id (read-only: "id: the log in ...
 * belongs to server 3 ..."). Nothing is created. Returns
 * SQLITE_OK; SQLITE_ERROR with @errmsg (@errmsg_len bytes, NUL-terminated)
 * naming what is wrong, beginning with the key when the error is about one
 * ("id: missing ...", "unknown key 'x' ...", "listen: '...' is not
 * host:port: ..."); SQLITE_NOMEM. Needs no registered extension and no
 * database. Any thread. */
int raftsql_config_check(const char *config, const char *db_path, char *errmsg,
                         size_t errmsg_len);

/* raftsql_metrics_listen_check checks @address ("host:port"), where a
 * program (raftsql-node's metrics_listen=) serves raft_metrics() over HTTP
 * for the node that @config (a raft_start() configuration, checked as
 * raftsql_config_check checks it, for @db_path) configures, against the
 * endpoint's rule: an IP address (no hostname); off loopback (a wildcard is)
 * only with the node's certificate (tls_cert and tls_key: the endpoint
 * then serves TLS with it) or insecure=on, since a scraper cannot present
 * a pre-shared secret (secret_file). On success sets *@out_tls to 1 when
 * the endpoint serves TLS with the node's certificate (tls_cert and
 * tls_key given, on loopback too), else 0. Returns SQLITE_OK; SQLITE_ERROR
 * with @errmsg (@errmsg_len bytes) naming the key: "metrics_listen: ..."
 * or @config's own error; SQLITE_NOMEM. Needs no registered extension.
 * Any thread. */
int raftsql_metrics_listen_check(const char *config, const char *db_path,
                                 const char *address, int *out_tls,
                                 char *errmsg, size_t errmsg_len);

/* The state of a node, as raftsql_node_state tells it. */
#define RAFTSQL_NODE_RUNNING 0 /* it runs (also while it starts or stops) */
#define RAFTSQL_NODE_STOPPED 1 /* none runs in this process */
#define RAFTSQL_NODE_FAILED 2  /* it runs but cannot go on until restarted */

/* raftsql_node_state tells, into *@out_state, how the node this process
 * runs for @db's main database file is: RAFTSQL_NODE_RUNNING;
 * RAFTSQL_NODE_STOPPED when none runs in this process (never started, or
 * stopped by raft_stop() from any connection, also one of another process
 * through the node's socket); RAFTSQL_NODE_FAILED when a write of its log
 * failed (an I/O error: it neither writes, votes nor acknowledges any
 * more; raft_stop() and a new start repair it), with why in @why
 * (@why_len bytes, NUL-terminated; "" for the other states). A full log or
 * a failing apply batch is no failure here (both resume by themselves).
 * A program holding a node (tools/raftsql_node.c) polls it to notice a
 * stop it did not ask for. Returns SQLITE_OK; SQLITE_ERROR when @db's main
 * database is in-memory or temporary (@why says so); SQLITE_MISUSE when
 * raftsql.so was never loaded in this process. Any thread; does not
 * block. */
int raftsql_node_state(sqlite3 *db, int *out_state, char *why, size_t why_len);

/* raftsql_barrier is raft_barrier() on @db (ReadIndex, thesis §6.4): the
 * node of @db's main database file (this process's, or another's through
 * its socket) gets the leader's commit index confirmed by a quorum
 * heartbeat round and waits until it has applied it; the index goes to
 * *@out_index (written only on success). Plain SELECTs on @db after it,
 * outside a read transaction opened before it, see every write
 * acknowledged before the call (linearizable reads). Blocks at most
 * election_timeout_ms (and a little slack) for the confirmation, then
 * exec_timeout_ms in all; sqlite3_interrupt(@db) ends it; refused while
 * @db is inside a transaction (BEGIN). Returns
 * SQLITE_OK; else the error's extended result code (RAFTSQL_STALE for
 * every failure to confirm or apply in time, RAFTSQL_INTERRUPTED,
 * RAFTSQL_BUSY, RAFTSQL_INVALID inside a transaction, RAFTSQL_NO_NODE)
 * with the message in
 * @errmsg (@errmsg_len bytes, NUL-terminated; "raft_barrier: no quorum
 * confirmed this node still leads within N ms", "raft_barrier: no leader
 * ...", "raft_barrier: interrupted", or "no raftsql node runs for ...");
 * SQLITE_MISUSE when raftsql.so was never loaded in
 * this process. Thread: the one using @db. */
int raftsql_barrier(sqlite3 *db, int64_t *out_index, char *errmsg,
                    size_t errmsg_len);

#ifdef __cplusplus
}
#endif

#endif /* RAFTSQL_H */
