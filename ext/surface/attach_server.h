/* The attach server: a running node's Unix-domain socket, through which
 * the other processes of the machine that loaded raftsql on the same
 * database file call the node's SQL functions (attach_client.h). */

#ifndef EXT_ATTACH_SERVER_H
#define EXT_ATTACH_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3ext.h>

#include "../runtime/config.h"
#include "../runtime/node.h"

/* Most idle SQLite connections the server keeps for reuse; the client
 * connections served at once are socket_max_clients= (config.h), and one
 * more is answered "busy" before its call is read. */
#define EXT_ATTACH_IDLE_MAX 64

/* The bit every write lease holder token of an attach server's
 * connection has (a writer of another process: a hash of its process id
 * and its own token, the same at each of its asks), and no token of a
 * host connection of this process (lease_client_holder_new) has. */
#define EXT_ATTACH_HOLDER_BIT (UINT64_C(1) << 62)

struct ext_attach_server; /* opaque */

/* Sets up a connection the server opened on the database file for the
 * calls it serves (raftsql's functions and guard: func.c). Returns
 * SQLITE_OK or SQLite's error. A client thread of the server. */
typedef int (*ext_attach_conn_cb)(sqlite3 *db);

/* attach_server_start listens for node @node of database file @db_path
 * with configuration @cfg (its dir, exec_timeout_ms, socket_group: the
 * socket is mode 0600, or 0660 in that group; socket_max_clients: the
 * connections served at once; lease_timeout_ms) at the path
 * attach_conn_path chooses, writes the pointer file (with
 * EXT_ATTACH_VERSION), and starts the accept thread. Lines go to @node's
 * log; @node serves the lease requests (attach_codec.h) and must outlive
 * the server (attach_server_stop before ext_node_stop); every connection
 * it opens to serve calls is set up by @conn_init. Writes *@out only on
 * success; a failure leaves nothing behind. Errors: RAFT_IOERR with
 * @errmsg (the socket directory, bind, the pointer file), RAFT_NOMEM.
 * Thread: the registry's, after the node started. */
int attach_server_start(const char *db_path, const struct ext_config *cfg,
                        struct ext_node *node, ext_attach_conn_cb conn_init,
                        struct ext_attach_server **out, char *errmsg,
                        size_t errmsg_len);

/* attach_server_stop removes the pointer file and the socket, stops
 * accepting, lets every call in progress finish and answer (call it after
 * ext_node_shutdown, so they end at once), ends the write leases its
 * connections hold, joins the threads and frees @s. Called from one of
 * its own client threads (a raft_stop from another process), that thread
 * is left to finish its answer and free itself.
 * Thread: any; NULL does nothing. */
void attach_server_stop(struct ext_attach_server *s);

/* attach_server_serving says whether the calling thread is a client
 * thread of an attach server: its calls must run on this process's node
 * and never be forwarded again. Any thread. */
bool attach_server_serving(void);

#endif /* EXT_ATTACH_SERVER_H */
