/* The node runtime: one Raft server for one database file, wiring the Raft
 * core and its libuv driver (raft/uv_node.h), the LMDB log (lmdb_log/) and
 * the SQLite state machine (sql/) together with three threads:
 *
 *   loop thread   the driver's: sockets, the tick timer and the Raft core;
 *                 LMDB writes run on the libuv thread pool, one at a time,
 *                 and updates that arrive meanwhile are merged into the
 *                 next one (group commit);
 *   apply thread  its own SQLite connection; applies committed entries in
 *                 batches and wakes the callers waiting for them;
 *   callers       any thread; raft_exec encodes a request, queues it (a
 *                 bounded queue), wakes the loop and waits on its own
 *                 condition variable, never longer than exec_timeout_ms.
 *
 * Happy path of a write on a follower: caller queues -> loop forwards it to
 * the leader (RAFT_FRAME_FORWARD) -> the leader stamps time and seed, appends,
 * replicates and answers with the index -> the entry commits -> this node's
 * apply thread applies it and hands the caller its own result.
 * Failure modes: no leader before the deadline (not applied), leadership
 * lost or deadline after the request left this node (outcome unknown: the
 * request id makes every copy after the first a no-op), LMDB or SQLite I/O
 * errors (the node stops writing or applying and reports it in status). */

#ifndef EXT_NODE_H
#define EXT_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../sql/sql.h"
#include "config.h"
#include "exec.h"

struct ext_node;           /* opaque */
struct ext_change_request; /* change_codec.h */
struct ext_change_result;  /* change_codec.h */
struct ext_member_row;     /* member_view.h */

/* ext_node_start opens the log and the apply connection for database file
 * @db_path, builds the Raft core from what they hold and starts the loop
 * and apply threads with configuration @cfg (copied). Writes *out only on
 * success; on failure @errmsg (@errmsg_len bytes) names the cause and
 * nothing is left running.
 * Errors: RAFT_IOERR (log directory, listen address in use...),
 * RAFT_CORRUPT (log or database unreadable), RAFT_NOTFOUND (no database
 * file), RAFT_INVALID (the database was applied beyond the log), RAFT_NOMEM.
 * Thread: any thread but a node's own. */
int ext_node_start(const char *db_path, const struct ext_config *cfg,
                   struct ext_node **out, char *errmsg, size_t errmsg_len);

/* ext_node_shutdown makes @n decline leadership from now on (TimeoutNow
 * ignored), first hands the leadership on when @n leads (a leadership
 * transfer to a voter it reaches, as raft_transfer() picks one, waiting
 * at most election_timeout_ms, so a planned restart costs no election
 * timeout),
 * then makes every waiting and future ext_node_exec and ext_node_change
 * on @n return at once with "shutting down" (outcome unknown when the
 * request had left this node, else not applied). Any thread; call it
 * before waiting for callers to leave and calling ext_node_stop. */
void ext_node_shutdown(struct ext_node *n);

/* ext_node_stop stops the threads, fails every waiting caller with
 * "shutting down" (outcome unknown when their request left this node),
 * closes the log and the apply connection and frees @n. Blocks until done.
 * Thread: any thread but a node's own; no other call on @n may start
 * after it, and none may still run (the registry guarantees this). */
void ext_node_stop(struct ext_node *n);

/* ext_node_discard is ext_node_stop for a start that failed after
 * ext_node_start returned (the attach socket could not be set up): it
 * also removes the log directory when ext_node_start created it, as a
 * failed ext_node_start does (store_discard). Same thread rules. */
void ext_node_discard(struct ext_node *n);

