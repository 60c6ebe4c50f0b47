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
** Loading raftsql on one connection gives it to every connection the
** process opens afterwards (sqlite3_auto_extension), raftsql's own
** included: the SQL functions and the write guard, on any file. The
** library then stays loaded until the process exits (pin_library).
**
** LIMITATIONS: the write guard replaces any authorizer the host had set,
** and a host that calls sqlite3_set_authorizer after loading raftsql
** removes the guard; a C host keeps both with raftsql_set_authorizer()
** (raftsql.h), and writes that slip past the guard are detected from the
** database's data_version. The guard refuses only what goes through a
** connection of a process that loaded raftsql: connections opened before
** the load, or after a host's sqlite3_reset_auto_extension, have none.
** raftsql calls SQLite only through the
** API table of the host that loaded it (SQLITE_EXTENSION_INIT3 in every
** file, its own connections included), so a process holds one SQLite.
*/

#include <pthread.h>
#include <sqlite3ext.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SQLITE_CORE
#include <dlfcn.h>
#endif

#include "../sql/sql.h"
#include "raftsql.h"
#include "runtime/boot.h"
#include "runtime/config.h"
#include "runtime/node_tls.h"
#include "surface/busy_clock.h"
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

/* Stop every node when the process exits (or the library is unloaded: a
 * load that failed before pin_library, when no node ran yet), so the
 * threads never outlive the code they run. Loaded and registered, the
 * library is never unloaded: a node keeps running after the connection
 * that loaded raftsql closes, until raft_stop() or the exit. */
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

#ifndef SQLITE_CORE
/* Set once this shared object is pinned (pin_library). */
static atomic_bool pinned;

/* pin_library keeps this shared object loaded until the process exits.
 * SQLite dlcloses an extension when the connection that loaded it closes,
 * but an auto-extension is a bare function pointer in SQLite's list, and
 * the other connections' functions, authorizer and hooks point into this
 * object too, as do the threads of a node: unmapped, the next open (or
 * call, or tick) would jump into nothing. So the object opens itself
 * once more, by the name the dynamic loader knows it by (dladdr of a
 * function of ours), with RTLD_NOLOAD (only the copy already loaded,
 * never another file of that name: the name may be relative to a working
 * directory since changed) and RTLD_NODELETE (the loader never unmaps it,
 * whatever the count of handles), and never closes that handle (a
 * reference kept even where the flag were ignored). The destructor
 * (raftsql_fini) then runs at the exit only. Called before the init
 * registers anything on its connection, so a failure leaves nothing
 * pointing into an object SQLite unloads. Nothing after the first
 * success but one atomic load; threads racing through the first call
 * need no lock (the loader counts one more reference each). Returns
 * SQLITE_OK, or SQLITE_ERROR with *@pzErrMsg (if not NULL;
 * sqlite3_malloc'd) saying why. Any thread. */
static int pin_library(char **pzErrMsg)
{
    int (*fn)(sqlite3 *, char **, const sqlite3_api_routines *) =
        sqlite3_raftsql_init;
    void *addr;
    Dl_info info;
    const char *e;

    if (atomic_load(&pinned)) {
        return SQLITE_OK;
    }
    /* ISO C has no cast between function and object pointers. */
    memcpy(&addr, &fn, sizeof addr);
    if (dladdr(addr, &info) == 0 || info.dli_fname == NULL) {
        e = "dladdr: the library's own path is unknown";
    } else if (dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) ==
               NULL) {
        e = dlerror();
    } else {
        atomic_store(&pinned, true);
        return SQLITE_OK;
    }
    if (pzErrMsg != NULL) {
        *pzErrMsg = sqlite3_mprintf("raftsql: cannot stay loaded: %s",
                                    e != NULL ? e : "dlopen failed");
    }
    return SQLITE_ERROR;
}

/* register_everywhere makes sqlite3_raftsql_init an auto-extension of the
 * host's SQLite, the library being pinned (pin_library), so that every
 * connection the process opens from now on runs it: the write guard
 * refuses direct writes to a replica's file on each, not only on the
 * connection that loaded raftsql. raftsql's own connections run it too,
 * and each sets what it needs after the open (the apply connection
 * removes the guard, its hook and ext/'s functions: sql/fsm.c), as in a
 * program that registers raftsql so itself (raftsql.h). Asked at every
 * init, so a load after a host's sqlite3_reset_auto_extension registers
 * it again: SQLite keeps one entry per function (a mutex and a look
 * along its short list, not held while an init runs), so the calls of
 * every later open and of racing threads add nothing, and nothing here
 * waits on api_mu or on a connection. Returns SQLITE_OK, or SQLite's
 * error (SQLITE_NOMEM) with *@pzErrMsg (if not NULL; sqlite3_malloc'd)
 * saying why. Any thread, from the init only (the host's API table is
 * set). */
static int register_everywhere(char **pzErrMsg)
{
    int rc = sqlite3_auto_extension((void (*)(void))sqlite3_raftsql_init);
    if (rc != SQLITE_OK && pzErrMsg != NULL) {
        *pzErrMsg =
            sqlite3_mprintf("raftsql: cannot register for every connection: %s",
                            sqlite3_errstr(rc));
    }
    return rc;
}
#endif

