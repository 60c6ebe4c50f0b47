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
** LIMITATIONS: the write guard replaces any authorizer the host had set,
** and a host that calls sqlite3_set_authorizer after loading raftsql
** removes the guard; a C host keeps both with raftsql_set_authorizer()
** (raftsql.h), and writes that slip past the guard are detected from the
** database's data_version. The guard refuses only what goes through a
** connection that loaded raftsql. raftsql calls SQLite only through the
** API table of the host that loaded it (SQLITE_EXTENSION_INIT3 in every
** file, its own connections included), so a process holds one SQLite.
*/

#include <pthread.h>
#include <sqlite3ext.h>
#include <stdio.h>
#include <stdlib.h>

#include "raftsql.h"
#include "runtime/config.h"
#include "surface/func.h"
#include "surface/guard.h"
#include "surface/refusal_watch.h"
#include "surface/registry.h"

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
    refusal_watch_stop();
    ext_registry_stop_all();
}

__attribute__((visibility("default"))) int raftsql_set_authorizer(
    sqlite3 *db,
    int (*x)(void *, int, const char *, const char *, const char *,
             const char *),
    void *arg)
{
#ifndef SQLITE_CORE
    /* Loaded as an extension: the host's API table must be set. */
    if (sqlite3_api == NULL) {
        return SQLITE_MISUSE;
    }
#endif
    return ext_guard_set_host(db, x, arg);
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

__attribute__((visibility("default"))) int raftsql_config_check(
    const char *config, const char *db_path, char *errmsg, size_t errmsg_len)
{
    struct ext_config *cfg = malloc(sizeof *cfg);
    int rc;
    if (cfg == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return SQLITE_NOMEM;
    }
    rc = ext_config_parse(config, db_path, cfg, errmsg, errmsg_len);
    if (rc == 0) {
        rc = ext_config_check_paths(cfg, db_path, errmsg, errmsg_len);
    }
    free(cfg);
    return rc == 0 ? SQLITE_OK : SQLITE_ERROR;
}

__attribute__((visibility("default"))) int raftsql_node_state(sqlite3 *db,
                                                              int *out_state,
                                                              char *why,
                                                              size_t why_len)
{
    const char *file;
    struct ext_node *n;
    int state = RAFTSQL_NODE_RUNNING;
#ifndef SQLITE_CORE
    if (sqlite3_api == NULL) {
        return SQLITE_MISUSE;
    }
#endif
    file = sqlite3_db_filename(db, "main");
    if (file == NULL || file[0] == '\0') {
        snprintf(why, why_len,
                 "the main database is in-memory or temporary: no node "
                 "runs for it");
        return SQLITE_ERROR;
    }
    snprintf(why, why_len, "%s", "");
    if (!ext_registry_running(file)) {
        state = RAFTSQL_NODE_STOPPED;
    } else if ((n = ext_registry_acquire(file)) != NULL) {
        if (ext_node_failed(n, why, why_len)) {
            state = RAFTSQL_NODE_FAILED;
        }
        ext_registry_release(n);
    }
    *out_state = state;
    return SQLITE_OK;
}

__attribute__((visibility("default"))) int raftsql_barrier(sqlite3 *db,
                                                           int64_t *out_index,
                                                           char *errmsg,
                                                           size_t errmsg_len)
{
    sqlite3_stmt *st = NULL;
    int rc;
#ifndef SQLITE_CORE
    if (sqlite3_api == NULL) {
        return SQLITE_MISUSE;
    }
#endif
    rc = sqlite3_prepare_v2(db, "SELECT raft_barrier()", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out_index = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        } else {
            rc = sqlite3_extended_errcode(db);
        }
    }
    if (rc != SQLITE_OK) {
        snprintf(errmsg, errmsg_len, "%s", sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    return rc;
}
