/* The write guard (see guard.h). */

#include "guard.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "../../sql/sql.h"
#include "../runtime/applier.h"
#include "../runtime/attach_sock.h"
#include "../runtime/events.h"
#include "../runtime/staleness.h"
#include "attach_client.h"
#include "guard_check.h"
#include "refusal_watch.h"
#include "registry.h"
#include "plain_write.h"
#include "shadow.h"
#include "wal_lock.h"

SQLITE_EXTENSION_INIT3

static int refuse(sqlite3 *db, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int plain_commit(sqlite3 *db, bool *handled);
static bool plain_served(const char *file);
static int plain_allow(sqlite3 *db, const char *file);
static void plain_prepare(sqlite3 *db);
static void plain_arm(sqlite3 *db);
static bool apply_connection(sqlite3 *db);
static int guard_gate(void *arg, sqlite3_stmt *stmt, char *why, size_t why_len);

/* replicated says whether schema @schema of @db (NULL: main) is a file a
 * node runs for now: "main", or the same file ATTACHed under another
 * name; the node of this process, or of another process of the machine
 * (its pointer file names a live process, attach_client.h). A file whose
 * node stopped in this process is not: its writes are refused as those
 * of any replica that no node serves (unserved_write). */
static int replicated(sqlite3 *db, const char *schema)
{
    const char *file = sqlite3_db_filename(db, schema ? schema : "main");
    return file != NULL && file[0] != '\0' &&
           (ext_registry_running(file) || attach_client_served(file));
}

/* local_read_refusal answers ext_guard_read_refusal from what this
 * process knows (its appliers and stale nodes, the registry): *@local
 * is set when a node of this process runs for @file, which then decides
 * alone. Atomics and the registry's lock: no system call. */
static int local_read_refusal(const char *file, bool *local, char *why,
                              size_t why_len)
{
    *local = false;
    if (applier_any_diverged() && ext_registry_diverged(file, why, why_len)) {
        return EXT_GUARD_DIVERGED;
    }
    if (ext_registry_stale(file, why, why_len)) {
        return EXT_GUARD_STALE;
    }
    *local = ext_registry_running(file);
    return 0;
}

/* remote_read_refusal answers ext_guard_read_refusal for a file no node
 * of this process runs: the notices beside it (a stat() each, and a
 * small read and kill(pid, 0) for a bound marker). */
static int remote_read_refusal(const char *file, char *why, size_t why_len)
{
    if (attach_sock_diverged(file, why, why_len)) {
        return EXT_GUARD_DIVERGED;
    }
    if (attach_sock_stale(file, why, why_len) ||
        attach_sock_unserved(file, why, why_len)) {
        return EXT_GUARD_STALE;
    }
    return 0;
}

int ext_guard_read_refusal(const char *file, char *why, size_t why_len)
{
    bool local;
    int refusal = local_read_refusal(file, &local, why, why_len);
    if (refusal != 0 || local) {
        return refusal;
    }
    return remote_read_refusal(file, why, why_len);
}

/* ---- The read cache ----------------------------------------------------
 *
 * The authorizer asks about every column a statement reads, and a driver
 * without a statement cache prepares every query: asking the notices of
 * another process's node each time (remote_read_refusal: three stat()s,
 * more with a bound marker) cost a point select half its speed. So each
 * thread remembers, for a few files, that reads of one were allowed, and
 * answers so without a system call for GUARD__READ_OK_MS; a refusal is
 * never remembered (it is asked again each time, and its end seen at
 * once).
 *
 * Staleness bound: a statement prepared up to GUARD__READ_OK_MS after
 * the guard began refusing reads of a file (a notice appeared) may still
 * be allowed. It is then expired as one prepared before: the refusal
 * watch (refusal_watch.h) sees the refusal within EXT_REFUSAL_WATCH_MS
 * and calls ext_guard_expire_all, which first moves read_gen, so that no
 * answer remembered before is used again: a prepare that begins after
 * its connection's statements were expired (the expiry holds the
 * connection's mutex, which a prepare holds throughout) asks anew. So
 * the bound is the watch's, as it was for statements prepared before a
 * refusal; for a file the watch does not watch (one ATTACHed, or the
 * main file of a connection raftsql does not track) it is
 * GUARD__READ_OK_MS. The node's own process is not cached: its answers
 * are atomics. */

/* How long (ms) a thread reuses its finding that a file may be read. */
#define GUARD__READ_OK_MS 2

/* How many files a thread remembers. */
#define GUARD__READ_OK_SLOTS 4

/* One remembered finding: reads of path were allowed. */
struct guard_read_ok {
    char path[256];   /* the database file, "" for none (a longer path
                         is not remembered) */
    uint64_t gen;     /* read_gen when it was asked */
    int64_t until_ns; /* CLOCK_MONOTONIC ns until which it holds */
};

/* Moved by ext_guard_expire_all: answers remembered before are void. */
static atomic_uint_least64_t read_gen;

/* Moved at each read allowed after asking the files, by a hash of the
 * file's name (ext_guard_allowed_gen). */
#define GUARD__ALLOWED_SLOTS 16
static atomic_uint_least64_t allowed_gen[GUARD__ALLOWED_SLOTS];

/* allowed_slot returns the count of @file. */
static atomic_uint_least64_t *allowed_slot(const char *file)
{
    return &allowed_gen[XXH3_64bits(file, strlen(file)) % GUARD__ALLOWED_SLOTS];
}

uint64_t ext_guard_allowed_gen(const char *file)
{
    return atomic_load(allowed_slot(file));
}

static _Thread_local struct guard_read_ok read_ok[GUARD__READ_OK_SLOTS];
static _Thread_local unsigned read_ok_next; /* the slot to replace next */

/* now_ns returns CLOCK_MONOTONIC in ns. */
static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* read_refusal is ext_guard_read_refusal through this thread's cache
 * (above). Thread: the authorizer's. */
static int read_refusal(const char *file, char *why, size_t why_len)
{
    bool local;
    int refusal = local_read_refusal(file, &local, why, why_len);
    uint64_t gen;
    int64_t now;
    size_t len;

    if (refusal != 0 || local) {
        return refusal;
    }
    gen = atomic_load(&read_gen);
    now = now_ns();
    for (unsigned i = 0; i < GUARD__READ_OK_SLOTS; i++) {
        struct guard_read_ok *r = &read_ok[i];
        if (r->gen == gen && now < r->until_ns && strcmp(r->path, file) == 0) {
            return 0;
        }
    }
    refusal = remote_read_refusal(file, why, why_len);
    if (refusal == 0) {
        atomic_fetch_add(allowed_slot(file), 1);
    }
    len = strlen(file);
    if (refusal == 0 && len < sizeof read_ok[0].path) {
        struct guard_read_ok *r = NULL;
        for (unsigned i = 0; i < GUARD__READ_OK_SLOTS && r == NULL; i++) {
            if (strcmp(read_ok[i].path, file) == 0) {
                r = &read_ok[i];
            }
        }
        if (r == NULL) {
            r = &read_ok[read_ok_next];
            read_ok_next = (read_ok_next + 1) % GUARD__READ_OK_SLOTS;
            memcpy(r->path, file, len + 1);
        }
        r->gen = gen;
        r->until_ns = now + GUARD__READ_OK_MS * 1000000LL;
    }
    return refusal;
}

/* guard_read refuses reads of table @table of schema @schema while
 * ext_guard_read_refusal says so of that file; the raftsql_* internals,
 * the schema and the raft_* table-valued functions stay readable. */
static int guard_read(sqlite3 *db, const char *table, const char *schema)
{
    const char *file;
    char why[600];
    int refusal;
    if (table == NULL) {
        return SQLITE_OK;
    }
    /* (The names compared only when they may match: most tables start
     * with another letter.) */
    if (((*table | 0x20) == 'r' &&
         (sqlite3_strnicmp(table, "raft_", 5) == 0 ||
          sqlite3_strnicmp(table, "raftsql_", 8) == 0)) ||
        ((*table | 0x20) == 's' &&
         sqlite3_strnicmp(table, "sqlite_", 7) == 0) ||
        (schema != NULL && (*schema | 0x20) == 't' &&
         sqlite3_stricmp(schema, "temp") == 0)) {
        return SQLITE_OK;
    }
    file = sqlite3_db_filename(db, schema ? schema : "main");
    if (file == NULL || file[0] == '\0') {
        return SQLITE_OK;
    }
    refusal = read_refusal(file, why, sizeof why);
    if (refusal == 0) {
        return SQLITE_OK;
    }
    return refuse(
        db, "read of %s refused: %s%s", table, why,
        refusal == EXT_GUARD_DIVERGED ? " (raft_status() shows it)" : "");
}

/* Set while this thread sets the cluster-wide settings on a connection
 * (settings_set): its PRAGMA statements are raftsql's own, allowed and
 * not shown to a host's authorizer. */
static _Thread_local bool syncing;

/* Set while this thread asks a side connection of its own (side_ask): a
 * module that its question would open (it opens none) is not asked about
 * again, and its reads are not guarded again. */
static _Thread_local bool asking;

bool ext_guard_asking(void)
{
    return asking;
}

/* Set while this thread asks whether the guard is a connection's
 * authorizer (guard_in_place); probe_seen is set when the guard is
 * called meanwhile. */
static _Thread_local bool probing;
static _Thread_local bool probe_seen;

/* guard_in_place tells whether the guard (alone or chained before a
 * host's authorizer, ext_guard_set_host) is still @db's authorizer:
 * SQLite has no call that reads it, so a statement of no consequence is
 * prepared (never stepped) and the guard notes that it was asked; a host
 * that replaced the authorizer (Python's set_authorizer, including None)
 * has the statement's one question asked of its own, or of none. A
 * failed prepare answers false. Thread: the one using @db, which may
 * prepare on it (a trace hook at a statement's start). */
static bool guard_in_place(sqlite3 *db)
{
    sqlite3_stmt *s = NULL;
    bool seen;

    probing = true;
    probe_seen = false;
    (void)sqlite3_prepare_v2(db, "SELECT 1", -1, &s, NULL);
    seen = probe_seen;
    probing = false;
    sqlite3_finalize(s);
    return seen;
}

/* The reason a write is refused where the guard is no longer the
 * connection's authorizer. */
#define GUARD__REPLACED                                                        \
    "this connection's authorizer, raftsql's write guard, was replaced "       \
    "by the host (Python's set_authorizer, sqlite3_set_authorizer), so "       \
    "raftsql no longer sees what it prepares: its writes are refused; set "    \
    "no authorizer on a connection that writes to a replica (in C, "           \
    "raftsql_set_authorizer keeps both)"

/* How many statements a connection's gate remembers as checked. */
#define GUARD__GATE_SEEN 4

/* The gate's memory of one connection: the statements it found prepared
 * under the guard, so that a statement run again (executemany, a host's
 * statement cache) costs no probe. A statement is the same compiled
 * program while its pointer and its reprepare count are the same and its
 * run count moved by one since the gate saw it (a statement prepared
 * later at a freed one's address starts its count anew). */
struct guard_gate_state {
    sqlite3 *db; /* the connection */
    struct {
        sqlite3_stmt *stmt; /* NULL: free */
        int runs;           /* SQLITE_STMTSTATUS_RUN when seen */
        int reprepares;     /* SQLITE_STMTSTATUS_REPREPARE when seen */
    } seen[GUARD__GATE_SEEN];
    unsigned next; /* the entry to replace next */
};

/* gate_seen tells whether @g found @stmt, as it runs now, prepared under
 * the guard already, and remembers it so when not: its counts now. */
static bool gate_seen(struct guard_gate_state *g, sqlite3_stmt *stmt,
                      bool remember)
{
    int runs = sqlite3_stmt_status(stmt, SQLITE_STMTSTATUS_RUN, 0);
    int reprepares = sqlite3_stmt_status(stmt, SQLITE_STMTSTATUS_REPREPARE, 0);

    for (unsigned i = 0; i < GUARD__GATE_SEEN; i++) {
        if (g->seen[i].stmt == stmt) {
            bool same = g->seen[i].reprepares == reprepares &&
                        g->seen[i].runs + 1 == runs;
            g->seen[i].runs = runs;
            g->seen[i].reprepares = reprepares;
            if (!remember && !same) {
                g->seen[i].stmt = NULL;
            }
            return same;
        }
    }
    if (remember) {
        g->seen[g->next].stmt = stmt;
        g->seen[g->next].runs = runs;
        g->seen[g->next].reprepares = reprepares;
        g->next = (g->next + 1) % GUARD__GATE_SEEN;
    }
    return false;
}

/* guard_gate is the gate (sql_capture_gate_cb) of the capture of a
 * connection (@arg, its struct guard_gate_state), asked at the start of
 * each statement that may write: while the guard is its authorizer, the
 * statement was checked when prepared (or is one of raftsql's own), and
 * the answer is 0; so it is for a statement run again that the gate
 * found so before (gate_seen). Otherwise the statement was prepared past
 * the guard, which would have refused what the capture does not
 * replicate (a PRAGMA user_version=, ANALYZE, a write to the raftsql_*
 * internals): the transaction is refused (its COMMIT vetoed) with @why.
 * A VACUUM, which SQLite commits with no commit hook, is stopped at once
 * (sqlite3_interrupt: SQLITE_INTERRUPT), the reason kept for
 * raft_last_error(). Thread: the one using the connection (its trace
 * hook). */
static int guard_gate(void *arg, sqlite3_stmt *stmt, char *why, size_t why_len)
{
    struct guard_gate_state *g = arg;
    sqlite3 *db = g->db;
    const char *sql = sqlite3_sql(stmt);

    if (gate_seen(g, stmt, false)) {
        return 0;
    }
    if (guard_in_place(db)) {
        (void)gate_seen(g, stmt, true);
        return 0;
    }
    snprintf(why, why_len, "%s", GUARD__REPLACED);
    while (sql != NULL && (*sql == ' ' || *sql == '\t' || *sql == '\n' ||
                           *sql == '\r' || *sql == ';')) {
        sql++;
    }
    if (sql != NULL && sqlite3_strnicmp(sql, "VACUUM", 6) == 0) {
        (void)refuse(db, "VACUUM refused: %s", GUARD__REPLACED);
        sqlite3_interrupt(db);
    }
    return 1;
}

/* side_ask prepares @sql on a read-only connection of its own to @file,
 * into *@side and *@s, for a question of the guard's about the file's
 * schema: an authorizer may not prepare statements on the connection it
 * authorizes. Returns false (nothing to release) while this thread asks
 * already, else true: then the caller binds and steps *@s if it is not
 * NULL (the open or the prepare failed otherwise), and calls side_done. */
static bool side_ask(const char *file, const char *sql, sqlite3 **side,
                     sqlite3_stmt **s)
{
    *side = NULL;
    *s = NULL;
    if (asking) {
        return false;
    }
    asking = true;
    if (sqlite3_open_v2(file, side, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_busy_timeout(*side, 1000) == SQLITE_OK) {
        (void)sqlite3_prepare_v2(*side, sql, -1, s, NULL);
    }
    return true;
}

/* side_done releases what side_ask opened. */
static void side_done(sqlite3 *side, sqlite3_stmt *s)
{
    sqlite3_finalize(s);
    sqlite3_close(side);
    asking = false;
}

/* replica_file tells whether the database file @file is a replica's: its
 * schema holds raftsql_applied, the table in which a node keeps its
 * applied index (made at the node's first start, kept after it stops,
 * copied into a raft_backup). Asked on a side connection (side_ask). A
 * file that does not exist yet, cannot be read, or any error answers
 * false. Thread: the caller's. */
static bool replica_file(const char *file)
{
    sqlite3 *side;
    sqlite3_stmt *s;
    bool yes;

    if (!side_ask(file,
                  "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND "
                  "name = 'raftsql_applied'",
                  &side, &s)) {
        return false;
    }
    yes = s != NULL && sqlite3_step(s) == SQLITE_ROW;
    side_done(side, s);
    return yes;
}

/* replica_schema tells whether schema @schema (NULL: main) of @db, as
 * @db holds it in memory, has a raftsql_applied table: the file of a
 * replica (sqlite3_table_column_metadata reads that copy: no statement
 * runs, nothing waits for a lock another connection holds). Thread: the
 * one using @db, holding its mutex (an authorizer, a commit hook). */
static bool replica_schema(sqlite3 *db, const char *schema)
{
    return sqlite3_table_column_metadata(db, schema ? schema : "main",
                                         "raftsql_applied", NULL, NULL, NULL,
                                         NULL, NULL, NULL) == SQLITE_OK;
}

/* unserved_write refuses a direct write to @what of schema @schema (NULL:
 * main) of @db, a file no node serves (not in this process, not through a
 * pointer file of a live process), when it is a replica's file (its
 * schema has raftsql_applied, or a node of this process ran on it): its
 * node is stopped (in this process too), died or has not started yet, so
 * nobody would replicate the
 * write, and the node's next start would find the file diverged and
 * repair the write away. Refused also when its node ran with
 * max_staleness_ms= and its bound marker says it serves no more (or its
 * heartbeat stopped: attach_sock_unserved), with that marker's reason.
 * Other files (never a replica's) are written freely. */
static int unserved_write(sqlite3 *db, const char *schema, const char *what)
{
    static const char prefix[] = "stale replica: ";
    const char *file = sqlite3_db_filename(db, schema ? schema : "main");
    char why[600];
    if (file == NULL || file[0] == '\0') {
        return SQLITE_OK;
    }
    if (attach_sock_unserved(file, why, sizeof why)) {
        return refuse(db,
                      "direct write to %s refused: %s; write through "
                      "raft_exec('...') once a node serves it",
                      what,
                      strncmp(why, prefix, sizeof prefix - 1) == 0
                          ? why + sizeof prefix - 1
                          : why);
    }
    /* VACUUM INTO fills its new target, attached as vacuum_db, with the
     * replica's schema: asked of the file as it stands on disk (new and
     * empty) rather than of what this statement is putting in it. */
    if (schema != NULL && sqlite3_stricmp(schema, "vacuum_db") == 0
            ? !replica_file(file)
            : !replica_schema(db, schema) && !ext_registry_replica(file)) {
        return SQLITE_OK;
    }
    return refuse(db,
                  "direct write to %s refused: %s is a Raft replica (it has "
                  "a raftsql_applied table) and no raftsql node serves it "
                  "(its node is stopped, died or has not started): nobody "
                  "would replicate the write, and the node's next start "
                  "would repair it away; start its node (raft_start) and "
                  "write again, or open the file in a process that did not "
                  "load raftsql to use it as a plain database for good",
                  what, file);
}

/* guard_commit is the commit hook of a guarded connection (@arg). The
 * guard refuses each direct write to a replica's file when it is
 * prepared, so a commit that writes one got past no guard: the host
 * replaced the connection's authorizer after raftsql set it (Python's
 * set_authorizer(None), sqlite3_set_authorizer). Committed, it would be a
 * write no node replicates, which the node finds and repairs away; so it
 * is vetoed (returns 1: SQLite rolls the transaction back and the
 * statement fails with SQLITE_CONSTRAINT_COMMITHOOK, "constraint
 * failed"), with a line on stderr. Asked of each schema but temp with a
 * write transaction, cheapest first: its schema as this connection holds
 * it has a raftsql_applied table (replica_schema, in memory), a node
 * serves its file (replicated: a pointer file read), or the file as
 * committed on disk has one (replica_file: a side connection, for a
 * transaction that renamed the table away). So a commit to a plain file
 * costs a side connection's open and one read of its schema. Returns 0
 * otherwise, and on a SQLite older than 3.39 (no sqlite3_db_name). The
 * thread committing on @arg. */
static int guard_commit(void *arg)
{
    sqlite3 *db = arg;
    const char *name;
    bool served;

    if (sqlite3_libversion_number() < 3039000) {
        return 0;
    }
    for (int i = 0; (name = sqlite3_db_name(db, i)) != NULL; i++) {
        const char *file = sqlite3_db_filename(db, name);
        if (i == 1 || sqlite3_txn_state(db, name) != SQLITE_TXN_WRITE ||
            file == NULL || file[0] == '\0') {
            continue;
        }
        if (i == 0) {
            bool handled = false;
            int veto = plain_commit(db, &handled);
            if (handled) {
                if (veto) {
                    return 1;
                }
                continue;
            }
        }
        served = replicated(db, name);
        if (!replica_schema(db, name) && !served && !replica_file(file)) {
            continue;
        }
        (void)refuse(db,
                     "commit to %s refused, rolled back: it is a Raft "
                     "replica's file%s, and the write got past the write "
                     "guard (this connection's authorizer was replaced, "
                     "or the write is one SQLite shows no authorizer, "
                     "such as a blob write), so nothing would replicate "
                     "it; write through raft_exec('...'), and set no "
                     "authorizer on a connection that writes to a replica "
                     "(in C, raftsql_set_authorizer keeps both)",
                     file,
                     served ? ""
                            : " that no raftsql node serves now (start its "
                              "node: raft_start)");
        return 1;
    }
    return 0;
}

/* builtin_shadow tells whether table @table of the database file @file is
 * a shadow table of a virtual table of one of SQLite's own modules
 * (shadow.h), as SQLite
 * decides (sqlite3ShadowTableName): the virtual table is named as @table
 * up to its last '_', and its module knows the rest as a suffix of its
 * shadow tables; both tables are in the schema. Asked on a side
 * connection (side_ask). Any error answers false. */
static bool builtin_shadow(const char *file, const char *table)
{
    const char *tail = strrchr(table, '_');
    sqlite3 *side;
    sqlite3_stmt *s;
    char module[32] = "";

    if (tail == NULL || tail == table ||
        !side_ask(file,
                  "SELECT v.sql FROM sqlite_schema v, sqlite_schema t WHERE "
                  "v.type = 'table' AND v.name = substr(?1, 1, ?2) COLLATE "
                  "NOCASE AND v.sql LIKE 'CREATE VIRTUAL %' AND t.type = "
                  "'table' AND t.name = ?1 COLLATE NOCASE",
                  &side, &s)) {
        return false;
    }
    if (s != NULL &&
        sqlite3_bind_text(s, 1, table, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_bind_int(s, 2, (int)(tail - table)) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0) != NULL) {
        shadow_module((const char *)sqlite3_column_text(s, 0),
                      (size_t)sqlite3_column_bytes(s, 0), module,
                      sizeof module);
    }
    side_done(side, s);
    return shadow_known(module) && shadow_suffix(module, tail + 1);
}

/* module_write tells whether the write to table @table of schema @schema
 * (NULL: main) of @db being prepared may be left to SQLite: @db is
 * DEFENSIVE, so SQLite itself refuses a statement's direct write to a
 * shadow table ("table X may not be modified") and lets only the virtual
 * table's module prepare and run its own (while it opens the table or
 * writes it), and @table is a shadow table of one of SQLite's own modules.
 * An R*Tree table cannot be read otherwise: its module prepares its
 * writes when a connection opens it. */
static bool module_write(sqlite3 *db, const char *schema, const char *table)
{
    int defensive = 0;
    const char *file = sqlite3_db_filename(db, schema ? schema : "main");
    if (table == NULL || strchr(table, '_') == NULL || file == NULL ||
        file[0] == '\0' ||
        sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, -1, &defensive) !=
            SQLITE_OK ||
        !defensive) {
        return false;
    }
    return builtin_shadow(file, table);
}

/* any_replica tells whether a schema of @db but temp is a replica's file,
 * served by a node (replicated) or not (replica_schema): what an in-place
 * VACUUM, which names no schema to the authorizer, may rewrite. Before
 * 3.39 (no sqlite3_db_name), main only. Thread: the one using @db. */
static bool any_replica(sqlite3 *db)
{
    const char *name;
    if (sqlite3_libversion_number() < 3039000) {
        return replicated(db, NULL) || replica_schema(db, NULL);
    }
    for (int i = 0; (name = sqlite3_db_name(db, i)) != NULL; i++) {
        if (i != 1 && (replicated(db, name) || replica_schema(db, name))) {
            return true;
        }
    }
    return false;
}

/* plain_action says whether authorizer action @action is one a plain
 * SQL write may do on a replica (plain_write.h): rows, and the schema
 * statements the capture sends as text. Not PRAGMAs that write the file,
 * or ANALYZE (sqlite_stat1 is not replicated). */
static bool plain_action(int action)
{
    switch (action) {
        case SQLITE_INSERT:
        case SQLITE_UPDATE:
        case SQLITE_DELETE:
        case SQLITE_CREATE_INDEX:
        case SQLITE_CREATE_TABLE:
        case SQLITE_CREATE_TRIGGER:
        case SQLITE_CREATE_VIEW:
        case SQLITE_DROP_INDEX:
        case SQLITE_DROP_TABLE:
        case SQLITE_DROP_TRIGGER:
        case SQLITE_DROP_VIEW:
        case SQLITE_ALTER_TABLE:
        case SQLITE_REINDEX: /* also asked by CREATE INDEX; rebuilds
                                nothing a replica reads differently */
            return true;
        default:
            return false;
    }
}

static int guard(void *arg, int action, const char *a1, const char *a2,
                 const char *db_name, const char *trigger)
{
    sqlite3 *db = arg;
    const char *what = NULL;
    const char *schema = db_name;
    struct guard_check *checking;
    (void)trigger;

    if (probing) {
        probe_seen = true; /* guard_in_place's question */
        return SQLITE_OK;
    }
    /* Not for a VACUUM's own work (its ATTACH of vacuum_db and what it
     * writes there): SQLite runs it with the trace mask it had saved at
     * zero, and puts that mask back at its end, over an arm's. */
    if (action != SQLITE_READ && action != SQLITE_SELECT &&
        action != SQLITE_FUNCTION && action != SQLITE_RECURSIVE &&
        action != SQLITE_ATTACH && action != SQLITE_DETACH &&
        (db_name == NULL || sqlite3_stricmp(db_name, "vacuum_db") != 0)) {
        plain_arm(db);
    }
    checking = guard_check_current();
    if (checking != NULL) {
        guard_check_note(checking, action, a1, a2, db_name);
        /* A cluster-wide setting is not set on the caller's connection
         * by checking its request (SQLite sets a flag PRAGMA when it
         * prepares it): it follows the replicated value (settings_set). */
        return action == SQLITE_PRAGMA && a2 != NULL &&
                       sql_refusal_setting(action, a1, a2, db_name) != NULL
                   ? SQLITE_IGNORE
                   : SQLITE_OK;
    }
    if (syncing) {
        return SQLITE_OK;
    }
    switch (action) {
        case SQLITE_READ:
            return guard_read(db, a1, schema);
        case SQLITE_TRANSACTION:
        case SQLITE_SAVEPOINT:
            /* BEGIN IMMEDIATE takes the write lock before any write is
             * prepared: the lock must ask for the lease already. */
            plain_prepare(db);
            return SQLITE_OK;
        case SQLITE_INSERT:
            /* A VACUUM in place copies the database into a temporary one
             * attached as "vacuum_db" (no file name; VACUUM INTO names
             * its target file and changes nothing here) and back. It
             * renumbers the rowids of tables without an INTEGER PRIMARY
             * KEY on this node only, so later writes by rowid would hit
             * other rows here, and the replicas would diverge: refused.
             * SQLite checks nothing else of it. */
            if (db_name != NULL && sqlite3_stricmp(db_name, "vacuum_db") == 0) {
                const char *file = sqlite3_db_filename(db, "vacuum_db");
                if ((file == NULL || file[0] == '\0') && any_replica(db)) {
                    return refuse(db,
                                  "VACUUM refused: this database is a "
                                  "Raft replica, and VACUUM would "
                                  "renumber rowids on this node only "
                                  "(VACUUM INTO 'file' makes a copy)");
                }
            }
            what = a1;
            break;
        case SQLITE_UPDATE:
            /* SQLite checks UPDATE of the schema table whenever it sets up
             * a table-valued function or parses the schema; a real update
             * of it needs writable_schema, refused below. */
            if (a1 != NULL && (sqlite3_stricmp(a1, "sqlite_master") == 0 ||
                               sqlite3_stricmp(a1, "sqlite_schema") == 0)) {
                break;
            }
            what = a1;
            break;
        case SQLITE_DELETE:
        case SQLITE_CREATE_INDEX:
        case SQLITE_CREATE_TABLE:
        case SQLITE_CREATE_TRIGGER:
        case SQLITE_CREATE_VIEW:
        case SQLITE_DROP_INDEX:
        case SQLITE_DROP_TABLE:
        case SQLITE_DROP_TRIGGER:
        case SQLITE_DROP_VIEW:
        case SQLITE_REINDEX:
        case SQLITE_ANALYZE:
            /* (CREATE/DROP VIRTUAL TABLE write the schema table, refused
             * as an INSERT/DELETE; the VTABLE actions themselves also come
             * from reading table-valued functions, which stay allowed.) */
            what = a1;
            break;
        case SQLITE_ALTER_TABLE:
            schema = a1;
            what = a2;
            break;
        case SQLITE_PRAGMA:
            /* The node keeps its file in WAL mode, and its connections
             * stay open: another journal mode could only end in "database
             * is locked" at step time, which names no reason. */
            if (a2 != NULL && sqlite3_stricmp(a1, "journal_mode") == 0 &&
                sqlite3_stricmp(a2, "wal") != 0 &&
                (schema == NULL || sqlite3_stricmp(schema, "temp") != 0) &&
                (replicated(db, schema) || replica_schema(db, schema))) {
                return refuse(db,
                              "PRAGMA journal_mode=%s refused: this "
                              "database is a Raft replica, which its node "
                              "keeps in WAL mode",
                              a2);
            }
            /* The pragmas that write the database file itself, and the
             * one that would let the schema table be edited. */
            if ((a2 != NULL && (sqlite3_stricmp(a1, "user_version") == 0 ||
                                sqlite3_stricmp(a1, "application_id") == 0 ||
                                sqlite3_stricmp(a1, "schema_version") == 0 ||
                                sqlite3_stricmp(a1, "writable_schema") == 0)) ||
                sqlite3_stricmp(a1, "incremental_vacuum") == 0) {
                what = a1;
            }
            break;
        default:
            break;
    }
    if (what == NULL ||
        (schema != NULL && sqlite3_stricmp(schema, "temp") == 0)) {
        return SQLITE_OK;
    }
    if (sqlite3_strnicmp(what, "sqlite_", 7) == 0) {
        what = "the schema";
    }
    if ((action == SQLITE_INSERT || action == SQLITE_UPDATE ||
         action == SQLITE_DELETE) &&
        module_write(db, schema, what)) {
        return SQLITE_OK;
    }
    if (!replicated(db, schema)) {
        return unserved_write(db, schema, what);
    }
    if (plain_action(action) &&
        (schema == NULL || sqlite3_stricmp(schema, "main") == 0) &&
        sqlite3_strnicmp(what, "raftsql_", 8) != 0) {
        const char *file = sqlite3_db_filename(db, "main");
        if (plain_served(file)) {
            return plain_allow(db, file);
        }
    }
    if (action == SQLITE_ANALYZE) {
        /* One call per table analyzed: the same words for each. */
        return refuse(db,
                      "ANALYZE refused: its statistics (sqlite_stat1) are "
                      "part of a Raft replica's state; run it through "
                      "raft_exec('ANALYZE'), which every replica applies");
    }
    return refuse(db,
                  "direct write to %s refused: this database is a Raft "
                  "replica; write through raft_exec('...')",
                  what);
}

/* ---- Guarded connections (expiring their statements) ------------------ */

/* The name of the function whose state tracks a guarded connection: its
 * destructor, run when the connection closes, forgets it. */
#define EXT__GUARD_TRACKER "raftsql_guarded_connection"

/* One guarded connection. */
struct guard_conn {
    sqlite3 *db;                  /* the connection */
    char *file;                   /* its main file, watched (sqlite3_malloc'd,
                                NULL for none) */
    bool pending;                 /* its statements are to be expired */
    unsigned settings;            /* the cluster-wide settings last set on it
                                (settings_set; conns_mu) */
    bool apply;                   /* an apply connection (sql_is_apply_vfs):
                                its settings are the state machine's */
    char *last_error;             /* the latest refusal's reason, NULL for
                                none (sqlite3_malloc'd; conns_mu) */
    int64_t last_error_at;        /* when, CLOCK_MONOTONIC ns (conns_mu) */
    int64_t said_at;              /* when a refusal was last written to
                                     stderr, CLOCK_MONOTONIC ns (conns_mu) */
    unsigned unsaid;              /* refusals like the last one not written
                                     since (conns_mu) */
    struct plain_write *pw;       /* its plain writes, NULL until the first
                                (set by the connection's own thread) */
    struct guard_gate_state gate; /* its capture's gate (guard_gate; the
                                     connection's own thread) */
    struct guard_conn *prev;      /* in conns */
    struct guard_conn *next;      /* in conns */
};

/* Lock order: a connection's db mutex, then conns_mu; holding conns_mu, a
 * db mutex is only tried (sqlite3_mutex_try), never waited for. */
static pthread_mutex_t conns_mu = PTHREAD_MUTEX_INITIALIZER;
static struct guard_conn *conns; /* the guarded connections */
static atomic_uint n_pending;    /* of them, pending */

/* find_conn returns the entry of @db, or NULL. Holding conns_mu. */
static struct guard_conn *find_conn(sqlite3 *db)
{
    struct guard_conn *c = conns;
    while (c != NULL && c->db != db) {
        c = c->next;
    }
    return c;
}

/* conn_of returns @db's entry (NULL when @db is not guarded), with
 * *@pw its plain writes (NULL before its first). Both live as long as
 * the connection: freed at its close, which cannot run while its thread
 * uses them. Thread: the one using @db. */
static struct guard_conn *conn_of(sqlite3 *db, struct plain_write **pw)
{
    struct guard_conn *c;

    pthread_mutex_lock(&conns_mu);
    c = find_conn(db);
    *pw = c != NULL ? c->pw : NULL;
    pthread_mutex_unlock(&conns_mu);
    return c;
}

/* plain_start starts @db's plain-write path for its main file @file
 * (plain_write_enable) the first time. Returns 0, or -1 with @why (@why_len
 * bytes) saying why it cannot. Thread: the one using @db. */
static int plain_start(sqlite3 *db, const char *file, char *why, size_t why_len)
{
    struct plain_write *pw;
    struct guard_conn *c = conn_of(db, &pw);

    if (c == NULL) {
        snprintf(why, why_len, "this connection is not tracked by raftsql");
        return -1;
    }
    if (pw != NULL) {
        return 0;
    }
    /* Only this connection's thread sets c->pw, and only its close
     * frees c: no other thread races this. */
    if (plain_write_enable(&pw, db, file, why, why_len) != 0) {
        return -1;
    }
    plain_write_set_gate(pw, guard_gate, &c->gate);
    pthread_mutex_lock(&conns_mu);
    c->pw = pw;
    pthread_mutex_unlock(&conns_mu);
    return 0;
}

/* plain_served says whether plain SQL writes to database file @file go
 * through a node: this process's, or another process's of the machine
 * (its pointer file; the lease then travels over its attach socket,
 * lease_client.h). Any thread. */
static bool plain_served(const char *file)
{
    return file != NULL && file[0] != '\0' &&
           (ext_registry_running(file) || attach_client_served(file));
}

/* plain_allow lets a plain write to the main file @file of @db (served
 * by a node of this process or another: plain_served) be prepared,
 * starting its plain-write path the first time; refuses it, saying why,
 * when that cannot start. Thread: the one using @db (its authorizer). */
static int plain_allow(sqlite3 *db, const char *file)
{
    char why[600];

    if (plain_start(db, file, why, sizeof why) != 0) {
        return refuse(db,
                      "plain SQL write to %s refused: %s; write through "
                      "raft_exec('...')",
                      file, why);
    }
    return SQLITE_OK;
}

/* plain_prepare starts @db's plain-write path ahead of its first write
 * when its main file is served by a node (plain_served; a failure is
 * told when a write is prepared). Thread: the one using @db. */
static void plain_prepare(sqlite3 *db)
{
    const char *file = sqlite3_db_filename(db, "main");
    char why[600];

    if (plain_served(file)) {
        (void)plain_start(db, file, why, sizeof why);
    }
}

void ext_guard_plain_start(sqlite3 *db)
{
    plain_prepare(db);
}

void ext_guard_read_start(sqlite3 *db)
{
    const char *file = sqlite3_db_filename(db, "main");
    char why[600];

    if (plain_served(file) && !apply_connection(db)) {
        /* Its reads only: the capture and its hooks start with its first
         * write, as before (a host's own trace callback, set after the
         * load, is the host's until then). Failing (not in WAL mode
         * yet), it is wrapped with its plain writes, as before. */
        (void)wal_lock_wrap_reads(db, file, why, sizeof why);
    }
}

/* plain_arm arms the capture of @db's plain writes, if it has one
 * (plain_write_arm): the guard calls it for every statement it sees
 * prepared that is not a read, before that statement can step, so that
 * its end is traced. Thread: the one using @db (its authorizer). */
static void plain_arm(sqlite3 *db)
{
    struct plain_write *pw;

    (void)conn_of(db, &pw);
    if (pw != NULL) {
        plain_write_arm(pw);
    }
}

/* plain_commit is the commit hook's part for @db's main file when @db
 * writes it plain (*@handled set): plain_write_commit, its veto refused
 * with the reason. Thread: the one committing on @db. */
static int plain_commit(sqlite3 *db, bool *handled)
{
    struct plain_write *pw;
    char why[1000];

    (void)conn_of(db, &pw);
    *handled = pw != NULL;
    if (pw == NULL || plain_write_commit(pw, db, why, sizeof why) == 0) {
        return 0;
    }
    (void)refuse(db, "%s", why);
    return 1;
}

/* untrack forgets entry @p (the tracker's destructor: the connection
 * closes, or the tracker could not be created). */
static void untrack(void *p)
{
    struct guard_conn *c = p;
    pthread_mutex_lock(&conns_mu);
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        conns = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    if (c->pending) {
        atomic_fetch_sub(&n_pending, 1);
    }
    pthread_mutex_unlock(&conns_mu);
    refusal_watch_remove(c->file);
    plain_write_free(c->pw, 1);
    sqlite3_free(c->file);
    sqlite3_free(c->last_error);
    sqlite3_free(c);
}

/* How often a connection writes the same refusal to stderr, at most, ms:
 * a retry loop whose cached statements are refused at each COMMIT wrote
 * one line per refusal (110,655 in 14 s, a new-user trial). */
#define GUARD_SAY_AGAIN_MS 1000

/* refuse writes "raftsql: " and the reason @fmt formats to stderr, keeps
 * the reason as @db's latest refusal (ext_guard_last_error; not kept when
 * @db is not tracked, or out of memory), and returns SQLITE_DENY. The
 * same reason again on the same connection within GUARD_SAY_AGAIN_MS of
 * the last line is not written, only counted, and the next line written
 * says how many were not. Thread: the one using @db, holding its mutex
 * (an authorizer, a commit hook). */
static int refuse(sqlite3 *db, const char *fmt, ...)
{
    char why[1200];
    struct guard_conn *c;
    unsigned unsaid = 0;
    bool say = true;
    int64_t now = now_ns();
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&conns_mu);
    if ((c = find_conn(db)) != NULL) {
        if (c->last_error != NULL && strcmp(c->last_error, why) == 0 &&
            now - c->said_at < GUARD_SAY_AGAIN_MS * 1000000LL) {
            c->unsaid++;
            say = false;
        } else {
            unsaid = c->unsaid;
            c->unsaid = 0;
            c->said_at = now;
        }
        sqlite3_free(c->last_error);
        c->last_error = sqlite3_mprintf("%s", why);
        c->last_error_at = now;
    }
    pthread_mutex_unlock(&conns_mu);
    if (say && unsaid > 0) {
        fprintf(stderr,
                "raftsql: %s (and %u more refusals of this connection "
                "within %d ms before, not written)\n",
                why, unsaid, GUARD_SAY_AGAIN_MS);
    } else if (say) {
        fprintf(stderr, "raftsql: %s\n", why);
    }
    return SQLITE_DENY;
}

