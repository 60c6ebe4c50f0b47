/* raftsql-node: the daemon that holds one raftsql node in the foreground
 * (for systemd or a terminal), configured from a file, logging to stderr.
 *
 * Usage: raftsql-node --config FILE [--check]
 *        raftsql-node --help | --version
 *
 * FILE holds raft_start()'s keys (docs/reference.md "Configuration keys"), one per
 * line as `key = value` or `key=value`, plus `database = PATH` (required),
 * the SQLite file this node replicates, and `metrics_listen = HOST:PORT`
 * (optional, off by default), where the daemon serves raft_metrics() over
 * HTTP (node_metrics.h; docs/metrics.md): on loopback, or off it only with
 * the node's certificate (then HTTPS) or insecure=on, else the file is
 * refused naming the key. `#` begins a comment at the start
 * of a line or after a blank; blank lines are skipped; a value wholly in
 * double quotes loses them ("/a/b" is /a/b); a UTF-8 byte order mark at
 * the start of FILE is skipped; no value but database's may hold a blank
 * (raft_start's keys are separated by them). log_level defaults to
 * info here (warn in raft_start), so the journal shows starts, stops and
 * leadership handed over.
 *
 * Happy path: read and check FILE, open the database with raftsql
 * registered on every connection (sqlite3_auto_extension), raft_start,
 * then wait for signals, which a dedicated thread takes with sigwait and
 * hands to the main thread over a pipe (no SQLite call in a handler):
 * SIGHUP re-reads the TLS files (raft_tls_reload()); SIGTERM or SIGINT
 * stops the node (raft_stop(): a leader hands its leadership to the most
 * caught-up voter first, waiting at most election_timeout_ms) and the
 * process exits 0. The main thread also asks every 200 ms whether the
 * node still runs (raftsql_node_state): stopped without a signal
 * (raft_stop() from another process through the node's socket, e.g. after
 * its raft_remove), the daemon says so and exits 0.
 * Failure modes: a node whose log write failed (an I/O error; it neither
 * writes, votes nor acknowledges any more) is stopped, and the daemon
 * exits 1 naming the error, for systemd's Restart=on-failure (a restart
 * repairs it); a bad command line or configuration exits 2 with one line
 * naming FILE:LINE and what is wrong (--check stops there either way); a
 * failed start (the database cannot be opened, the port is taken, the log
 * cannot be opened, or was lost while the database holds a cluster's
 * data) exits 1 with the reason; a second SIGTERM or SIGINT during the stop exits 1 at once,
 * without waiting for the transfer, as a crash would (the node restarts
 * from its log and database). */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ext/raftsql.h"
#include "node_metrics.h"

#define NODE__PROGRAM "raftsql-node"

#define NODE__EXIT_START 1  /* the node did not start, or a forced stop */
#define NODE__EXIT_FAILED 1 /* the node failed (its log cannot be written) */
#define NODE__EXIT_CONFIG 2 /* bad command line or configuration */

#ifndef RAFTSQL_VERSION
/* raftsql's version (the Makefile's VERSION: -DRAFTSQL_VERSION). */
#define RAFTSQL_VERSION "unknown"
#endif

#define NODE__POLL_MS 200 /* how often serve asks whether the node runs */

/* One key of the configuration file. */
struct key_line {
    char *key;     /* the key, malloc'd */
    char *value;   /* its value, malloc'd */
    unsigned line; /* its line number in the file, from 1 */
};

/* The configuration file, read. */
struct node_file {
    const char *path;      /* the file, as given */
    char *database;        /* database= , malloc'd; NULL until read */
    char *config;          /* raft_start's string: every other key */
    size_t config_len;     /* bytes used in config, without the NUL */
    size_t config_cap;     /* bytes allocated for config */
    struct key_line *keys; /* every key read, in file order */
    unsigned n_keys;       /* entries used in keys */
    bool has_log_level;    /* log_level= was given */
    char *metrics_listen;  /* metrics_listen=, malloc'd; NULL: off */
    bool metrics_tls;      /* serve the metrics with TLS (checked) */
};

/* The signal thread's state, shared with the main thread. */
struct node_signals {
    sigset_t set;         /* the signals taken with sigwait */
    int pipe_fd[2];       /* signal thread -> main thread: 'H' or 'T' */
    atomic_bool stopping; /* a stop was asked (SIGTERM/SIGINT seen) */
    atomic_bool done;     /* the main thread is done: SIGUSR1 ends it */
    pthread_t thread;     /* the thread running signal_main */
};