/* ext_node_exec runs one write request (SQL text @sql of @sql_len bytes and
 * @n_params parameters) with options @opts (NULL or zeroed: a plain
 * raft_exec, a request of the old payload format) through the cluster and
 * waits until it is applied on this node, exec_timeout_ms passes, or
 * @probe (may be NULL) says the caller was interrupted (then within
 * EXT_EXEC_POLL_MS: "interrupted: not applied" when the request had not
 * left this node, else "interrupted: outcome unknown", with sqlite_rc
 * RAFTSQL_INTERRUPTED or RAFTSQL_INTERRUPTED_UNKNOWN).
 * With @opts->request_id (1..EXT_REQUEST_ID_MAX bytes, any bytes) the
 * request is remembered under that id within the leader's window
 * (request_id_window ids, request_id_window_ms of entry time): a later
 * request with the same id and the same SQL, parameters and want_rows
 * applies nothing and gets the first outcome (out->duplicate set; a SQL
 * error stays that SQL error), on any node, after leader changes and
 * restarts; one with the same id but other SQL or parameters is a SQL
 * error ("request id ... was used for different SQL or parameters"),
 * nothing applied. A request with an id that was not sent (no leader
 * reachable, interrupted before it left this node, shutting down) is
 * EXT_EXEC_UNKNOWN (RAFTSQL_UNKNOWN, RAFTSQL_INTERRUPTED_UNKNOWN), never
 * "not applied": an earlier request under the id may have applied. With
 * @opts->want_rows the rows the statements return
 * come back in out->rows as JSON (computed on this node as it applies;
 * over the leader's max_result_bytes is a SQL error, rolled back on every
 * node). A leader of a version before these options refuses such a
 * request: "not applied". Always fills @out; release it with
 * ext_exec_result_clear. Returns 0 when out->kind is EXT_EXEC_OK, else the
 * project error code matching it (RAFT_INVALID for a SQL error, or, not
 * applied, for a request id of 0 or over EXT_REQUEST_ID_MAX bytes,
 * RAFT_TOOBIG, RAFT_BUSY when the submission queue is full, RAFT_TIMEOUT,
 * RAFT_UNKNOWN, RAFT_SHUTDOWN, RAFT_CANCELED when interrupted,
 * RAFT_DIVERGED when this replica is diverged: "raft_exec: not applied:
 * diverged replica: ...", RAFT_NOTFOUND when this node was removed from
 * the cluster: sqlite_rc RAFTSQL_REMOVED, exec.h). Any thread. */
int ext_node_exec(struct ext_node *n, const char *sql, size_t sql_len,
                  const struct sql_param *params, unsigned n_params,
                  const struct ext_exec_opts *opts,
                  const struct ext_exec_probe *probe,
                  struct ext_exec_result *out);

/* ext_node_status returns the node's status as a JSON object text
 * (malloc'd, the caller frees it), or NULL when out of memory. Fields: id,
 * role, term, leader, commit, applied, first_index, last_index, persisted,
 * queue (submission queue depth), waiters, peers (array of id, address,
 * dial, connected, and for a leader match, next, state, inflight),
 * last_error, tls ("off", "certificates" or "psk"), tls_cert_expires,
 * lag_entries, lag_ms, stale and stale_reason (staleness.h), removed
 * (status_removed) (docs/reference.md lists them all).
 * Any thread. */
char *ext_node_status(struct ext_node *n);

/* ext_node_metrics returns the node's figures as Prometheus text
 * (metrics.h: the same state ext_node_status shows, docs/reference.md "Metrics"
 * lists every metric), malloc'd, the caller frees it; NULL when out of
 * memory. Any thread. */
char *ext_node_metrics(struct ext_node *n);

/* ext_node_load_status returns where the latest raft_load_sql on @n
 * stands (load_status.h: load_sql_run records its progress there, and
 * ext_node_status shows it as "load"). Valid until ext_node_stop. Any
 * thread. */
struct ext_load_status *ext_node_load_status(struct ext_node *n);

/* ext_node_max_request_bytes returns max_request_bytes of @n's
 * configuration, which bounds the chunks of a raft_load_sql. Any
 * thread. */
uint64_t ext_node_max_request_bytes(const struct ext_node *n);

/* ext_node_failed says whether @n cannot go on until restarted: a write
 * of its log failed (an I/O error: the node neither writes, votes nor
 * acknowledges any more, raft_status()'s log_failed), noticed within a
 * tick. It then copies why into @why (@why_len bytes; may be NULL). A full
 * log or a failing apply batch is no such failure (both resume by
 * themselves). Any thread. */
bool ext_node_failed(struct ext_node *n, char *why, size_t why_len);

/* ext_node_leader returns the id of the leader this node knows of, 0 when
 * none. Any thread. */
uint64_t ext_node_leader(struct ext_node *n);

