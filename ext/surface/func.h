/* The raftsql SQL functions (raft_start, raft_exec, ...); see raftsql.h
 * and the README for what each takes and returns. */

#ifndef EXT_FUNC_H
#define EXT_FUNC_H

#include <stdbool.h>
#include <stdint.h>

#include <sqlite3ext.h>

#include "../runtime/node.h"

/* ext_func_register registers every raftsql SQL function on @db, with
 * per-connection state freed when the connection closes. The admin
 * functions are SQLITE_DIRECTONLY (not callable from triggers or views).
 * Returns SQLITE_OK, SQLITE_NOMEM, or SQLite's error. Any thread. */
int ext_func_register(sqlite3 *db);

/* func_acquire returns the node of @ctx's main database file with a
 * reference (release it with ext_registry_release) when this process runs
 * it. Else it returns NULL with @ctx's result set: the answer of the node
 * another process of the machine runs for the file, to which the call of
 * @fn with its @argc arguments @argv was forwarded (attach_client.h), or
 * an error naming @fn: the database is not a file, or no node runs for
 * it. The caller's thread; blocks while a forwarded call runs. */
struct ext_node *func_acquire(sqlite3_context *ctx, const char *fn, int argc,
                              sqlite3_value **argv);

/* func_acquire_rowid is func_acquire for a write function: a call
 * forwarded to another process's node writes that node's
 * raft_last_insert_rowid() after it to *@out_rowid (left as it was
 * otherwise). */
struct ext_node *func_acquire_rowid(sqlite3_context *ctx, const char *fn,
                                    int argc, sqlite3_value **argv,
                                    int64_t *out_rowid);

struct ext_precheck_cache; /* precheck.h */

/* func_conn_rowid returns where connection state @cs (the user data of
 * raft_exec) keeps raft_last_insert_rowid(). The connection's thread. */
sqlite3_int64 *func_conn_rowid(void *cs);

/* func_conn_checked returns the precheck cache of connection state @cs.
 * The connection's thread. */
struct ext_precheck_cache *func_conn_checked(void *cs);

/* func_query_register registers raft_query, raft_exec_id and
 * raft_query_id (func_query.c) on @db with connection state @cs (owned
 * by raft_exec's registration). Returns SQLITE_OK or SQLite's error. */
int func_query_register(sqlite3 *db, void *cs);

/* func_error sets @msg (copied) as @ctx's error, with result code @code
 * (a RAFTSQL_* code of raftsql.h, or SQLite's own). The caller's
 * thread. */
void func_error(sqlite3_context *ctx, int code, const char *msg);

struct sql_param; /* sql/sql.h */

/* func_write_params makes the parameters of the write function @fn from
 * @argv[@first + 1 .. @argc - 1] into a new array *@params of *@n_params
 * (NULL for none; the caller frees it, also after an error; the values
 * point into @argv) and prechecks the SQL @argv[@first] (TEXT, checked
 * by the caller) against them with the connection's cache @checked.
 * Returns 0; or -1 with the error set on @ctx: out of memory, or the
 * precheck's refusal as RAFTSQL_INVALID ("<fn>: not applied: ...", also
 * written to @errmsg). SQLite's thread of @ctx. */
int func_write_params(sqlite3_context *ctx, const char *fn, int argc,
                      sqlite3_value **argv, int first,
                      struct ext_precheck_cache *checked, char *errmsg,
                      size_t errmsg_len, struct sql_param **params,
                      unsigned *n_params);

#endif /* EXT_FUNC_H */
