/* What a raftsql SQL function hands the node runtime of its call, and
 * how it answers: its arguments as sql_values, a write's parameters
 * checked (precheck.h), its connection's main file, its connection's
 * interrupt as the probe of a waiting node call (runtime/exec.h), and its
 * error with a RAFTSQL_* code. */

#ifndef EXT_FUNC_CALL_H
#define EXT_FUNC_CALL_H

#include <stdbool.h>
#include <stddef.h>

#include <sqlite3ext.h>

#include "../../sql/sql.h"

/* func_call_value points @out at SQL value @v (its bytes valid while @v is).
 * Pure. */
void func_call_value(sqlite3_value *v, struct sql_value *out);

/* func_call_interrupted is the probe of a waiting call (struct
 * ext_exec_probe) on connection @arg (a sqlite3 *): true once
 * sqlite3_interrupt was called on it. The caller's thread. */
bool func_call_interrupted(void *arg);

/* func_call_error sets @msg (copied) as @ctx's error, with result code @code
 * (a RAFTSQL_* code of raftsql.h, or SQLite's own). The caller's
 * thread. */
void func_call_error(sqlite3_context *ctx, int code, const char *msg);

struct ext_precheck_cache; /* precheck.h */

/* func_call_params makes the parameters of the write function @fn from
 * @argv[@first + 1 .. @argc - 1] into a new array *@params of *@n_params
 * (NULL for none; the caller frees it, also after an error; the values
 * point into @argv) and prechecks the SQL @argv[@first] (TEXT, checked
 * by the caller) against them with the connection's cache @checked.
 * Returns 0; or -1 with the error set on @ctx: out of memory, or the
 * precheck's refusal as RAFTSQL_INVALID ("<fn>: not applied: ...", also
 * written to @errmsg). SQLite's thread of @ctx. */
int func_call_params(sqlite3_context *ctx, const char *fn, int argc,
                     sqlite3_value **argv, int first,
                     struct ext_precheck_cache *checked, char *errmsg,
                     size_t errmsg_len, struct sql_param **params,
                     unsigned *n_params);

/* func_call_main_file returns the main database file of @ctx's
 * connection, or reports an error naming function @fn (RAFTSQL_INVALID:
 * the main database is in-memory or temporary) and returns NULL. SQLite's
 * thread of @ctx. */
const char *func_call_main_file(sqlite3_context *ctx, const char *fn);

#endif /* EXT_FUNC_CALL_H */
