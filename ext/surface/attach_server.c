/* The attach server (attach_server.h): an accept thread and one thread
 * per client connection, each running the calls it receives on a SQLite
 * connection of its own to the node's database file, so that a caller in
 * another process gets exactly what this process's callers get.
 *
 * Happy path: a client connects -> the acceptor checks its credentials
 * (SO_PEERCRED: our uid, root, or a member of socket_group) and starts
 * its thread -> the thread reads a call frame, runs "SELECT fn(?...)" on
 * its connection (the node's own SQL functions), answers with the value
 * (and raft_last_insert_rowid()), and reads the next frame until the
 * client closes. A lease request (attach_codec.h: a plain SQL write of
 * the client's process) runs on that thread too, straight on the node
 * (ext_node_lease_acquire, _commit, _release: they block on this thread,
 * never on the node's loop); the lease lives as long as the connection,
 * which may then stay silent for as long as the writer's process lives
 * (its transaction open: the node ends the lease itself at
 * lease_timeout_ms, and the COMMIT that comes later is answered that the
 * lease expired): its close (the writer's process died) ends the lease
 * at once.
 * Failure modes: a refused peer gets an answer naming why, and the node
 * a WARN line; one more client than socket_max_clients gets "busy" (its
 * caller tries again until its busy timeout, attach_client.c);
 * a malformed or oversized frame, or one that does not come within
 * EXT__ATTACH_IDLE_MS, closes that connection only; at stop, calls in
 * progress end (the node is shutting down) and answer first. A pointer
 * file that cannot be written at start for want of space (a full disk)
 * does not stop the node: the accept thread writes it again every
 * EXT__ATTACH_POINTER_RETRY_MS until it succeeds (one WARN line, one
 * INFO line then); meanwhile other processes find no node. */

#include "attach_server.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdbool.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sqlite3ext.h>
#include <xxhash.h>

#include "../../raft/err.h"
#include "../raftsql.h"
#include "../runtime/attach_sock.h"
#include "attach_codec.h"
#include "attach_conn.h"

SQLITE_EXTENSION_INIT3

/* How long a client connection may stay silent between calls, ms (a
 * lease's: lease_timeout_ms more, then as long as its process lives). */
#define EXT__ATTACH_IDLE_MS 10000

/* idle_ms returns EXT__ATTACH_IDLE_MS; in test builds
 * RAFTSQL_TEST_ATTACH_IDLE_MS when set, so that a test sees a silent
 * connection's fate in well under 10 s. */
static int idle_ms(void)
{
#ifdef RAFTSQL_TEST_FAULTS
    const char *ms = getenv("RAFTSQL_TEST_ATTACH_IDLE_MS");
    if (ms != NULL && atoi(ms) > 0) {
        return atoi(ms);
    }
#endif
    return EXT__ATTACH_IDLE_MS;
}

/* peer_lives says whether process @pid (SO_PEERCRED's, 0 when unknown)
 * still exists (it may be stopped). */