/* say writes one line of the daemon's own to stderr. */
static void say(const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", NODE__PROGRAM, line);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: %s --config FILE [--check]\n"
            "       %s --help | --version\n"
            "\n"
            "Runs one raftsql node in the foreground, logging to stderr.\n"
            "FILE holds raft_start()'s keys, one `key = value` a line (`#`\n"
            "comments), and `database = PATH`, the SQLite file replicated;\n"
            "`metrics_listen = HOST:PORT` serves Prometheus metrics there.\n"
            "  --check    check FILE and exit (0 when good, 2 when not)\n"
            "Signals: SIGTERM/SIGINT stop (a leader hands its leadership\n"
            "on first; a second one exits at once), SIGHUP reloads TLS.\n"
            "Exit status: 0 after a stop (also raft_stop() from another\n"
            "process), 1 for a failed start or a failed node, 2 for a bad\n"
            "configuration.\n",
            NODE__PROGRAM, NODE__PROGRAM);
}

static void file_free(struct node_file *f)
{
    for (unsigned i = 0; i < f->n_keys; i++) {
        free(f->keys[i].key);
        free(f->keys[i].value);
    }
    free(f->keys);
    free(f->database);
    free(f->metrics_listen);
    free(f->config);
}

/* file_error reports a configuration error at @line of @f (0: the file
 * as a whole) and returns NODE__EXIT_CONFIG. */
static int file_error(const struct node_file *f, unsigned line, const char *fmt,
                      ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0) {
        say("%s:%u: %s", f->path, line, msg);
    } else {
        say("%s: %s", f->path, msg);
    }
    return NODE__EXIT_CONFIG;
}

/* key_line_of returns the line of @f that gave @key (@len bytes), NULL
 * if none did. */
static const struct key_line *key_line_of(const struct node_file *f,
                                          const char *key, size_t len)
{
    for (unsigned i = 0; i < f->n_keys; i++) {
        if (strlen(f->keys[i].key) == len &&
            memcmp(f->keys[i].key, key, len) == 0) {
            return &f->keys[i];
        }
    }
    return NULL;
}

/* key_find returns the line of @key (@len bytes) in @f, 0 if not read. */
static unsigned key_find(const struct node_file *f, const char *key, size_t len)
{
    const struct key_line *k = key_line_of(f, key, len);
    return k != NULL ? k->line : 0;
}

/* key_value returns the value of @key in @f, NULL if not read. */
static const char *key_value(const struct node_file *f, const char *key)
{
    const struct key_line *k = key_line_of(f, key, strlen(key));
    return k != NULL ? k->value : NULL;
}

/* config_append adds " key=value" to @f's raft_start string. Returns
 * false when out of memory. */
static bool config_append(struct node_file *f, const char *key,
                          const char *value)
{
    size_t need = f->config_len + strlen(key) + strlen(value) + 3;
    if (need > f->config_cap) {
        size_t cap = need * 2;
        char *p = realloc(f->config, cap);
        if (p == NULL) {
            return false;
        }
        f->config = p;
        f->config_cap = cap;
    }
    f->config_len += (size_t)sprintf(f->config + f->config_len, "%s%s=%s",
                                     f->config_len > 0 ? " " : "", key, value);
    return true;
}

static char *trim(char *s)
{
    char *end;
    while (*s == ' ' || *s == '\t') {
        s++;
    }
    end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' ||
                       end[-1] == '\n')) {
        *--end = '\0';
    }
    return s;
}

/* strip_comment cuts @s at a `#` that begins it or follows a blank. */
static void strip_comment(char *s)
{
    for (char *p = s; *p != '\0'; p++) {
        if (*p == '#' && (p == s || p[-1] == ' ' || p[-1] == '\t')) {
            *p = '\0';
            return;
        }
    }
}

/* parse_line reads line @n, @text, into @f. Returns 0 or an exit
 * status. */
