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

/* sql_fsm_path returns the database file of @f (owned by @f, immutable
 * from open to close). Any thread. */
const char *sql_fsm_path(const struct sql_fsm *f);

/* sql_fsm_reload re-reads the applied index and term of @f from its
 * database and re-applies the stored cluster-wide settings (after the
 * database content was replaced). Returns 0 or a project code with
 * sql_fsm_errmsg saying which. Thread: the apply thread. */
int sql_fsm_reload(struct sql_fsm *f);

/* sql_fsm_set_durable sets the durable index of @f to @index, which must
 * be durable in the database file. Thread: the apply thread. */
void sql_fsm_set_durable(struct sql_fsm *f, uint64_t index);

/* sql_fsm_errbuf returns @f's message buffer (*@out_len bytes), for the
 * other sql/ files to write a failure into. Thread: the apply thread. */
char *sql_fsm_errbuf(struct sql_fsm *f, size_t *out_len);

/* sql_to_raft translates a SQLite failure code (primary or extended) into
 * a project code: RAFT_NOMEM, RAFT_CORRUPT (SQLITE_CORRUPT, SQLITE_NOTADB)
 * or RAFT_IOERR for anything else. Any thread. */
int sql_to_raft(int rc);

#endif /* SQL_FSM_H */