/* In the loadable build (not SQLITE_CORE), the init pins the library
 * (pin_library) before it registers anything, and once its connection is
 * set up registers raftsql for every later connection of the process
 * (register_everywhere). The static build (libraftsql.a and the programs
 * linking it) does neither: it cannot be unloaded, and the program
 * chooses which connections get raftsql, with sqlite3_auto_extension as
 * raftsql.h shows or a call of the init on one connection (tests keep
 * connections unguarded so). */
__attribute__((visibility("default"))) int sqlite3_raftsql_init(
    sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi)
{
    int rc;
    if (ext_guard_asking() || sql_verify_opening()) {
        /* The guard's own question (guard.h), or the state machine's
         * scan of a file (sql.h): connections that are raftsql's own. */
        return SQLITE_OK;
    }
    pthread_mutex_lock(&api_mu);
    if (first_api == NULL) {
        first_api = pApi;
    }
    pthread_mutex_unlock(&api_mu);
    pthread_once(&api_once, set_api);
    /* Before any node of raftsql runs: the busy handler's sleeps count
     * raftsql's waits for the write lease. */
    busy_clock_install();
#ifndef SQLITE_CORE
    if (pin_library(pzErrMsg) != SQLITE_OK) {
        return SQLITE_ERROR;
    }
#endif
    rc = ext_func_register(db);
    if (rc == SQLITE_OK) {
        rc = ext_guard_install(db);
    }
    if (rc == SQLITE_OK) {
        /* A connection on a file a node serves: its WAL lock wrapped
         * from the start, also when it only reads, so that its reads
         * begin through the guard (ext_guard_read_begin). */
        ext_guard_read_start(db);
    }
    if (rc != SQLITE_OK) {
        if (pzErrMsg != NULL) {
            *pzErrMsg = sqlite3_mprintf("raftsql: cannot register: %s",
                                        sqlite3_errstr(rc));
        }
        return rc;
    }
#ifndef SQLITE_CORE
    rc = register_everywhere(pzErrMsg);
#endif
    return rc;
}

/* check_config parses @config for @db_path as raft_start does, then runs
 * @check on it with @arg (0 or an error with @errmsg). Returns SQLITE_OK,
 * SQLITE_ERROR with @errmsg (@errmsg_len bytes), or SQLITE_NOMEM. */
static int check_config(const char *config, const char *db_path,
                        int (*check)(struct ext_config *cfg, void *arg,
                                     char *errmsg, size_t errmsg_len),
                        void *arg, char *errmsg, size_t errmsg_len)
{
    struct ext_config *cfg = malloc(sizeof *cfg);
    int rc;
    if (cfg == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return SQLITE_NOMEM;
    }
    rc = ext_config_parse(config, db_path, cfg, errmsg, errmsg_len);
    if (rc == 0) {
        rc = check(cfg, arg, errmsg, errmsg_len);
    }
    free(cfg);
    return rc == 0 ? SQLITE_OK : SQLITE_ERROR;
}

/* check_paths is check_config's check of raftsql_config_check: @arg the
 * database's path. */
static int check_paths(struct ext_config *cfg, void *arg, char *errmsg,
                       size_t errmsg_len)
{
    int rc = ext_config_check_paths(cfg, arg, errmsg, errmsg_len);
    if (rc == 0) {
        /* The files it names load, as at the start. */
        rc = node_tls_check(cfg, errmsg, errmsg_len);
    }
    if (rc == 0 && !ext_registry_running(arg)) {
        /* The log, if any, is this server's (read-only; not beside a
         * node of this process on the file, whose log is open here:
         * LMDB takes one open of an environment per process, and a
         * second one's close drops the first one's locks). */
        rc = boot_check_owner(cfg, arg, errmsg, errmsg_len);
    }
    return rc;
}

__attribute__((visibility("default"))) int raftsql_config_check(
    const char *config, const char *db_path, char *errmsg, size_t errmsg_len)
{
    return check_config(config, db_path, check_paths, (void *)db_path, errmsg,
                        errmsg_len);
}

/* What raftsql_metrics_listen_check asks of check_metrics. */
struct metrics_check {
    const char *address; /* metrics_listen's value */
    bool tls;            /* out: serve with TLS */
};

/* check_metrics is check_config's check of raftsql_metrics_listen_check:
 * @arg a struct metrics_check. */
static int check_metrics(struct ext_config *cfg, void *arg, char *errmsg,
                         size_t errmsg_len)
{
    struct metrics_check *m = arg;
    return ext_config_metrics_check(cfg, m->address, &m->tls, errmsg,
                                    errmsg_len);
}

__attribute__((visibility("default"))) int raftsql_metrics_listen_check(
    const char *config, const char *db_path, const char *address, int *out_tls,
    char *errmsg, size_t errmsg_len)
{
    struct metrics_check m = {.address = address, .tls = false};
    int rc =
        check_config(config, db_path, check_metrics, &m, errmsg, errmsg_len);
    if (rc == SQLITE_OK) {
        *out_tls = m.tls;
    }
    return rc;
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