static int parse_line(struct node_file *f, unsigned n, char *text)
{
    char *eq, *key, *value;
    struct key_line *keys, *k;
    unsigned first;

    strip_comment(text);
    text = trim(text);
    if (text[0] == '\0') {
        return 0;
    }
    eq = strchr(text, '=');
    if (eq == NULL) {
        return file_error(f, n, "'%s' is not `key = value`", text);
    }
    *eq = '\0';
    key = trim(text);
    value = trim(eq + 1);
    if (key[0] == '\0') {
        return file_error(f, n, "a value without a key: `= %s`", value);
    }
    if (strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(key)) {
        return file_error(f, n,
                          "'%s' is not a key (keys are lower case letters, "
                          "digits and _)",
                          key);
    }
    if (value[0] == '"') { /* "a value" in double quotes: the quotes go */
        size_t len = strlen(value);
        if (len < 2 || value[len - 1] != '"') {
            return file_error(f, n,
                              "%s: the value %s opens a double quote but "
                              "does not end with one",
                              key, value);
        }
        value[len - 1] = '\0';
        value++;
    }
    if (value[0] == '\0') {
        return file_error(f, n, "%s: no value", key);
    }
    if ((strcmp(key, "cluster") == 0 || strcmp(key, "dial") == 0) &&
        strpbrk(value, " \t") != NULL) {
        return file_error(f, n,
                          "%s: a blank inside the list '%s': write its "
                          "entries separated by commas only, without blanks "
                          "(id@host:port,id@host:port)",
                          key, value);
    }
    if (strcmp(key, "database") != 0 && strpbrk(value, " \t") != NULL) {
        return file_error(f, n,
                          "%s: the value '%s' holds a blank, which no value "
                          "may (raft_start's keys are separated by blanks): "
                          "rename the path, or remove the blanks",
                          key, value);
    }
    first = key_find(f, key, strlen(key));
    if (first != 0) {
        return file_error(f, n, "%s: given twice (first on line %u)", key,
                          first);
    }
    keys = realloc(f->keys, (f->n_keys + 1) * sizeof *keys);
    if (keys == NULL) {
        return file_error(f, n, "out of memory");
    }
    f->keys = keys;
    k = &keys[f->n_keys++];
    k->key = strdup(key);
    k->value = strdup(value);
    k->line = n;
    if (k->key == NULL || k->value == NULL) {
        return file_error(f, n, "out of memory");
    }
    /* database= and metrics_listen= are the daemon's own; the rest goes
     * to raft_start. */
    if (strcmp(key, "database") == 0) {
        f->database = strdup(value);
        return f->database != NULL ? 0 : file_error(f, n, "out of memory");
    }
    if (strcmp(key, "metrics_listen") == 0) {
        f->metrics_listen = strdup(value);
        return f->metrics_listen != NULL ? 0
                                         : file_error(f, n, "out of memory");
    }
    if (strcmp(key, "log_level") == 0) {
        f->has_log_level = true;
    }
    return config_append(f, key, value) ? 0 : file_error(f, n, "out of memory");
}

/* check_config checks @f's raft_start string as raft_start will, and
 * names the line of the key an error is about. Returns 0 or an exit
 * status. */
static int check_config(struct node_file *f)
{
    char msg[1024];
    const char *key = msg;
    size_t key_len;
    unsigned line;

    if (raftsql_config_check(f->config != NULL ? f->config : "", f->database,
                             msg, sizeof msg) == SQLITE_OK) {
        return 0;
    }
    /* The message begins with its key: "unknown key 'k' ..." or
     * "key: ...". */
    if (strncmp(msg, "unknown key '", 13) == 0) {
        key = msg + 13;
        key_len = strcspn(key, "'");
    } else {
        key_len = strspn(msg, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (msg[key_len] != ':') {
            key_len = 0;
        }
    }
    line = key_len > 0 ? key_find(f, key, key_len) : 0;
    return file_error(f, line, "%s", msg);
}

/* file_read reads and checks the configuration file @f->path. Returns 0
 * or an exit status, having said why. */
static int file_read(struct node_file *f)
{
    FILE *in = fopen(f->path, "r");
    char *text = NULL;
    size_t cap = 0;
    unsigned n = 0;
    int rc = 0;

    if (in == NULL) {
        return file_error(f, 0, "cannot open: %s", strerror(errno));
    }
    while (rc == 0 && getline(&text, &cap, in) >= 0) {
        /* A UTF-8 byte order mark (some editors write one) is skipped. */
        bool bom = n == 0 && strncmp(text, "\xEF\xBB\xBF", 3) == 0;
        rc = parse_line(f, ++n, text + (bom ? 3 : 0));
    }
    if (rc == 0 && ferror(in)) {
        rc = file_error(f, 0, "cannot read: %s", strerror(errno));
    }
    free(text);
    fclose(in);
    if (rc != 0) {
        return rc;
    }
    if (f->database == NULL) {
        return file_error(f, 0,
                          "database: missing (the SQLite file this node "
                          "replicates, e.g. `database = "
                          "/var/lib/raftsql/app.db`)");
    }
    if (!f->has_log_level && !config_append(f, "log_level", "info")) {
        return file_error(f, 0, "out of memory");
    }
    rc = check_config(f);
    if (rc == 0 && f->metrics_listen != NULL) {
        char msg[1024];
        int tls = 0;
        if (raftsql_metrics_listen_check(f->config, f->database,
                                         f->metrics_listen, &tls, msg,
                                         sizeof msg) != SQLITE_OK) {
            return file_error(
                f, key_find(f, "metrics_listen", strlen("metrics_listen")),
                "%s", msg);
        }
        f->metrics_tls = tls != 0;
    }
    return rc;
}

/* signal_main takes the signals of @arg (a struct node_signals) with
 * sigwait until the main thread is done. The signal thread. */
static void *signal_main(void *arg)
{
    struct node_signals *s = arg;
    for (;;) {
        int sig;
        char c;
        if (sigwait(&s->set, &sig) != 0) {
            continue;
        }
        if (sig == SIGUSR1) {
            if (atomic_load(&s->done)) {
                return NULL;
            }
            continue;
        }
        if (sig == SIGHUP) {
            if (atomic_load(&s->stopping)) {
                say("SIGHUP ignored: the node is stopping");
                continue;
            }
            c = 'H';
        } else if (atomic_exchange(&s->stopping, true)) {
            say("%s again during the stop: exiting at once, without "
                "waiting for the leadership transfer (the node restarts "
                "from its log and database)",
                sig == SIGINT ? "SIGINT" : "SIGTERM");
            _exit(NODE__EXIT_START);
        } else {
            say("%s: stopping the node (a leader hands its leadership on "
                "first; send it again to exit at once)",
                sig == SIGINT ? "SIGINT" : "SIGTERM");
            c = 'T';
        }
        while (write(s->pipe_fd[1], &c, 1) < 0 && errno == EINTR) {
        }
    }
}

/* run_sql runs @sql, one statement returning one text value, on @db and
 * says its result prefixed with @what. Returns true on success. */
static bool run_sql(sqlite3 *db, const char *sql, const char *what)
{
    sqlite3_stmt *stmt = NULL;
    bool ok = false;
    int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(stmt);
    }
    if (rc == SQLITE_ROW) {
        const unsigned char *text = sqlite3_column_text(stmt, 0);
        say("%s: %s", what, text != NULL ? (const char *)text : "done");
        ok = true;
    } else {
        say("%s failed: %s", what, sqlite3_errmsg(db));
    }
    sqlite3_finalize(stmt);
    return ok;
}