/* ext_node_change runs membership change or leadership transfer @req
 * (change_submit in change.h: refused at once while another runs here; done
 * once committed, or once another server leads) and waits at most
 * exec_timeout_ms, or until @probe (may be NULL) says the caller was
 * interrupted. A change that succeeded returns once this node's raft_members
 * and raft_status() show its configuration (or a later one; an election
 * timeout more at most: change_submit waits for it). Always fills @out;
 * returns out->rc (0, or the errors change_submit lists). Any thread but the
 * node's own. */
int ext_node_change(struct ext_node *n, const struct ext_change_request *req,
                    const struct ext_exec_probe *probe,
                    struct ext_change_result *out);

/* ext_node_members copies into @rows (at most @max) the servers of the
 * configuration in force as this node last saw them (members.h) and
 * returns how many there are. Any thread. */
unsigned ext_node_members(struct ext_node *n, struct ext_member_row *rows,
                          unsigned max);

/* ext_node_tls_reload re-reads the certificate files raft_start named
 * (tls_cert, tls_key, tls_ca): new peer connections use them, existing
 * ones keep theirs; bad files leave the ones in use. Writes what was
 * loaded, or why not (naming the file and OpenSSL's reason), into @msg
 * (@msg_len bytes), and logs it (INFO, or WARN on failure).
 * Errors: RAFT_INVALID (TLS is off, the node uses secret_file=, or a file
 * does not load or check), RAFT_NOMEM. Any thread. */
int ext_node_tls_reload(struct ext_node *n, char *msg, size_t msg_len);

/* ext_node_diverged says whether @n is a diverged replica and then writes
 * why, and where its repair stands, into @why (@why_len bytes). Any
 * thread. */
bool ext_node_diverged(struct ext_node *n, char *why, size_t why_len);

/* ext_node_stale says whether @n is a stale replica now (staleness.h:
 * max_staleness_ms= is set and no leader was heard for longer, none is
 * known, or it catches up after its start) and then writes why ("stale
 * replica: ...") into @why (@why_len bytes). Any thread. */
bool ext_node_stale(struct ext_node *n, char *why, size_t why_len);

/* ext_node_copy_gate fills @out with the gate a copy of @n's database
 * begins its read transaction through (struct sql_copy_gate,
 * lease_copy_begin): it waits, exec_timeout_ms at most, until no plain
 * write of this node has committed an entry to the file that the node
 * has not recorded yet, and holds new ones back until the copy's read
 * transaction began. Any thread. */
void ext_node_copy_gate(struct ext_node *n, struct sql_copy_gate *out);

/* ext_node_copy_check verifies @n's copy of its database at @path
 * against the running checksum stored in it (applier_copy_check, naming
 * @what): a difference marks the replica diverged and returns
 * RAFT_DIVERGED with @errmsg (@errmsg_len bytes) saying why; 0 when
 * equal or nothing is stored to check (checksum=off). Any thread but the
 * apply thread; O(the copy). */
int ext_node_copy_check(struct ext_node *n, const char *path, const char *what,
                        char *errmsg, size_t errmsg_len);

/* ext_node_mark_diverged marks @n's replica diverged for @reason
 * (applier_mark_diverged: held until repaired, logged at ERROR, shown in
 * raft_status()). Any thread. */
void ext_node_mark_diverged(struct ext_node *n, const char *reason);

/* ext_node_repair asks a diverged replica (a commit the node did not make
 * reached its database) to repair itself now, also with repair=manual,
 * and waits until a snapshot replaced its database, exec_timeout_ms at
 * most, or until @probe (may be NULL) says the caller was interrupted.
 * Writes what happened into @msg (@msg_len bytes).
 * Errors: RAFT_INVALID (not diverged), RAFT_TIMEOUT (still diverged: @msg
 * says where the repair stands), RAFT_NOTFOUND (no peer to repair from:
 * this server is the only voter), RAFT_CANCELED
 * (interrupted; the repair goes on). Any thread. */
int ext_node_repair(struct ext_node *n, const struct ext_exec_probe *probe,
                    char *msg, size_t msg_len);