char *ext_guard_last_error(sqlite3 *db)
{
    struct guard_conn *c;
    char busy[400];
    int64_t busy_at = wal_lock_busy_reason(db, busy, sizeof busy);
    char *why = NULL;

    pthread_mutex_lock(&conns_mu);
    if ((c = find_conn(db)) != NULL) {
        if (busy_at != 0 &&
            (c->last_error == NULL || busy_at > c->last_error_at)) {
            why = sqlite3_mprintf("%s", busy);
        } else if (c->last_error != NULL) {
            why = sqlite3_mprintf("%s", c->last_error);
        }
    }
    pthread_mutex_unlock(&conns_mu);
    return why;
}

/* settings_set sets on @db the cluster-wide settings of @mask (bit i:
 * sql_setting_name(i) ON) that differ from @have, and returns the
 * settings now set. foreign_keys goes through sqlite3_db_config (no
 * statement runs: safe from any thread holding @db's mutex); the others
 * need a PRAGMA statement on @db, run only when @own (the thread using
 * @db, with no statement of the host in its way): from another thread a
 * statement would reset the host's last error and run its hooks. */
static unsigned settings_set(sqlite3 *db, unsigned have, unsigned mask,
                             bool own)
{
    for (int i = 0; i < sql_setting_count(); i++) {
        unsigned bit = 1u << i;
        if ((have & bit) == (mask & bit) || (i != 0 && !own)) {
            continue;
        }
        syncing = true;
        if (sql_setting_apply(db, i, (mask & bit) != 0) == SQLITE_OK) {
            have = (have & ~bit) | (mask & bit);
        }
        syncing = false;
    }
    return have;
}

