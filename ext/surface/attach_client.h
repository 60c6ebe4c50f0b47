/* The attach client: a raftsql SQL function called on a connection of a
 * process that runs no node for its database file is forwarded to the
 * node that another process of the machine runs for that file
 * (attach_server.h), and answered as that process would answer it. */

#ifndef EXT_ATTACH_CLIENT_H
#define EXT_ATTACH_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include <sqlite3ext.h>

#include "attach_codec.h"

/* attach_client_call forwards the call of SQL function @fn with @argc
 * arguments @argv, made on @ctx's connection for database file @file, to
 * the node another process runs for @file. Returns false, setting
 * nothing, when no node on this machine serves @file (no pointer file, a
 * dead process, a refused connection); else true with @ctx's result set:
 * the node's value, its error (text and code), or an error of the
 * forwarding itself: "cannot reach" (permission denied: not applied),
 * "outcome unknown" when the node's process closed the connection or did
 * not answer within its exec_timeout_ms and 10 s more, "interrupted:
 * outcome unknown" (sqlite3_interrupt while waiting). A node serving as
 * many connections as it takes (socket_max_clients) is called again
 * after short pauses until @ctx's connection's busy timeout (at most the
 * node's exec_timeout_ms) has passed, then "not applied: busy"
 * (RAFTSQL_BUSY), or "interrupted: not applied" (RAFTSQL_INTERRUPTED)
 * when interrupted meanwhile. On success of
 * raft_exec, *@out_rowid (may be NULL) gets the rowid after it. The
 * caller's thread; blocks until answered. */
bool attach_client_call(sqlite3_context *ctx, const char *file, const char *fn,
                        int argc, sqlite3_value **argv, int64_t *out_rowid);

/* attach_client_table asks the node another process runs for @file for
 * table @fn (raft_members) on behalf of connection @db. Returns
 * RAFT_NOTFOUND when no node on this machine serves @file, 0 with *@out
 * filled (free it with attach_codec_answer_free; out->ok false with its
 * errmsg when the node answered an error), or another code with *@errmsg
 * (sqlite3_malloc'd) saying why the forwarding failed. The caller's
 * thread. */
int attach_client_table(sqlite3 *db, const char *file, const char *fn,
                        struct ext_attach_answer *out, char **errmsg);

/* attach_client_served says whether a node of another process (or this
 * one) on this machine serves @file, as its pointer file says (the
 * guard's test in a process that runs none). Any thread. */
bool attach_client_served(const char *file);

#endif /* EXT_ATTACH_CLIENT_H */