static bool peer_lives(long pid)
{
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* How often the accept thread tries again to write a pointer file that
 * a full disk refused, ms. */
#define EXT__ATTACH_POINTER_RETRY_MS 200

struct client {
    struct ext_attach_server *srv; /* its server */
    int fd;                        /* the connection */
    pthread_t thread;              /* serving it */
    uint64_t lease;                /* the write lease granted over it, 0
                                      (its thread only) */
    long pid;                      /* its peer's process (SO_PEERCRED) */
    bool done;                     /* the thread ended (srv->mu) */
    struct client *next;           /* in srv->clients (srv->mu) */
};

struct ext_attach_server {
    char db_path[4096];                  /* the node's database file */
    char sock_path[EXT_ATTACH_PATH_MAX]; /* where it listens */
    long gid;                            /* socket_group's gid, -1 */
    char group[64];                      /* its name, "" */
    struct ext_node_log *log;            /* the node's log */
    struct ext_node *node;               /* the node (outlives the server) */
    unsigned lease_timeout_ms;           /* lease_timeout_ms= */
    ext_attach_conn_cb conn_init;        /* sets up a new connection */
    int listen_fd;                       /* the listening socket */
    int wake[2];                         /* stops the acceptor */
    pthread_t acceptor;                  /* the accept thread */
    unsigned max_clients;                /* socket_max_clients= */
    struct ext_attach_pointer pointer;   /* what the pointer file says */
    bool pointer_warned;                 /* a retry's other failure was
                                            logged (accept thread) */
    pthread_mutex_t mu;                  /* guards the fields below */
    bool pointer_due;                    /* not written yet (mu) */
    bool stopping;                       /* attach_server_stop runs (mu) */
    struct client *clients;              /* served connections (mu) */
    unsigned n_clients;                  /* live ones among them (mu) */
    sqlite3 *idle[EXT_ATTACH_IDLE_MAX];  /* connections to reuse (mu) */
    unsigned n_idle;                     /* entries used in idle (mu) */
};

/* remote_holder returns the lease holder token the node knows host
 * connection @token of process @pid by: a hash of the two with bit 62
 * set (EXT_ATTACH_HOLDER_BIT), so none is ever a token of a host
 * connection of this process (lease_client_holder_new), and the same at
 * each of that connection's asks, each over a connection of its own: a
 * busy handler's retry is known as one (lease_patience_ms, node.h's
 * RAFT_BUSY), as for a writer of this process. */
static uint64_t remote_holder(long pid, uint64_t token)
{
    uint64_t key[2] = {(uint64_t)pid, token};

    return EXT_ATTACH_HOLDER_BIT |
           (XXH3_64bits(key, sizeof key) & (EXT_ATTACH_HOLDER_BIT - 1));
}

/* The client this thread serves, NULL on any other thread. */
static _Thread_local struct client *serving;

/* Set by attach_server_stop on the client thread it was called from: that
 * thread then owns its client and frees it. */
static _Thread_local bool orphaned;

bool attach_server_serving(void)
{
    return serving != NULL;
}

/* The functions a client may call, and the table it may read. */
static const char *const callable[] = {
    "raft_exec",    "raft_status",    "raft_leader",     "raft_stop",
    "raft_add",     "raft_remove",    "raft_promote",    "raft_demote",
    "raft_update",  "raft_transfer",  "raft_tls_reload", "raft_cluster_id",
    "raft_repair",  "raft_members",   "raft_verify",     "raft_query",
    "raft_exec_id", "raft_query_id",  "raft_backup",     "raft_load_sql",
    "raft_barrier", "raft_lease_end", "raft_metrics",
};

/* is_write_with_opts says whether @fn is one of func_query.c's writes,
 * which set raft_last_insert_rowid() like raft_exec. */
static bool is_write_with_opts(const char *fn)
{
    return strcmp(fn, "raft_query") == 0 || strcmp(fn, "raft_exec_id") == 0 ||
           strcmp(fn, "raft_query_id") == 0;
}

static bool is_callable(const char *fn)
{
    for (size_t i = 0; i < sizeof callable / sizeof callable[0]; i++) {
        if (strcmp(fn, callable[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* send_answer encodes @a and writes it to @fd; false when that fails. */
static bool send_answer(int fd, const struct ext_attach_answer *a)
{
    char *text = NULL;
    size_t len = 0;
    int rc = attach_codec_answer_encode(a, &text, &len);
    if (rc == 0) {
        rc = attach_conn_frame_write(fd, text, len);
    }
    free(text);
    return rc == 0;
}

/* send_error answers @fd with error @code and text @msg. */
static void send_error(int fd, int code, const char *msg)
{
    struct ext_attach_answer a;
    memset(&a, 0, sizeof a);
    a.code = code;
    snprintf(a.errmsg, sizeof a.errmsg, "%s", msg);
    (void)send_answer(fd, &a);
}

/* conn_take returns a connection to the database: an idle one, or a new
 * one set up by the server's conn_init (raftsql's functions and guard);
 * NULL with @a's error set. */
static sqlite3 *conn_take(struct ext_attach_server *s,
                          struct ext_attach_answer *a)
{
    sqlite3 *db = NULL;
    int rc;
    pthread_mutex_lock(&s->mu);
    if (s->n_idle > 0) {
        db = s->idle[--s->n_idle];
    }
    pthread_mutex_unlock(&s->mu);
    if (db != NULL) {
        return db;
    }
    rc = sqlite3_open_v2(s->db_path, &db, SQLITE_OPEN_READWRITE, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        rc = s->conn_init(db);
    }
    if (rc != SQLITE_OK) {
        a->code = rc;
        snprintf(a->errmsg, sizeof a->errmsg,
                 "raftsql: the node cannot open %.700s: %.200s", s->db_path,
                 db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

/* conn_give puts @db back for reuse, or closes it. */
static void conn_give(struct ext_attach_server *s, sqlite3 *db)
{
    if (db == NULL) {
        return;
    }
    if (!orphaned) {
        pthread_mutex_lock(&s->mu);
        if (s->n_idle < EXT_ATTACH_IDLE_MAX) {
            s->idle[s->n_idle++] = db;
            db = NULL;
        }
        pthread_mutex_unlock(&s->mu);
    }
    sqlite3_close(db);
}

/* column_value reads column @i of @stmt into @v (pointing into @stmt). */
static void column_value(sqlite3_stmt *stmt, int i, struct sql_value *v)
{
    memset(v, 0, sizeof *v);
    switch (sqlite3_column_type(stmt, i)) {
        case SQLITE_INTEGER:
            v->type = SQL_INTEGER;
            v->integer = sqlite3_column_int64(stmt, i);
            break;
        case SQLITE_FLOAT:
            v->type = SQL_FLOAT;
            v->real = sqlite3_column_double(stmt, i);
            break;
        case SQLITE_TEXT:
            v->type = SQL_TEXT;
            v->bytes.p = sqlite3_column_text(stmt, i);
            v->bytes.len = (size_t)sqlite3_column_bytes(stmt, i);
            break;
        case SQLITE_BLOB:
            v->type = SQL_BLOB;
            v->bytes.p = sqlite3_column_blob(stmt, i);
            v->bytes.len = (size_t)sqlite3_column_bytes(stmt, i);
            break;
        default:
            v->type = SQL_NULL;
            break;
    }
}

/* bind_value binds @v to parameter @i of @stmt. */
static int bind_value(sqlite3_stmt *stmt, int i, const struct sql_value *v)
{
    switch (v->type) {
        case SQL_INTEGER:
            return sqlite3_bind_int64(stmt, i, v->integer);
        case SQL_FLOAT:
            return sqlite3_bind_double(stmt, i, v->real);
        case SQL_TEXT:
            return sqlite3_bind_text64(stmt, i, v->bytes.p, v->bytes.len,
                                       SQLITE_STATIC, SQLITE_UTF8);
        case SQL_BLOB:
            return sqlite3_bind_blob64(stmt, i, v->bytes.p, v->bytes.len,
                                       SQLITE_STATIC);
        default:
            return sqlite3_bind_null(stmt, i);
    }
}

/* query_text builds the statement of a call of @fn with @n arguments. */
static char *query_text(const char *fn, unsigned n)
{
    size_t cap = strlen(fn) + 160 + (size_t)n * 8;
    char *q = malloc(cap);
    size_t at;
    if (q == NULL) {
        return NULL;
    }
    if (strcmp(fn, "raft_members") == 0) {
        /* every column, in the table's order (members.c reads them so) */
        snprintf(q, cap, "SELECT * FROM raft_members");
        return q;
    }
    at = (size_t)snprintf(q, cap, "SELECT %s(", fn);
    for (unsigned i = 0; i < n; i++) {
        at += (size_t)snprintf(q + at, cap - at, "%s?%u", i > 0 ? "," : "",
                               i + 1);
    }
    snprintf(q + at, cap - at, ")");
    return q;
}

/* rowid_after reads raft_last_insert_rowid() of @db. */
static int64_t rowid_after(sqlite3 *db)
{
    sqlite3_stmt *stmt = NULL;
    int64_t rowid = 0;
    if (sqlite3_prepare_v2(db, "SELECT raft_last_insert_rowid()", -1, &stmt,
                           NULL) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
        rowid = sqlite3_column_int64(stmt, 0);
    }
    sqlite3_finalize(stmt);
    return rowid;
}

/* run_call runs @fn(@args) on @db and encodes its answer into *@out
 * (malloc'd) and *@out_len: 0, or RAFT_NOMEM. */
static int run_call(sqlite3 *db, const char *fn, const struct sql_value *args,
                    unsigned n, char **out, size_t *out_len)
{
    struct ext_attach_answer a;
    struct sql_value cells[EXT_ATTACH_CELLS_MAX];
    sqlite3_stmt *stmt = NULL;
    char *q = query_text(fn, n);
    bool table = strcmp(fn, "raft_members") == 0;
    unsigned n_cells = 0, n_cols = 0;
    int rc;

    memset(&a, 0, sizeof a);
    rc = q != NULL ? sqlite3_prepare_v2(db, q, -1, &stmt, NULL) : SQLITE_NOMEM;
    if (rc == SQLITE_OK) {
        n_cols = (unsigned)sqlite3_column_count(stmt); /* every column */
    }
    for (unsigned i = 0; rc == SQLITE_OK && !table && i < n; i++) {
        rc = bind_value(stmt, (int)i + 1, &args[i]);
    }
    while (rc == SQLITE_OK || rc == SQLITE_ROW) {
        rc = sqlite3_step(stmt);
        if (rc != SQLITE_ROW) {
            break;
        }
        if (!table) {
            column_value(stmt, 0, &a.value);
            a.ok = true;
            break;
        }
        if (n_cells + n_cols > EXT_ATTACH_CELLS_MAX) {
            rc = SQLITE_DONE;
            break;
        }
        for (unsigned i = 0; i < n_cols; i++) {
            column_value(stmt, (int)i, &cells[n_cells++]);
        }
        /* Text and blobs of earlier rows must survive the next step:
         * copy them before it (at most RAFT_MAX_SERVERS short rows). */
        for (unsigned i = n_cells - n_cols; i < n_cells; i++) {
            if (cells[i].type == SQL_TEXT) {
                char *copy = strndup(cells[i].bytes.p, cells[i].bytes.len);
                cells[i].bytes.p = copy;
                if (copy == NULL) {
                    cells[i].type = SQL_NULL;
                }
            }
        }
    }
    if (table && rc == SQLITE_DONE) {
        a.ok = true;
        a.cells = cells;
        a.n_cols = n_cols;
        a.n_rows = n_cols > 0 ? n_cells / n_cols : 0;
    } else if (!a.ok) {
        a.code = q == NULL ? SQLITE_NOMEM : sqlite3_extended_errcode(db);
        snprintf(a.errmsg, sizeof a.errmsg, "%s",
                 q == NULL ? "out of memory" : sqlite3_errmsg(db));
    }
    if (a.ok && (strcmp(fn, "raft_exec") == 0 || is_write_with_opts(fn))) {
        a.rowid = rowid_after(db);
    }
    if (attach_codec_answer_encode(&a, out, out_len) != 0) {
        *out = NULL;
    }
    for (unsigned i = 0; i < n_cells; i++) {
        if (cells[i].type == SQL_TEXT) {
            free((void *)cells[i].bytes.p);
        }
    }
    sqlite3_finalize(stmt);
    free(q);
    return *out != NULL ? 0 : RAFT_NOMEM;
}

/* is_lease says whether @fn is a lease request (attach_codec.h). */
static bool is_lease(const char *fn)
{
    return strcmp(fn, EXT_ATTACH_LEASE_ACQUIRE) == 0 ||
           strcmp(fn, EXT_ATTACH_LEASE_COMMIT) == 0 ||
           strcmp(fn, EXT_ATTACH_LEASE_RELEASE) == 0;
}

/* serve_lease runs lease request @fn(@args) of @c on the node and writes
 * its answer into @a (the lease id for an acquire, else 0; an error: the
 * project's code and the node's words). Returns false, answering
 * nothing, when the arguments are not the request's (@why says so): a
 * malformed call. Client thread of @c. */
static bool serve_lease(struct client *c, const char *fn,
                        const struct sql_value *args, unsigned n,
                        struct ext_attach_answer *a, char *why, size_t why_len)
{
    struct ext_node *node = c->srv->node;
    bool commit = strcmp(fn, EXT_ATTACH_LEASE_COMMIT) == 0;
    bool release = strcmp(fn, EXT_ATTACH_LEASE_RELEASE) == 0;
    const struct sql_wal_marks *marks = NULL;
    struct sql_wal_marks m;
    uint64_t id;
    int rc = 0;

    memset(a, 0, sizeof *a);
    /* A release's WAL marks are optional, and so are a commit's header
     * read at the lock and an acquire's flags (attach_codec.h). */
    if (n < 1 || n > (commit ? 3u : 2u) || (commit && n < 2) ||
        args[0].type != SQL_INTEGER ||
        (n >= 2 &&
         args[1].type != (commit || release ? SQL_BLOB : SQL_INTEGER)) ||
        (n == 3 && args[2].type != SQL_BLOB)) {
        snprintf(why, why_len, "%s with arguments not its own", fn);
        return false;
    }
    id = (uint64_t)args[0].integer;
    a->value.type = SQL_INTEGER;
    if (strcmp(fn, EXT_ATTACH_LEASE_ACQUIRE) == 0) {
        /* The client's token is unique in its process only: the node
         * sees one of this process's, as for a holder of its own. */
        if (c->lease != 0) {
            rc = RAFT_INVALID;
            snprintf(a->errmsg, sizeof a->errmsg,
                     "not applied: this connection holds write lease %llu "
                     "already",
                     (unsigned long long)c->lease);
        } else {
            uint64_t holder = remote_holder(c->pid, id);
            unsigned flags =
                n == 2 ? (unsigned)args[1].integer & EXT_LEASE_ONE_TRY : 0;
            rc = ext_node_lease_acquire(node, holder, flags, &id, a->errmsg,
                                        sizeof a->errmsg);
        }
        if (rc == 0) {
            c->lease = id;
            a->value.integer = (int64_t)id;
        }
    } else if (commit) {
        if (id == 0 || id != c->lease) {
            rc = RAFT_INVALID;
            snprintf(a->errmsg, sizeof a->errmsg,
                     "not applied: write lease %llu is not this "
                     "connection's",
                     (unsigned long long)id);
        } else {
            const unsigned char *locked =
                n == 3 && args[2].bytes.len == SQL_WAL_HDR_LEN ? args[2].bytes.p
                                                               : NULL;
            rc = ext_node_lease_commit(node, id, args[1].bytes.p,
                                       args[1].bytes.len, NULL, locked,
                                       a->errmsg, sizeof a->errmsg);
        }
    } else if (id != 0 && id == c->lease) {
        if (n == 2 && args[1].bytes.len == sizeof m) {
            memcpy(&m, args[1].bytes.p, sizeof m);
            marks = &m;
        }
        ext_node_lease_release(node, id, marks);
        c->lease = 0;
    }
    a->ok = rc == 0;
    a->code = rc;
    if (rc == 0) {
        a->errmsg[0] = '\0';
    }
    return true;
}

/* serve_frames answers calls on @c's connection until it closes. */
static void serve_frames(struct client *c)
{
    struct ext_attach_server *s = c->srv;
    for (;;) {
        sqlite3 *db;
        char *frame = NULL, fn[EXT_ATTACH_FN_MAX], why[256];
        struct sql_value *args = NULL;
        unsigned n = 0;
        size_t len = 0;
        bool ok;
        /* A lease's connection is silent while its transaction runs. */
        int wait_ms =
            c->lease != 0 ? (int)s->lease_timeout_ms + idle_ms() : idle_ms();
        int rc = attach_conn_frame_read(c->fd, wait_ms, NULL, &frame, &len);
        if (rc == RAFT_TIMEOUT && c->lease != 0 && peer_lives(c->pid)) {
            /* Its transaction is open past lease_timeout_ms, which ended
             * the lease on the node: kept, so that its COMMIT is
             * answered "the lease expired", not taken for a node that
             * stopped (closed at lease_timeout_ms + 10 s, it was: a
             * new-user trial, a shell left in BEGIN for 42 s). */
            continue;
        }
        if (rc != 0) {
            if (rc != RAFT_NOCONN && rc != RAFT_TIMEOUT) {
                node_log_line(s->log, RAFT_LOG_WARN,
                              "attach: a client's frame: %s; closing that "
                              "connection",
                              raft_strerror(rc));
            }
            break;
        }
        rc = attach_codec_call_decode(frame, len, fn, &args, &n, why,
                                      sizeof why);
        free(frame);
        if (rc == 0 && is_lease(fn)) {
            struct ext_attach_answer a;
            if (serve_lease(c, fn, args, n, &a, why, sizeof why)) {
                attach_codec_values_free(args, n);
                if (!send_answer(c->fd, &a) || orphaned) {
                    break;
                }
                continue;
            }
            rc = RAFT_PROTO;
        } else if (rc == 0 && !is_callable(fn)) {
            snprintf(why, sizeof why, "%s is no raftsql function it serves",
                     fn);
            rc = RAFT_PROTO;
        }
        if (rc != 0) {
            node_log_line(s->log, RAFT_LOG_WARN,
                          "attach: a malformed call (%s); closing that "
                          "connection",
                          why);
            attach_codec_values_free(args, n);
            break;
        }
        {
            struct ext_attach_answer a;
            memset(&a, 0, sizeof a);
            db = conn_take(s, &a);
            if (db == NULL) {
                (void)send_answer(c->fd, &a);
                attach_codec_values_free(args, n);
                break;
            }
        }
        frame = NULL;
        rc = run_call(db, fn, args, n, &frame, &len);
        attach_codec_values_free(args, n);
        /* Back to the pool before the answer goes: the caller's next call
         * comes on a new connection, whose thread then takes it. */
        conn_give(s, db);
        ok = rc == 0 && attach_conn_frame_write(c->fd, frame, len) == 0;
        free(frame);
        if (!ok || orphaned) {
            break;
        }
    }
}

static void *client_main(void *arg)
{
    struct client *c = arg;
    serving = c;
    serve_frames(c);
    if (c->lease != 0 && !orphaned) {
        /* Closed holding the lease (its process died): ended at once, so
         * the next writer gets it now, not at lease_timeout_ms. */
        ext_node_lease_release(c->srv->node, c->lease, NULL);
        c->lease = 0;
    }
    close(c->fd);
    serving = NULL;
    if (orphaned) {
        /* attach_server_stop ran on this thread: the server is gone. */
        pthread_detach(pthread_self());
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&c->srv->mu);
    c->done = true;
    c->srv->n_clients--;
    pthread_mutex_unlock(&c->srv->mu);
    return NULL;
}

/* in_group says whether user @uid (primary group @gid) is in group @want. */
static bool in_group(uid_t uid, gid_t gid, gid_t want)
{
    struct passwd pw, *found = NULL;
    char buf[4096];
    gid_t groups[256];
    int n = (int)(sizeof groups / sizeof groups[0]);
    if (gid == want) {
        return true;
    }
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) != 0 || found == NULL ||
        getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) < 0) {
        return false;
    }
    for (int i = 0; i < n; i++) {
        if (groups[i] == want) {
            return true;
        }
    }
    return false;
}

/* admit checks the credentials of @fd's peer; false (after answering
 * why, and logging it) when it may not call; true with *@pid its
 * process. */
static bool admit(struct ext_attach_server *s, int fd, long *pid)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    char msg[768];
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
        node_log_line(s->log, RAFT_LOG_WARN,
                      "attach: SO_PEERCRED: %s; closing that connection",
                      strerror(errno));
        return false;
    }
    *pid = (long)cr.pid;
    if (cr.uid == geteuid() || cr.uid == 0 ||
        (s->gid >= 0 && in_group(cr.uid, cr.gid, (gid_t)s->gid))) {
        return true;
    }
    if (s->gid >= 0) {
        snprintf(msg, sizeof msg,
                 "not applied: refused: the node of %.500s (pid %ld) lets in "
                 "uid %ld, root and the members of group %s; uid %ld is none "
                 "of them",
                 s->db_path, (long)getpid(), (long)geteuid(), s->group,
                 (long)cr.uid);
    } else {
        snprintf(msg, sizeof msg,
                 "not applied: refused: the node of %.500s (pid %ld) lets in "
                 "uid %ld and root only; uid %ld is neither (socket_group= in "
                 "raft_start lets a group in)",
                 s->db_path, (long)getpid(), (long)geteuid(), (long)cr.uid);
    }
    node_log_line(s->log, RAFT_LOG_WARN,
                  "attach: refused a connection of uid %ld gid %ld pid %ld: "
                  "not the node's user, root, nor in socket_group",
                  (long)cr.uid, (long)cr.gid, (long)cr.pid);
    send_error(fd, RAFTSQL_NO_NODE, msg);
    return false;
}

/* reap joins the client threads that ended. */
static void reap(struct ext_attach_server *s)
{
    for (;;) {
        struct client **p, *dead = NULL;
        pthread_mutex_lock(&s->mu);
        for (p = &s->clients; *p != NULL; p = &(*p)->next) {
            if ((*p)->done) {
                dead = *p;
                *p = dead->next;
                break;
            }
        }
        pthread_mutex_unlock(&s->mu);
        if (dead == NULL) {
            return;
        }
        pthread_join(dead->thread, NULL);
        free(dead);
    }
}

/* accept_one accepts a connection on @s and serves it on a thread. */
static void accept_one(struct ext_attach_server *s)
{
    struct client *c;
    long pid = 0;
    bool full;
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        return;
    }
    if (!admit(s, fd, &pid)) {
        close(fd);
        return;
    }
    pthread_mutex_lock(&s->mu);
    full = s->n_clients >= s->max_clients;
    pthread_mutex_unlock(&s->mu);
    c = full ? NULL : calloc(1, sizeof *c);
    if (c == NULL) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "not applied: busy: the node serves as many connections of "
                 "other processes as it takes (socket_max_clients=%u); retry",
                 s->max_clients);
        send_error(fd, RAFTSQL_BUSY, msg);
        close(fd);
        if (full) {
            /* DEBUG: a caller over the limit is refused every few ms
             * while it waits for its turn (attach_client.c). */
            node_log_line(s->log, RAFT_LOG_DEBUG,
                          "attach: busy: refused a connection over "
                          "socket_max_clients=%u (its caller tries again "
                          "until its busy timeout)",
                          s->max_clients);
        }
        return;
    }
    c->srv = s;
    c->fd = fd;
    c->pid = pid;
    pthread_mutex_lock(&s->mu);
    if (pthread_create(&c->thread, NULL, client_main, c) != 0) {
        pthread_mutex_unlock(&s->mu);
        send_error(fd, RAFTSQL_BUSY, "not applied: busy: no thread; retry");
        close(fd);
        free(c);
        return;
    }
    c->next = s->clients;
    s->clients = c;
    s->n_clients++;
    pthread_mutex_unlock(&s->mu);
}

/* pointer_retry writes the pointer file that a full disk refused at
 * start, unless the server stops; returns whether it is still due.
 * Accept thread. */
static bool pointer_retry(struct ext_attach_server *s)
{
    char err[4400];
    bool due;
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    if (s->pointer_due && !s->stopping) {
        /* Under the lock: attach_server_stop removes the file after. */
        rc =
            attach_sock_pointer_write(s->db_path, &s->pointer, err, sizeof err);
        s->pointer_due = rc != 0;
    }
    due = s->pointer_due && !s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (rc == 0 && !due) {
        node_log_line(s->log, RAFT_LOG_INFO,
                      "attach: pointer file written: other processes reach "
                      "this node at %s",
                      s->sock_path);
    } else if (rc != 0 && rc != RAFT_NOSPACE && !s->pointer_warned) {
        /* Another failure than a full disk: it may last, said once. */
        s->pointer_warned = true;
        node_log_line(s->log, RAFT_LOG_WARN,
                      "attach: cannot write the pointer file: %s (trying "
                      "again)",
                      err);
    }
    return due;
}

static void *accept_main(void *arg)
{
    struct ext_attach_server *s = arg;
    bool due;
    pthread_mutex_lock(&s->mu);
    due = s->pointer_due;
    pthread_mutex_unlock(&s->mu);
    for (;;) {
        struct pollfd pfd[2] = {{.fd = s->listen_fd, .events = POLLIN},
                                {.fd = s->wake[0], .events = POLLIN}};
        int r = poll(pfd, 2, due ? EXT__ATTACH_POINTER_RETRY_MS : 1000);
        if (due) {
            due = pointer_retry(s);
        }
        reap(s);
        if (r < 0 && errno != EINTR) {
            break;
        }
        if (r > 0 && pfd[1].revents != 0) {
            break;
        }
        if (r > 0 && (pfd[0].revents & POLLIN)) {
            accept_one(s);
        }
    }
    return NULL;
}

/* listen_at binds and listens on @s->sock_path with its mode and group. */
static int listen_at(struct ext_attach_server *s, char *errmsg, size_t len)
{
    struct sockaddr_un sa;
    struct stat st;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, s->sock_path, strlen(s->sock_path) + 1);
    /* A socket left there belongs to a node that is gone: the registry
     * refused to start if one answers (attach_sock_find). */
    if (lstat(s->sock_path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        unlink(s->sock_path);
    }
    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0 ||
        bind(s->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(errmsg, len, "attach socket %s: %s", s->sock_path,
                 strerror(errno));
        return RAFT_IOERR;
    }
    if ((s->gid >= 0 && chown(s->sock_path, (uid_t)-1, (gid_t)s->gid) != 0) ||
        chmod(s->sock_path, s->gid >= 0 ? 0660 : 0600) != 0 ||
        listen(s->listen_fd, SOMAXCONN) != 0) {
        snprintf(errmsg, len, "attach socket %s: %s", s->sock_path,
                 strerror(errno));
        unlink(s->sock_path);
        return RAFT_IOERR;
    }
    return 0;
}

int attach_server_start(const char *db_path, const struct ext_config *cfg,
                        struct ext_node *node, ext_attach_conn_cb conn_init,
                        struct ext_attach_server **out, char *errmsg,
                        size_t errmsg_len)
{
    struct ext_attach_server *s = calloc(1, sizeof *s);
    struct ext_attach_pointer *p;
    int rc;

    if (s == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    snprintf(s->db_path, sizeof s->db_path, "%s", db_path);
    s->gid = cfg->socket_gid;
    s->max_clients = cfg->socket_max_clients;
    snprintf(s->group, sizeof s->group, "%s", cfg->socket_group);
    s->log = ext_node_logger(node);
    s->node = node;
    s->lease_timeout_ms = cfg->lease_timeout_ms;
    s->conn_init = conn_init;
    s->listen_fd = -1;
    s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->mu, NULL);
    rc = attach_conn_path(db_path, cfg->dir,
                          s->gid >= 0 ? (gid_t)s->gid : (gid_t)-1, s->sock_path,
                          errmsg, errmsg_len);
    if (rc == 0) {
        rc = listen_at(s, errmsg, errmsg_len);
    }
    if (rc == 0 && pipe2(s->wake, O_CLOEXEC) != 0) {
        snprintf(errmsg, errmsg_len, "attach: pipe: %s", strerror(errno));
        rc = RAFT_IOERR;
    }
    if (rc == 0) {
        p = &s->pointer;
        p->pid = (long)getpid();
        snprintf(p->socket, sizeof p->socket, "%s", s->sock_path);
        p->timeout_ms = cfg->exec_timeout_ms;
        p->version = EXT_ATTACH_VERSION;
        rc = attach_sock_pointer_write(db_path, p, errmsg, errmsg_len);
        if (rc == RAFT_NOSPACE) {
            /* A full disk heals by itself: the node starts, and the
             * accept thread writes the file once space frees. */
            node_log_line(s->log, RAFT_LOG_WARN,
                          "attach: cannot write the pointer file: %s; other "
                          "processes find no node (RAFTSQL_NO_NODE) until "
                          "it is written, tried again every %d ms",
                          errmsg, EXT__ATTACH_POINTER_RETRY_MS);
            s->pointer_due = true;
            rc = 0;
        }
    }
    if (rc == 0 && pthread_create(&s->acceptor, NULL, accept_main, s) != 0) {
        snprintf(errmsg, errmsg_len, "attach: no thread");
        attach_sock_pointer_remove(db_path, (long)getpid());
        rc = RAFT_NOMEM;
    }
    if (rc != 0) {
        if (s->listen_fd >= 0) {
            close(s->listen_fd);
            unlink(s->sock_path);
        }
        if (s->wake[0] >= 0) {
            close(s->wake[0]);
            close(s->wake[1]);
        }
        pthread_mutex_destroy(&s->mu);
        free(s);
        return rc;
    }
    if (!s->pointer_due) {
        node_log_line(s->log, RAFT_LOG_INFO,
                      "attach: other processes reach this node at %s",
                      s->sock_path);
    }
    *out = s;
    return 0;
}

void attach_server_stop(struct ext_attach_server *s)
{
    if (s == NULL) {
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->stopping = true; /* the accept thread writes no pointer file now */
    pthread_mutex_unlock(&s->mu);
    attach_sock_pointer_remove(s->db_path, (long)getpid());
    (void)!write(s->wake[1], "x", 1);
    pthread_join(s->acceptor, NULL);
    close(s->listen_fd);
    unlink(s->sock_path);
    close(s->wake[0]);
    close(s->wake[1]);
    /* Calls in progress answer (the node is shutting down), then their
     * threads read end of file. */
    pthread_mutex_lock(&s->mu);
    for (struct client *c = s->clients; c != NULL; c = c->next) {
        shutdown(c->fd, SHUT_RD);
    }
    pthread_mutex_unlock(&s->mu);
    for (;;) {
        struct client *c;
        pthread_mutex_lock(&s->mu);
        c = s->clients;
        if (c != NULL) {
            s->clients = c->next;
        }
        pthread_mutex_unlock(&s->mu);
        if (c == NULL) {
            break;
        }
        if (c == serving) {
            orphaned = true; /* this very thread: it frees itself */
            continue;
        }
        pthread_join(c->thread, NULL);
        free(c);
    }
    while (s->n_idle > 0) {
        sqlite3_close(s->idle[--s->n_idle]);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}