/* settings_now returns the settings of @db as it has them: foreign_keys
 * read from the connection, the others SQLite's defaults (OFF), which
 * a connection has unless its host set them. */
static unsigned settings_now(sqlite3 *db)
{
    int fk = 0;
    (void)sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_FKEY, -1, &fk);
    return fk ? 1u : 0u;
}

void ext_guard_settings_sync(sqlite3 *db)
{
    const char *file = sqlite3_db_filename(db, "main");
    unsigned mask, have;
    struct guard_conn *c;
    if (file == NULL || file[0] == '\0' || !attach_sock_settings(file, &mask)) {
        return;
    }
    /* Asked before conns_mu is taken: sqlite3_db_config takes @db's
     * mutex, and a connection closing holds that one when its destructor
     * (untrack) takes conns_mu. */
    have = settings_now(db);
    pthread_mutex_lock(&conns_mu);
    c = find_conn(db);
    if (c != NULL) {
        have = c->settings;
    }
    if (c != NULL && c->apply) {
        pthread_mutex_unlock(&conns_mu);
        return;
    }
    pthread_mutex_unlock(&conns_mu);
    have = settings_set(db, have, mask, true);
    pthread_mutex_lock(&conns_mu);
    if ((c = find_conn(db)) != NULL) {
        c->settings = have;
    }
    pthread_mutex_unlock(&conns_mu);
}