/* start opens @f's database and starts its node on @out_db. Returns 0 or
 * NODE__EXIT_START, having said why. */
static int start(const struct node_file *f, sqlite3 **out_db)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_open_v2(f->database, &db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        say("cannot open the database %s: %s", f->database,
            db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        goto err;
    }
    sqlite3_busy_timeout(db, 5000);
    rc = sqlite3_prepare_v2(db, "SELECT raft_start(?)", -1, &stmt, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(stmt, 1, f->config, -1, SQLITE_STATIC);
        rc = sqlite3_step(stmt);
    }
    if (rc != SQLITE_ROW) {
        say("%s: cannot start: %s", f->database, sqlite3_errmsg(db));
        goto err;
    }
    say("%s: %s", f->database, (const char *)sqlite3_column_text(stmt, 0));
    sqlite3_finalize(stmt);
    *out_db = db;
    return 0;
err:
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return NODE__EXIT_START;
}

/* start_metrics serves raft_metrics() of the node of @f's database on
 * its metrics_listen (node_metrics.h) into *@out. Returns 0, or
 * NODE__EXIT_START having said why (the address taken, a certificate
 * unreadable). */
static int start_metrics(const struct node_file *f, struct node_metrics **out)
{
    char msg[1024];
    if (node_metrics_start(f->database, f->metrics_listen, f->metrics_tls,
                           key_value(f, "tls_cert"), key_value(f, "tls_key"),
                           out, msg, sizeof msg) == 0) {
        say("metrics_listen: serving raft_metrics() at %s://%s/metrics",
            f->metrics_tls ? "https" : "http", f->metrics_listen);
        return 0;
    }
    say("metrics_listen: %s; not starting the node", msg);
    return NODE__EXIT_START;
}

/* serve waits for the signal thread's requests on @s until a stop, then
 * stops @db's node. Between them, every NODE__POLL_MS, it asks whether the
 * node still runs: one stopped from elsewhere (raft_stop() from another
 * process, through the node's socket) ends the wait with 0, one whose log
 * failed is stopped and ends it with NODE__EXIT_FAILED, each said in a
 * line. Returns the exit status. */
