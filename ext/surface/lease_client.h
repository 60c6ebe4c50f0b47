/* Where a host connection's write lease comes from: the node of this
 * process that serves its file (ext_node_lease_acquire, _commit and
 * _release, node.h), or, in a process that runs no node for the file,
 * the node another process of the machine runs for it, over that node's
 * attach socket (attach_server.h serves the lease requests there). The
 * callers (wal_lock.c, plain_write.c) ask this module only, so both
 * paths give the same answers.
 *
 * Over the socket a lease lives on one connection of its own, opened at
 * the acquire and closed after the release: the node's side ends the
 * lease the moment that connection closes (the writer's process died,
 * killed with SIGKILL), so the next writer gets the lease at once.
 *
 * Happy path (another process's node): the pointer file (attach_sock.h)
 * names a node whose socket speaks EXT_ATTACH_VERSION 2 -> connect ->
 * LEASE_ACQUIRE (this process's holder token) -> the lease id -> (the
 * transaction runs) -> LEASE_COMMIT (lease id, changeset) -> 0 or the
 * node's error -> LEASE_RELEASE (lease id, and from version 3 the WAL
 * marks) -> close.
 * Failure modes: no node serves the file, or one of an older release
 * (its socket speaks version 1, which has no lease requests): the lock is
 * taken without a lease, the reason kept, and the commit vetoed with it;
 * the node busy (another holder, no leader, as many connections as it
 * takes): RAFT_BUSY, the caller answers SQLITE_BUSY; the connection
 * closed or no answer in time: at the acquire no lease (the reason
 * kept), at the commit "outcome unknown", at the release nothing (the
 * node ends the lease with the connection). */

#ifndef EXT_LEASE_CLIENT_H
#define EXT_LEASE_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../sql/sql.h"

/* One write lease a host connection holds. Invariant: id is 0 and fd -1
 * when none is held; fd is -1 when this process's node granted it. */
struct lease_hold {
    uint64_t id;         /* the lease id, 0: none */
    int fd;              /* the attach connection it lives on, -1 */
    long pid;            /* that node's process (messages), 0 */
    unsigned timeout_ms; /* that node's exec_timeout_ms */
    unsigned version;    /* that node's attach protocol, 0 */
};

/* lease_hold_init sets @h to "no lease". Any thread. */
void lease_hold_init(struct lease_hold *h);

/* lease_client_holder_new returns a lease holder token for a host
 * connection of this process, unique in the process, non-zero and
 * without bit 62 (which the attach server's tokens for writers of
 * other processes have: EXT_ATTACH_HOLDER_BIT). Any thread. */
uint64_t lease_client_holder_new(void);

/* lease_client_acquire asks the node serving database file @path for the
 * write lease for holder @holder, with @flags (EXT_LEASE_* of node.h, 0
 * for none; another process's node of attach version 3 or older is
 * asked without them): this process's node, else another
 * process's over its attach socket (the connection then stays open in
 * *@out until lease_client_release). Returns 0 with *@out filled (written
 * on success only), or, with @why (@why_len bytes) saying why:
 *   RAFT_BUSY: another holder has the lease, no leader is known yet, the
 *     node did not catch up in time, or it serves as many attach
 *     connections as it takes: the caller answers SQLITE_BUSY, and the
 *     connection's busy handler retries;
 *   RAFT_NOTFOUND: no node serves @path (any more);
 *   RAFT_FORMAT: the node's socket speaks an older attach version, with
 *     no lease requests (an older release of raftsql);
 *   RAFT_NOCONN: the node's process closed the connection or did not
 *     answer within its exec_timeout_ms and 10 s more;
 *   RAFT_IOERR: its socket cannot be reached (permission denied);
 *   every other error of ext_node_lease_acquire (RAFT_NOTLEADER,
 *     RAFT_DIVERGED, RAFT_SHUTDOWN...), with its words.
 * Thread: the one using the host connection; blocks while the node
 * catches up (at most its exec_timeout_ms). */
int lease_client_acquire(const char *path, uint64_t holder, unsigned flags,
                         struct lease_hold *out, char *why, size_t why_len);

/* lease_client_commit sends changeset @p (@len bytes) under lease @h of
 * database file @path and waits until a quorum commits it: exactly
 * ext_node_lease_commit's answers (node.h), its words in @why (@why_len
 * bytes): 0 once committed; "not applied" (RAFT_TIMEOUT, RAFT_NOTLEADER,
 * RAFT_INVALID, RAFT_TOOBIG, RAFT_SHUTDOWN, RAFT_NOMEM; RAFT_NOTFOUND
 * when this process's node is gone; RAFT_NOCONN when the call could not
 * be sent to another process's node) or "outcome unknown" (RAFT_UNKNOWN;
 * also when another process's node closed the connection or gave no
 * answer within its exec_timeout_ms and 10 s more after the call went).
 * @h stays held: lease_client_release follows. Thread: the lease's
 * holder (its commit hook: no SQL runs on its connection here). */
int lease_client_commit(const char *path, const struct lease_hold *h,
                        const void *p, size_t len, const unsigned char *locked,
                        char *why, size_t why_len);

/* lease_client_release ends lease @h of database file @path (after the
 * local commit or rollback, the write lock released): the node ends it
 * and, after a commit, returns once it applied the lease's entry (at most
 * its exec_timeout_ms; another process's node: that and 10 s more). With
 * it go @marks, what the holder's connection read of the file's WAL-index
 * header under its write lock (NULL: not read; to another process's node
 * only when its attach protocol is 3 or later). Closes the lease's
 * attach connection and sets @h to "no lease". Nothing when @h holds
 * none. Thread: the lease's holder. */
void lease_client_release(const char *path, struct lease_hold *h,
                          const struct sql_wal_marks *marks);

#endif /* EXT_LEASE_CLIENT_H */