bool ext_guard_settings_push(const char *file, unsigned mask)
{
    bool left = false;
    pthread_mutex_lock(&conns_mu);
    for (struct guard_conn *c = conns; c != NULL; c = c->next) {
        sqlite3_mutex *m;
        if (c->apply || c->file == NULL || strcmp(c->file, file) != 0 ||
            (c->settings & 1u) == (mask & 1u)) {
            continue;
        }
        m = sqlite3_db_mutex(c->db);
        if (m == NULL) {
            continue; /* no other thread may touch it */
        }
        if (sqlite3_mutex_try(m) != SQLITE_OK) {
            left = true; /* busy: the next period tries again */
            continue;
        }
        c->settings = settings_set(c->db, c->settings, mask & 1u, false);
        sqlite3_mutex_leave(m);
    }
    pthread_mutex_unlock(&conns_mu);
    return left;
}

/* tracker_call answers a call of the tracker from SQL: an error. */
static void tracker_call(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    (void)argv;
    sqlite3_result_error(ctx, EXT__GUARD_TRACKER ": internal to raftsql", -1);
}

/* apply_connection says whether @db is an apply connection (which the
 * guard meets where raftsql runs on every connection: in a process that
 * loaded raftsql.so, or whose program registers it so). */
static bool apply_connection(sqlite3 *db)
{
    sqlite3_vfs *vfs = NULL;
    return sqlite3_file_control(db, "main", SQLITE_FCNTL_VFS_POINTER, &vfs) ==
               SQLITE_OK &&
           vfs != NULL && sql_is_apply_vfs(vfs->zName);
}

