/* The process-wide table of running nodes, one per database file: the node
 * belongs to the process and its file, not to the connection that started
 * it, so every connection of the process on that file reaches it. */

#ifndef EXT_REGISTRY_H
#define EXT_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "../runtime/config.h"
#include "../runtime/node.h"
#include "attach_server.h"

/* ext_registry_start starts a node for database file @path with @cfg,
 * and its attach server (attach_server.h, whose connections @conn_init
 * sets up) unless socket=off.
 * Errors: RAFT_BUSY when a node already runs for @path in this process
 * (or is stopping), or in another process of the machine (@errmsg names
 * its pid), every error of ext_node_start and attach_server_start (the
 * node is then stopped again); @errmsg names the cause. Any thread;
 * blocks while the node starts. */
int ext_registry_start(const char *path, const struct ext_config *cfg,
                       ext_attach_conn_cb conn_init, char *errmsg,
                       size_t errmsg_len);

/* ext_registry_acquire returns the running node of @path with a reference
 * that keeps it alive until ext_registry_release, or NULL when none runs.
 * Any thread. */
struct ext_node *ext_registry_acquire(const char *path);

/* ext_registry_release drops a reference taken by ext_registry_acquire.
 * Any thread. */
void ext_registry_release(struct ext_node *n);

/* ext_registry_running says whether a node runs for @path. Any thread. */
bool ext_registry_running(const char *path);

/* ext_registry_replica says whether a node runs, or ran earlier in this
 * process, for @path: a replica, to be written only through raft_exec.
 * Any thread. */
bool ext_registry_replica(const char *path);

/* ext_registry_diverged says whether the node running for @path is a
 * diverged replica (applier.h: a commit it did not make reached the
 * file), and then writes why into @why (@why_len bytes). Cheap while no
 * node of the process is diverged. Any thread. */
bool ext_registry_diverged(const char *path, char *why, size_t why_len);

/* ext_registry_stale says whether the node running for @path is a stale
 * replica now (ext_node_stale) and then writes why into @why (@why_len
 * bytes). Cheap while no node of the process is stale. Any thread. */
bool ext_registry_stale(const char *path, char *why, size_t why_len);

/* ext_registry_stop stops the node of @path: fails its waiting callers,
 * waits for every reference to be released, then stops it. Errors:
 * RAFT_NOTFOUND when no node runs for @path. Any thread except one that
 * holds a reference to that node. */
int ext_registry_stop(const char *path);

/* ext_registry_stop_all stops every node (at process exit or unload). */
void ext_registry_stop_all(void);

#endif /* EXT_REGISTRY_H */
