/*
** raftsql.c - the raftsql SQLite extension: makes a database file one
** replica of a Raft group.
**
** Usage (sqlite3 shell), one process per node; the other processes of
** the machine that load raftsql on the same file use that node through
** its Unix socket (attach_server.c), with the same functions and no
** raft_start:
**
**     .load ./build/raftsql
**     SELECT raft_start('id=1 cluster=1@127.0.0.1:7001,2@127.0.0.1:7002,'
**                       '3@127.0.0.1:7003');
**     SELECT raft_exec('CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)');
**     SELECT raft_exec('INSERT INTO t(v) VALUES(?)', 'hello');
**     SELECT * FROM t;           -- reads are plain local SQL
**     SELECT raft_status();      -- JSON
**
** Writes go through raft_exec() only: the statement becomes a Raft log
** entry, and every node applies committed entries in order to its own
** database. Direct writes to the database are refused while the node runs,
** in its process and in the others that loaded raftsql.
** Membership changes through the log (members.c):
**
**     SELECT raft_add(4, '127.0.0.1:7004');  -- a learner, then a voter
**     SELECT * FROM raft_members;
**
** LIMITATIONS: the write guard replaces any authorizer the host had set;
** the extension and its host must share one SQLite library (the apply
** connection is opened with the library raftsql was linked against).
*/

#include <pthread.h>
#include <sqlite3ext.h>

#include "func.h"
#include "guard.h"
#include "registry.h"

SQLITE_EXTENSION_INIT1

/* The host's API table, set once: with sqlite3_auto_extension every
 * connection of the process calls the init function, on any thread,
 * including the connections raftsql opens itself. */
static const sqlite3_api_routines *first_api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t api_mu = PTHREAD_MUTEX_INITIALIZER;

static void set_api(void)
{
    SQLITE_EXTENSION_INIT2(first_api);
}

/* Stop every node when the library is unloaded or the process exits, so
 * the threads never outlive the code they run. */
__attribute__((destructor)) static void raftsql_fini(void)
{
    ext_registry_stop_all();
}

__attribute__((visibility("default"))) int sqlite3_raftsql_init(
    sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi)
{
    int rc;
    pthread_mutex_lock(&api_mu);
    if (first_api == NULL) {
        first_api = pApi;
    }
    pthread_mutex_unlock(&api_mu);
    pthread_once(&api_once, set_api);
    rc = ext_func_register(db);
    if (rc == SQLITE_OK) {
        rc = ext_guard_install(db);
    }
    if (rc != SQLITE_OK && pzErrMsg != NULL) {
        *pzErrMsg =
            sqlite3_mprintf("raftsql: cannot register: %s", sqlite3_errstr(rc));
    }
    return rc;
}