/* on_node_event expires the statements of guarded connections when a node
 * of the process turned stale, and retries the busy ones at its ticks
 * (events.h). The publishing node's thread. */
static void on_node_event(int event, void *arg)
{
    (void)arg;
    if (event == EXT_EVENT_STALE) {
        ext_guard_expire_all();
    } else if (event == EXT_EVENT_TICK) {
        ext_guard_expire_retry();
    }
}

static pthread_once_t subscribed = PTHREAD_ONCE_INIT;

/* subscribe makes the guard a subscriber of node events, once. */
static void subscribe(void)
{
    /* The table holds EXT_EVENTS_MAX: the guard is its first. */
    (void)ext_events_subscribe(on_node_event, NULL);
    /* And the wrapped WAL locks' read transactions begin through it. */
    wal_lock_set_read_begin(ext_guard_read_begin);
}

/* track makes sure @db is in the list. Returns SQLITE_OK, SQLITE_NOMEM or
 * the error of creating the tracker (nothing tracked then). Thread: the
 * one using @db. */
static int track(sqlite3 *db)
{
    struct guard_conn *c;
    const char *file = sqlite3_db_filename(db, "main");
    /* Asked before conns_mu is taken: both take @db's mutex, and a
     * connection closing holds that one when its destructor (untrack)
     * takes conns_mu. Invariant: no SQLite call on a connection while
     * conns_mu is held, but sqlite3_mutex_try. */
    unsigned settings = settings_now(db);
    bool apply = apply_connection(db);
    pthread_once(&subscribed, subscribe);
    pthread_mutex_lock(&conns_mu);
    c = find_conn(db);
    if (c != NULL) {
        pthread_mutex_unlock(&conns_mu);
        return SQLITE_OK;
    }
    c = sqlite3_malloc(sizeof *c);
    if (c == NULL) {
        pthread_mutex_unlock(&conns_mu);
        return SQLITE_NOMEM;
    }
    *c = (struct guard_conn){.db = db,
                             .next = conns,
                             .settings = settings,
                             .apply = apply,
                             .gate = {.db = db}};
    if (file != NULL && file[0] != '\0') {
        c->file = sqlite3_mprintf("%s", file); /* NULL: unwatched */
    }
    if (conns != NULL) {
        conns->prev = c;
    }
    conns = c;
    pthread_mutex_unlock(&conns_mu);
    /* Statements prepared while reads were allowed are expired when the
     * guard starts refusing them (a node of another process goes stale,
     * or stops); the cluster-wide settings follow the node's. */
    refusal_watch_add(c->file);
    ext_guard_settings_sync(db);
    /* On failure SQLite runs the destructor: @c is forgotten. */
    return sqlite3_create_function_v2(db, EXT__GUARD_TRACKER, 0,
                                      SQLITE_UTF8 | SQLITE_DIRECTONLY, c,
                                      tracker_call, NULL, NULL, untrack);
}