/* ext_node_barrier runs a linearizable-read barrier (ReadIndex, thesis §6.4;
 * ext/runtime/barrier.h): on a leader or a follower, it gets the leader's
 * commit index confirmed by a quorum heartbeat round and waits until this node
 * applied it (as the apply thread reports), then writes it to *@out_index. A
 * read of this node's database that starts after it returns sees every write
 * acknowledged before it was called. Fails within election_timeout_ms (and a
 * little slack) when no quorum confirms a leader, and when the index is not
 * applied within exec_timeout_ms; @probe (may be NULL) ends it when the caller
 * is interrupted. Writes why into @msg (@msg_len bytes, "raft_barrier: ...")
 * on failure. Errors: RAFT_TIMEOUT, RAFT_NOTLEADER (no leader), RAFT_FORMAT
 * (the leader speaks a wire without READ_INDEX), RAFT_BUSY, RAFT_CANCELED
 * (interrupted), RAFT_SHUTDOWN, RAFT_DIVERGED (at once: the replica is
 * diverged, or became so while waiting; @msg has repair_refusal's text). Any
 * thread but the node's own. */
int ext_node_barrier(struct ext_node *n, const struct ext_exec_probe *probe,
                     uint64_t *out_index, char *msg, size_t msg_len);

/* Plain SQL writes (lease.h has the ordering between the holder, the
 * loop and the applier). A host connection asks for the write lease
 * exactly when it asks for the file's WAL write lock, before it holds
 * it; its commit hook sends the transaction's changeset
 * (sql/changeset.h) with ext_node_lease_commit and, once its local commit
 * or rollback is done and the write lock released, ends the lease with
 * ext_node_lease_release. Any node serves them: a follower asks its
 * leader (LEASE frames, lease.h). A holder is a connection of this
 * process, or of another process of the machine through the attach
 * socket (the socket's connection is then the holder). */

/* ext_node_lease_acquire's @flags. EXT_LEASE_ONE_TRY: the holder's
 * transaction read before this write, so SQLite calls no busy handler
 * for its write lock and a RAFT_BUSY ends the transaction (Python's
 * "database is locked" at an ORM session's COMMIT); while no leader is
 * known (an election), or the leader asked does not answer, nobody can
 * commit and make its snapshot stale, so the node asks again for up to
 * exec_timeout_ms instead of 250 ms, and once granted waits up to
 * exec_timeout_ms for the new leader's entries to commit here. */
#define EXT_LEASE_ONE_TRY 1u

/* ext_node_lease_acquire asks for the write lease for host connection
 * token @holder (any non-zero id the caller picks, unique in the
 * process), with @flags (EXT_LEASE_*, 0 for none). Blocks only for this
 * node's own work: returns 0 with
 * *@out_id (written on success only) once the lease is granted and this
 * node has applied everything up to the leader's last log index at the
 * grant, so the holder's transaction reads the latest committed state.
 * Lease ids increase and are never reused ((term << 32) | grant count).
 * Errors, with @why (@why_len bytes) saying why:
 *   RAFT_BUSY after up to 250 ms in the queue of this node's writers
 *     (lease.h) when another holder has the lease (@why names it and its
 *     server) or there is no leader yet (with EXT_LEASE_ONE_TRY: after
 *     up to exec_timeout_ms), and when the leader did not answer or
 *     this node did not catch up within exec_timeout_ms, and while the
 *     start's scan of the file runs (after up to 250 ms; on a busy
 *     handler's retry, within 250 ms of the last busy answer, 20 ms:
 *     lease_patience_ms): the caller answers SQLITE_BUSY and SQLite's
 *     busy handler, if it has one for this lock, retries;
 *   RAFT_FORMAT: a member's wire version is too old for changeset
 *     entries, or not known yet (wire_gate_changeset), or the leader's
 *     has no LEASE frames (a follower's holder);
 *   RAFT_NOSPACE: this node's log cannot take entries (disk full, a
 *     failed log) or its applier fails: it could not catch up;
 *   RAFT_NOTFOUND: this node was removed from the cluster: it receives
 *     no more entries, so it could not catch up either;
 *   RAFT_DIVERGED: this replica is diverged (asked after the start's
 *     scan, which marks it before it ends); RAFT_SHUTDOWN: the node is
 *     stopping; RAFT_INVALID: @holder is 0.
 * Any host thread. */
int ext_node_lease_acquire(struct ext_node *n, uint64_t holder, unsigned flags,
                           uint64_t *out_id, char *why, size_t why_len);

