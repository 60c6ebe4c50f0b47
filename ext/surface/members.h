/* The SQL surface of membership: raft_add, raft_remove, raft_promote,
 * raft_demote, raft_transfer, raft_update, and the raft_members
 * table-valued function, which shows the member view
 * (runtime/member_view.h). */

#ifndef EXT_MEMBERS_H
#define EXT_MEMBERS_H

#include <stdbool.h>
#include <stdint.h>

#include <sqlite3ext.h>

#include "../runtime/member_view.h"

/* members_register registers the membership functions (SQLITE_DIRECTONLY)
 * and the eponymous virtual table raft_members on @db. Returns SQLITE_OK
 * or SQLite's error. Any thread. */
int members_register(sqlite3 *db);

#endif /* EXT_MEMBERS_H */