/* expire marks every statement of @db expired, holding its mutex: a
 * flag of no consequence (TRIGGER_EQP, EXPLAIN QUERY PLAN's view of
 * triggers) is turned and turned back, and SQLite expires the statements
 * when a flag changes. The authorizer stays as it is: re-setting it
 * would replace one set directly (the apply connection's, or a host's
 * own). Nothing on a SQLite older than 3.22 (no such flag). */
static void expire(sqlite3 *db)
{
    int on = 0;
    if (sqlite3_db_config(db, SQLITE_DBCONFIG_TRIGGER_EQP, -1, &on) ==
        SQLITE_OK) {
        sqlite3_db_config(db, SQLITE_DBCONFIG_TRIGGER_EQP, !on, (int *)NULL);
        sqlite3_db_config(db, SQLITE_DBCONFIG_TRIGGER_EQP, on, (int *)NULL);
    }
}

void ext_guard_expire_all(void)
{
    /* Before any statement is expired: a prepare that follows an expiry
     * asks anew (read_refusal). */
    atomic_fetch_add(&read_gen, 1);
    pthread_mutex_lock(&conns_mu);
    for (struct guard_conn *c = conns; c != NULL; c = c->next) {
        if (!c->pending) {
            c->pending = true;
            atomic_fetch_add(&n_pending, 1);
        }
    }
    pthread_mutex_unlock(&conns_mu);
    ext_guard_expire_retry();
}

