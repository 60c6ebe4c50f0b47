/* What the raftsql SQL functions hand the node runtime of a call: its
 * arguments as sql_values, and its connection's interrupt as the probe of
 * a waiting node call (exec.h). */

#ifndef EXT_FUNC_CALL_H
#define EXT_FUNC_CALL_H

#include <stdbool.h>

#include <sqlite3ext.h>

#include "../../sql/sql.h"

/* func_call_value points @out at SQL value @v (its bytes valid while @v is).
 * Pure. */
void func_call_value(sqlite3_value *v, struct sql_value *out);

/* func_call_interrupted is the probe of a waiting call (struct
 * ext_exec_probe) on connection @arg (a sqlite3 *): true once
 * sqlite3_interrupt was called on it. The caller's thread. */
bool func_call_interrupted(void *arg);

#endif /* EXT_FUNC_CALL_H */
