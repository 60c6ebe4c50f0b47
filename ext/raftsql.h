/* raftsql public C API: make a SQLite database one replica of a Raft
 * group. Link build/libraftsql.a (or load build/raftsql.so) and register
 * the extension; then use the SQL functions on any connection:
 *
 *     sqlite3_auto_extension((void (*)(void))sqlite3_raftsql_init);
 *     sqlite3_open("node1.db", &db);
 *     sqlite3_exec(db, "SELECT raft_start('id=1 cluster=1@127.0.0.1:7001,"
 *                      "2@127.0.0.1:7002,3@127.0.0.1:7003')", 0, 0, &err);
 *     sqlite3_exec(db, "SELECT raft_exec('INSERT INTO t VALUES(1)')", ...);
 *
 * SQL functions (README "SQL functions" has the full reference):
 *   raft_start(config)        start this process's node for the database
 *   raft_exec(sql, param...)  replicated write; returns rows changed
 *   raft_last_insert_rowid()  rowid of this connection's last raft_exec
 *   raft_status()             JSON status of the node
 *   raft_leader()             the leader's id, NULL when unknown
 *   raft_stop()               stop the node
 *
 * Threads: any connection of the process, on any thread, may call these
 * concurrently; the node belongs to the process and the database file. */

#ifndef RAFTSQL_H
#define RAFTSQL_H

#include <sqlite3.h>

#ifdef __cplusplus
extern "C" {
#endif

/* sqlite3_raftsql_init registers the raftsql SQL functions on @db and the
 * authorizer that refuses direct writes to a replicated database (see
 * https://sqlite.org/loadext.html). @pApi is the host's API table, which
 * SQLite passes when the extension is loaded or registered with
 * sqlite3_auto_extension (call it only that way). Returns SQLITE_OK, or
 * SQLITE_ERROR/SQLITE_NOMEM with *pzErrMsg (sqlite3_malloc'd) saying why.
 * Any thread. */
int sqlite3_raftsql_init(sqlite3 *db, char **pzErrMsg,
                         const sqlite3_api_routines *pApi);

/* raftsql_config_check checks @config, a raft_start() configuration
 * string, for the database file @db_path (which gives the default dir=),
 * as raft_start checks it, without starting anything: every key, its value
 * and the rules between keys (README "Configuration keys"); the files the
 * tls_ keys and secret_file name are read at start, not here. Returns
 * SQLITE_OK; SQLITE_ERROR with @errmsg (@errmsg_len bytes, NUL-terminated)
 * naming what is wrong, beginning with the key when the error is about one
 * ("id: missing ...", "unknown key 'x' ...", "listen: '...' is not
 * host:port: ..."); SQLITE_NOMEM. Needs no registered extension and no
 * database. Any thread. */
int raftsql_config_check(const char *config, const char *db_path, char *errmsg,
                         size_t errmsg_len);

#ifdef __cplusplus
}
#endif

#endif /* RAFTSQL_H */