bool ext_guard_expire_retry(void)
{
    bool left;
    if (atomic_load(&n_pending) == 0) {
        return false;
    }
    pthread_mutex_lock(&conns_mu);
    for (struct guard_conn *c = conns; c != NULL; c = c->next) {
        sqlite3_mutex *m;
        if (!c->pending) {
            continue;
        }
        m = sqlite3_db_mutex(c->db);
        if (m != NULL) {
            if (sqlite3_mutex_try(m) != SQLITE_OK) {
                continue; /* busy: the next tick tries again */
            }
            /* The next step of each statement reprepares it, and the
             * guard decides again. */
            expire(c->db);
            sqlite3_mutex_leave(m);
        }
        /* Without a mutex (SQLITE_OPEN_NOMUTEX) no other thread may
         * touch the connection: its statements are not expired. */
        c->pending = false;
        atomic_fetch_sub(&n_pending, 1);
    }
    left = atomic_load(&n_pending) > 0;
    pthread_mutex_unlock(&conns_mu);
    return left;
}

int ext_guard_read_begin(sqlite3 *db)
{
    struct guard_conn *c;
    const char *file;
    char why[600];
    bool pending;

    if (atomic_load(&n_pending) == 0) {
        return SQLITE_OK;
    }
    pthread_mutex_lock(&conns_mu);
    c = find_conn(db);
    pending = c != NULL && c->pending;
    pthread_mutex_unlock(&conns_mu);
    file = sqlite3_db_filename(db, "main");
    if (!pending || file == NULL || file[0] == '\0' ||
        read_refusal(file, why, sizeof why) == 0) {
        /* Reads of the file are allowed: the statement reads on (expired
         * now, it would end in SQLITE_ABORT_ROLLBACK as it opens its
         * table), and the connection stays marked for the next retry or
         * read. */
        return SQLITE_OK;
    }
    /* Every statement of @db, this one too, which the error makes
     * prepared anew before it opens its table. */
    expire(db);
    pthread_mutex_lock(&conns_mu);
    if (c->pending) {
        c->pending = false;
        atomic_fetch_sub(&n_pending, 1);
    }
    pthread_mutex_unlock(&conns_mu);
    return SQLITE_SCHEMA;
}