/* ext_node_lease_commit proposes changeset payload @p (@len bytes,
 * copied) as one log entry under lease @id, unstamped (a follower sends
 * it to the leader that granted the lease), and waits until
 * the entry is committed by a quorum (commit index >= its index), not
 * applied: the caller's connection holds the file's write lock until it
 * returns, and its local commit is what makes this node's replica hold
 * the entry (the applier then only records it). The lease ends with the
 * call, whatever the outcome; the applier still waits for
 * ext_node_lease_release. Returns 0 once committed. Errors, with @why:
 *   "not applied" (nothing was appended): RAFT_TIMEOUT (the lease expired
 *     at lease_timeout_ms, or the loop did not take it within
 *     exec_timeout_ms), RAFT_NOTLEADER (a leader change ended the lease,
 *     or a membership change was appended after the grant), RAFT_INVALID
 *     (@id not in force: released, never granted; @p is no changeset),
 *     RAFT_TOOBIG (over max_request_bytes), RAFT_SHUTDOWN, RAFT_NOMEM,
 *     RAFT_CANCELED (@probe said the caller was interrupted before the
 *     proposal: "interrupted: not applied"), RAFT_DIVERGED (@locked, the
 *     WAL-index header the holder read as it took the file's write lock,
 *     SQL_WAL_HDR_LEN bytes or NULL when not known, is not the one this
 *     node last read of its file holding only its own commits:
 *     applier_wal_base_is; another connection committed to the file, and
 *     the transaction may have read it; or the replica is marked
 *     diverged, its repair not done: "not applied: diverged replica:
 *     ..."; its old rows could be a foreign write's);
 *   RAFT_UNKNOWN, "outcome unknown" (raft_exec's code for it): proposed
 *     (or sent to the leader), but no commit seen within
 *     exec_timeout_ms, leadership lost, the
 *     node stopping, or the caller interrupted after the proposal
 *     ("interrupted: outcome unknown").
 * Host thread, the lease's holder. */
int ext_node_lease_commit(struct ext_node *n, uint64_t id, const void *p,
                          size_t len, const struct ext_exec_probe *probe,
                          const unsigned char *locked, char *why,
                          size_t why_len);

/* ext_node_lease_release ends lease @id without an entry (rollback,
 * connection closed, SQLITE_BUSY_SNAPSHOT), and, called after a commit
 * once the connection's local commit is done and its write lock
 * released, lets the applier apply the lease's entry and returns once
 * this node applied it (at most exec_timeout_ms): the holder's COMMIT
 * then returns with its entry applied here, and its next transaction
 * reads a state the applier's record of it does not make stale. @marks
 * (copied; NULL when not known) are what the holder's connection read
 * of the file's WAL-index header under its write lock (sql.h, "Who
 * committed around a plain write"): with them the applier knows the
 * entry's commit from any other without a scan of the file.
 * Idempotent; an id not in force is ignored. Any thread. */
void ext_node_lease_release(struct ext_node *n, uint64_t id,
                            const struct sql_wal_marks *marks);

/* ext_node_lease_end is raft_lease_end(): ends the write lease this node
 * (the leader) granted, if one is in force, as its expiry would (its
 * holder's COMMIT is then "not applied"), writing what it ended into
 * @msg (@msg_len bytes). @probe is not asked (it does not wait).
 * Errors: RAFT_NOTFOUND (none in force here; @msg names the leader when
 * this node follows). Any thread. */
int ext_node_lease_end(struct ext_node *n, const struct ext_exec_probe *probe,
                       char *msg, size_t msg_len);

/* ext_node_listen writes where @n listens, "host:port", into @buf (@len
 * bytes): listen=, else cluster='s address of this node, else its address
 * in the stored configuration. Any thread. */
void ext_node_listen(const struct ext_node *n, char *buf, size_t len);

struct ext_node_log; /* node_log.h */

/* ext_node_logger returns @n's log (valid until ext_node_stop). Any
 * thread. */
struct ext_node_log *ext_node_logger(struct ext_node *n);

/* ext_node_id returns this node's server id. Any thread. */
uint64_t ext_node_id(const struct ext_node *n);

/* Characters of a cluster id in hex, with the terminating NUL. */
#define EXT_CLUSTER_ID_HEX 33

/* ext_node_cluster_id writes the cluster id of @n in hex into @out and
 * returns true, or writes "" and returns false while it has none (a node
 * that joins, or a new cluster's first moments: cluster_id.h). Any
 * thread. */
bool ext_node_cluster_id(struct ext_node *n, char out[EXT_CLUSTER_ID_HEX]);

#endif /* EXT_NODE_H */
