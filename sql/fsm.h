/* Private accessors of the apply connection (sql/apply.c) for the other
 * sql/ files and for tests: they reach past the sql.h contract, so nothing
 * outside sql/ and tests/sql/ should include this header. */

#ifndef SQL_FSM_H
#define SQL_FSM_H

#include <sqlite3.h>

#include "sql.h"

/* sql_fsm_db returns the apply connection of @f (owned by @f, valid until
 * sql_fsm_close). Tests use it to provoke environmental failures, such as
 * a tiny max_page_count. Thread: the apply thread. */
sqlite3 *sql_fsm_db(struct sql_fsm *f);

/* sql_fsm_exec runs @sql on the apply connection of @f as an internal
 * statement (the guard against user SQL is off), outside sql_fsm_apply.
 * Tests use it to set connection limits. Returns 0, or the project code
 * of the SQLite failure with sql_fsm_errmsg saying which. Thread: the
 * apply thread. */
int sql_fsm_exec(struct sql_fsm *f, const char *sql);

#endif /* SQL_FSM_H */