/* defend turns SQLITE_DBCONFIG_DEFENSIVE on for @db: SQLite then refuses
 * the statements' direct writes to shadow tables (module_write leaves
 * those to it), writable_schema and the other ways plain SQL has to
 * corrupt a database file. */
static void defend(sqlite3 *db)
{
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);
}

int ext_guard_install(sqlite3 *db)
{
    int rc = track(db);
    if (rc != SQLITE_OK) {
        return rc;
    }
    defend(db);
    sqlite3_commit_hook(db, guard_commit, db);
    return sqlite3_set_authorizer(db, guard, db);
}

/* The name of the function that holds a connection's host authorizer
 * (SQLite frees it with the connection: 3.40 has no client data). */
#define EXT__GUARD_HOLDER "raftsql_host_authorizer"

/* A host's authorizer chained behind the guard on one connection. */
struct guard_host {
    sqlite3 *db;          /* the connection */
    ext_guard_host_cb cb; /* the host's authorizer */
    void *arg;            /* its first argument */
};

/* chained is the guard, then the host's authorizer: the guard's DENY wins,
 * otherwise the host's answer stands. Statements prepared for a check
 * (guard_check_begin) are raftsql's own and are not shown to the host. */
static int chained(void *arg, int action, const char *a1, const char *a2,
                   const char *db_name, const char *trigger)
{
    struct guard_host *h = arg;
    int rc = guard(h->db, action, a1, a2, db_name, trigger);
    if (rc != SQLITE_OK || guard_check_current() != NULL || syncing ||
        probing) {
        return rc;
    }
    return h->cb(h->arg, action, a1, a2, db_name, trigger);
}

/* holder_call answers a call of the holder from SQL: it does nothing. */
static void holder_call(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    (void)argv;
    sqlite3_result_error(ctx, "raftsql_host_authorizer: internal to raftsql",
                         -1);
}

int ext_guard_set_host(sqlite3 *db, ext_guard_host_cb cb, void *arg)
{
    struct guard_host *h = NULL;
    int rc;

    if (cb != NULL) {
        h = sqlite3_malloc(sizeof *h);
        if (h == NULL) {
            return SQLITE_NOMEM;
        }
        *h = (struct guard_host){.db = db, .cb = cb, .arg = arg};
    }
    /* The holder first: it frees the previous host's state, which the
     * authorizer stops using below, before any statement is prepared;
     * when it fails (SQLITE_BUSY while statements run), SQLite freed @h
     * and nothing changed. */
    rc = sqlite3_create_function_v2(db, EXT__GUARD_HOLDER, 0,
                                    SQLITE_UTF8 | SQLITE_DIRECTONLY, h,
                                    h != NULL ? holder_call : NULL, NULL, NULL,
                                    h != NULL ? sqlite3_free : NULL);
    if (rc != SQLITE_OK) {
        return rc;
    }
    /* A connection the guard was never installed on is tracked now (out
     * of memory: its statements are not expired). */
    (void)track(db);
    defend(db);
    sqlite3_commit_hook(db, guard_commit, db);
    return h != NULL ? sqlite3_set_authorizer(db, chained, h)
                     : sqlite3_set_authorizer(db, guard, db);
}