static int serve(sqlite3 *db, struct node_signals *s)
{
    char why[512];
    int state = RAFTSQL_NODE_RUNNING;
    for (;;) {
        struct pollfd p = {.fd = s->pipe_fd[0], .events = POLLIN};
        char c;
        ssize_t r;
        int ready = poll(&p, 1, NODE__POLL_MS);
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        if (ready == 0) {
            if (raftsql_node_state(db, &state, why, sizeof why) != SQLITE_OK ||
                state == RAFTSQL_NODE_RUNNING) {
                continue;
            }
            break;
        }
        r = ready < 0 ? -1 : read(s->pipe_fd[0], &c, 1);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0 || c == 'T') {
            break;
        }
        run_sql(db, "SELECT raft_tls_reload()", "SIGHUP: raft_tls_reload()");
    }
    if (state == RAFTSQL_NODE_STOPPED) {
        say("the node was stopped without a signal (raft_stop() on another "
            "connection, e.g. of another process through the node's "
            "socket)");
        return 0;
    }
    if (state == RAFTSQL_NODE_FAILED) {
        say("the node failed and cannot go on until restarted: %s; stopping "
            "it, exiting %d (a restart repairs it)",
            why, NODE__EXIT_FAILED);
    }
    run_sql(db, "SELECT raft_stop()", "raft_stop()");
    return state == RAFTSQL_NODE_FAILED ? NODE__EXIT_FAILED : 0;
}

/* signals_start blocks SIGTERM, SIGINT, SIGHUP and SIGUSR1 in this thread
 * (and so in every thread started later: call it first) and starts the
 * thread that takes them. Returns false, having said why, on failure. */
static bool signals_start(struct node_signals *s)
{
    int rc;
    sigemptyset(&s->set);
    sigaddset(&s->set, SIGTERM);
    sigaddset(&s->set, SIGINT);
    sigaddset(&s->set, SIGHUP);
    sigaddset(&s->set, SIGUSR1);
    atomic_init(&s->stopping, false);
    atomic_init(&s->done, false);
    rc = pthread_sigmask(SIG_BLOCK, &s->set, NULL);
    if (rc != 0) {
        say("pthread_sigmask: %s", strerror(rc));
        return false;
    }
    if (pipe(s->pipe_fd) != 0) {
        say("pipe: %s", strerror(errno));
        return false;
    }
    rc = pthread_create(&s->thread, NULL, signal_main, s);
    if (rc != 0) {
        say("pthread_create: %s", strerror(rc));
        close(s->pipe_fd[0]);
        close(s->pipe_fd[1]);
        return false;
    }
    return true;
}

static void signals_stop(struct node_signals *s)
{
    atomic_store(&s->done, true);
    pthread_kill(s->thread, SIGUSR1);
    pthread_join(s->thread, NULL);
    close(s->pipe_fd[0]);
    close(s->pipe_fd[1]);
}

int main(int argc, char **argv)
{
    struct node_file f = {0};
    struct node_signals sigs;
    bool check = false;
    sqlite3 *db = NULL;
    struct node_metrics *metrics = NULL;
    int rc;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf(
                "%s %s; build id (SQLite source id, sent in the peer "
                "handshake): %s; SQLite %s\n",
                NODE__PROGRAM, RAFTSQL_VERSION, sqlite3_sourceid(),
                sqlite3_libversion());
            return 0;
        } else if (strcmp(argv[i], "--check") == 0) {
            check = true;
        } else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            f.path = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            f.path = argv[i] + 9;
        } else {
            say("unknown or incomplete argument '%s'", argv[i]);
            usage(stderr);
            return NODE__EXIT_CONFIG;
        }
    }
    if (f.path == NULL || f.path[0] == '\0') {
        say("--config FILE is required");
        usage(stderr);
        return NODE__EXIT_CONFIG;
    }
    rc = file_read(&f);
    if (rc != 0 || check) {
        if (rc == 0) {
            say("%s: good (database %s)", f.path, f.database);
        }
        file_free(&f);
        return rc;
    }
    /* Before any thread: the node's threads inherit the blocked mask. */
    if (!signals_start(&sigs)) {
        file_free(&f);
        return NODE__EXIT_START;
    }
    sqlite3_auto_extension((void (*)(void))sqlite3_raftsql_init);
    /* The metrics first (they answer 503 until the node runs): a port
     * taken then stops the daemon before its first start made the file a
     * replica that no node serves. */
    rc = f.metrics_listen != NULL ? start_metrics(&f, &metrics) : 0;
    if (rc == 0) {
        rc = start(&f, &db);
    }
    if (rc == 0) {
        rc = serve(db, &sigs);
        sqlite3_close(db);
        say("stopped; exiting %d", rc);
    }
    node_metrics_stop(metrics);
    signals_stop(&sigs);
    sqlite3_reset_auto_extension();
    file_free(&f);
    return rc;
}
