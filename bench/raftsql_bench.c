/* raftsql-bench: replicated kv writes through a 3-node raftsql cluster on
 * 127.0.0.1, the work of `dqlite-benchmark -w kvwrite` (issue 4, item 6).
 *
 * Node 1 runs in this process, with the client threads (as dqlite's driver
 * runs beside its node); nodes 2 and 3 are build/raftsql-node processes
 * driven over their stdin (JSON lines, tools/raftsql_node.c). Every client
 * has its own connection and loops on
 *     SELECT raft_exec('INSERT OR REPLACE INTO kv(k, v) VALUES(?, ?)', ?, ?)
 * with a fresh 32-byte random key and 1024-byte random value, and keeps the
 * latency of each request in an array allocated (and touched) before the
 * run. Output: a human line and a `RESULT name=... key=value...` line.
 *
 * Usage: raftsql-bench [--role leader|follower] [--clients N]
 *                      [--duration S] [--warmup S] [--name NAME]
 *                      [--node PATH] [--dir DIR] [--config 'k=v ...']
 *
 * Every node process it starts is stopped on every exit path: closed stdin
 * then SIGKILL after a grace period, and PR_SET_PDEATHSIG in case this
 * process dies first. A temporary work directory is removed at exit. */

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/latency.h"
#include "bench/xorshift.h"
#include "ext/raftsql.h"

#define N_NODES 3
#define KEY_LEN 32
#define VALUE_LEN 1024
#define MAX_ATTEMPTS 6       /* cluster starts tried to get the wanted role */
#define LEADER_WAIT_S 20     /* longest wait for an agreed leader */
#define LOSER_TIMEOUT_MS 3000 /* election timeout of the two other nodes */
#define SAMPLES_PER_S 100000 /* latency slots allocated per second of run */

static const char INSERT_SQL[] =
    "SELECT raft_exec('INSERT OR REPLACE INTO kv(k, v) VALUES(?, ?)', ?, ?)";

/* One node process (ids 2 and 3). */
struct bench_child {
    pid_t pid;  /* 0 when not running */
    int in_fd;  /* its stdin (we write requests) */
    FILE *out;  /* its stdout (we read replies) */
};

/* The options. */
struct bench_opts {
    bool leader;          /* node 1 (the clients' node) is the leader */
    int clients;          /* client threads */
    double duration;      /* measured seconds */
    double warmup;        /* seconds of load before measuring */
    char name[128];       /* RESULT name */
    char node[4096];      /* raftsql-node binary */
    char dir[1024];       /* work directory ("" = temporary) */
    char config[1024];    /* extra raft_start keys for every node */
    bool keep;            /* keep the work directory */
};

/* One client thread. */
struct bench_client {
    pthread_t thread;       /* the thread */
    int idx;                /* 0-based client number */
    const char *db_path;    /* node 1's database file */
    uint32_t *lat_us;       /* latencies in the window, microseconds */
    size_t cap;             /* slots in lat_us */
    size_t n_ok;            /* writes completed in the window */
    size_t n_err;           /* failed writes in the window */
    size_t n_dropped;       /* window writes without a free slot */
    char last_err[256];     /* last error message */
    int open_rc;            /* sqlite3 error opening/preparing, or 0 */
};

static struct bench_child g_children[N_NODES + 1];
static volatile sig_atomic_t g_signal;
static atomic_int g_phase; /* 0 warmup, 1 measuring, 2 stop */
static char g_tmpdir[1024];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_signal(int sig)
{
    g_signal = sig;
    atomic_store(&g_phase, 2);
}

/* sleep_s sleeps @s seconds in short steps; false if a signal came. */
static bool sleep_s(double s)
{
    double end = now_s() + s;
    while (!g_signal) {
        double left = end - now_s();
        struct timespec ts;
        if (left <= 0) {
            return true;
        }
        if (left > 0.05) {
            left = 0.05;
        }
        ts.tv_sec = 0;
        ts.tv_nsec = (long)(left * 1e9);
        nanosleep(&ts, NULL);
    }
    return false;
}

/* ---- node processes ---------------------------------------------------- */

static int child_spawn(struct bench_child *c, const char *bin,
                       const char *db, const char *log)
{
    int in[2], out[2];
    pid_t pid;

    if (pipe2(in, O_CLOEXEC) != 0) {
        return -1;
    }
    if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        return -1;
    }
    if (pid == 0) {
        int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1) {
            _exit(127);
        }
        dup2(in[0], 0);
        dup2(out[1], 1);
        if (lfd >= 0) {
            dup2(lfd, 2);
        }
        /* Out of our process group: a terminal's ^C or timeout(1)'s
         * group signal reaches only the bench, which stops the nodes in
         * order (a node killed under load would stall the clients). */
        setpgid(0, 0);
        execl(bin, bin, db, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c->pid = pid;
    c->in_fd = in[1];
    c->out = fdopen(out[0], "r");
    if (c->out == NULL) {
        close(out[0]);
        return -1;
    }
    return 0;
}

/* child_stop closes the node's stdin (it stops its node and exits), waits
 * up to @grace_s, then kills it. */
static void child_stop(struct bench_child *c, double grace_s)
{
    double end;
    int status;

    if (c->pid == 0) {
        return;
    }
    if (c->in_fd >= 0) {
        close(c->in_fd);
        c->in_fd = -1;
    }
    end = now_s() + grace_s;
    while (waitpid(c->pid, &status, WNOHANG) == 0) {
        if (now_s() > end) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &status, 0);
            break;
        }
        usleep(10000);
    }
    if (c->out != NULL) {
        fclose(c->out);
        c->out = NULL;
    }
    c->pid = 0;
}

static void children_stop(double grace_s)
{
    for (int i = 2; i <= N_NODES; i++) {
        child_stop(&g_children[i], grace_s);
    }
}

/* child_sql sends [sql, param] (param may be NULL) and returns the reply's
 * first value as a new JSON reference, or NULL on error (message in
 * @err). */
static json_t *child_sql(struct bench_child *c, const char *sql,
                         const char *param, char *err, size_t err_len)
{
    json_t *req = param ? json_pack("[s,s]", sql, param)
                        : json_pack("[s]", sql);
    char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
    char line[65536];
    json_t *reply = NULL, *rows, *v = NULL;
    json_error_t jerr;
    size_t len;

    json_decref(req);
    if (text == NULL) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    len = strlen(text);
    text[len] = '\n';
    if (write(c->in_fd, text, len + 1) != (ssize_t)(len + 1)) {
        snprintf(err, err_len, "write to node: %s", strerror(errno));
        free(text);
        return NULL;
    }
    free(text);
    if (fgets(line, sizeof line, c->out) == NULL) {
        snprintf(err, err_len, "node exited");
        return NULL;
    }
    reply = json_loads(line, 0, &jerr);
    if (reply == NULL) {
        snprintf(err, err_len, "bad reply: %s", jerr.text);
        return NULL;
    }
    if (json_object_get(reply, "error") != NULL) {
        snprintf(err, err_len, "%s",
                 json_string_value(json_object_get(reply, "error")));
        json_decref(reply);
        return NULL;
    }
    rows = json_object_get(reply, "rows");
    v = json_array_get(json_array_get(rows, 0), 0);
    if (v != NULL) {
        json_incref(v);
    } else {
        v = json_null();
    }
    json_decref(reply);
    return v;
}

/* ---- node 1 (in process) ----------------------------------------------- */

/* db_text runs @sql (one optional text parameter) on @db and copies the
 * first column of the first row into @out; 0 or a SQLite code. */
static int db_text(sqlite3 *db, const char *sql, const char *param,
                   char *out, size_t out_len)
{
    sqlite3_stmt *stmt;
    int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);
    if (rc != SQLITE_OK) {
        snprintf(out, out_len, "%s", sqlite3_errmsg(db));
        return rc;
    }
    if (param != NULL) {
        sqlite3_bind_text(stmt, 1, param, -1, SQLITE_TRANSIENT);
    }
    rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(stmt, 0);
        snprintf(out, out_len, "%s", t ? t : "");
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        out[0] = '\0';
        rc = SQLITE_OK;
    } else {
        snprintf(out, out_len, "%s", sqlite3_errmsg(db));
    }
    sqlite3_finalize(stmt);
    return rc;
}

/* node_leader returns node @id's known leader (0 if none, -1 on error). */
static long node_leader(sqlite3 *db1, int id)
{
    char buf[256];
    if (id == 1) {
        if (db_text(db1, "SELECT raft_leader()", NULL, buf, sizeof buf)) {
            return -1;
        }
        return buf[0] ? strtol(buf, NULL, 10) : 0;
    }
    json_t *v = child_sql(&g_children[id], "SELECT raft_leader()", NULL, buf,
                          sizeof buf);
    long r;
    if (v == NULL) {
        return -1;
    }
    r = json_is_integer(v) ? (long)json_integer_value(v) : 0;
    json_decref(v);
    return r;
}

/* node_status returns node @id's raft_status() parsed, or NULL. */
static json_t *node_status(sqlite3 *db1, int id)
{
    char err[256];
    json_t *v, *o;
    json_error_t jerr;

    if (id == 1) {
        static char buf[65536];
        if (db_text(db1, "SELECT raft_status()", NULL, buf, sizeof buf)) {
            return NULL;
        }
        return json_loads(buf, 0, &jerr);
    }
    v = child_sql(&g_children[id], "SELECT raft_status()", NULL, err,
                  sizeof err);
    if (v == NULL || !json_is_string(v)) {
        json_decref(v);
        return NULL;
    }
    o = json_loads(json_string_value(v), 0, &jerr);
    json_decref(v);
    return o;
}

/* ---- helpers ------------------------------------------------------------ */

static int free_ports(int n, int *ports)
{
    int fds[N_NODES];
    int rc = 0, i;
    for (i = 0; i < n; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET};
        socklen_t alen = sizeof a;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&a, sizeof a) ||
            getsockname(fds[i], (struct sockaddr *)&a, &alen)) {
            rc = -1;
            if (fds[i] >= 0) {
                close(fds[i]);
            }
            break;
        }
        ports[i] = ntohs(a.sin_port);
    }
    while (i-- > 0) {
        close(fds[i]);
    }
    return rc;
}

/* Resident memory of one process, kB (-1 when unknown). */
struct bench_mem {
    long rss;  /* VmRSS: all resident pages */
    long anon; /* RssAnon: heap and stacks, without mapped files (LMDB's
                * map and SQLite's files count in RSS only) */
};

static struct bench_mem mem_of(pid_t pid)
{
    struct bench_mem m = {-1, -1};
    char path[64], line[256];
    FILE *f;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return m;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            m.rss = strtol(line + 6, NULL, 10);
        } else if (strncmp(line, "RssAnon:", 8) == 0) {
            m.anon = strtol(line + 8, NULL, 10);
        }
    }
    fclose(f);
    return m;
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- clients ------------------------------------------------------------ */

static void *client_main(void *arg)
{
    struct bench_client *c = arg;
    unsigned char key[KEY_LEN], value[VALUE_LEN];
    uint64_t seed = 0x9e3779b97f4a7c15ULL * (uint64_t)(c->idx + 1) ^
                    (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    int rc;

    rc = sqlite3_open(c->db_path, &db);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        rc = sqlite3_prepare_v2(db, INSERT_SQL, -1, &stmt, NULL);
    }
    if (rc != SQLITE_OK) {
        snprintf(c->last_err, sizeof c->last_err, "%s", sqlite3_errmsg(db));
        c->open_rc = rc;
        goto out;
    }
    while (atomic_load(&g_phase) < 2) {
        double t0, t1;
        int phase;
        xorshift_fill(&seed, key, sizeof key);
        xorshift_fill(&seed, value, sizeof value);
        sqlite3_bind_blob(stmt, 1, key, sizeof key, SQLITE_STATIC);
        sqlite3_bind_blob(stmt, 2, value, sizeof value, SQLITE_STATIC);
        phase = atomic_load(&g_phase);
        t0 = now_s();
        rc = sqlite3_step(stmt);
        t1 = now_s();
        /* Count a request only if it started and ended in the window. */
        bool counted = phase == 1 && atomic_load(&g_phase) == 1;
        if (rc == SQLITE_ROW) {
            if (counted) {
                double us = (t1 - t0) * 1e6;
                if (c->n_ok < c->cap) {
                    c->lat_us[c->n_ok] =
                        us > 4e9 ? 4000000000u : (uint32_t)(us + 0.5);
                } else {
                    c->n_dropped++;
                }
                c->n_ok++;
            }
        } else {
            if (counted) {
                c->n_err++;
            }
            snprintf(c->last_err, sizeof c->last_err, "%s",
                     sqlite3_errmsg(db));
        }
        sqlite3_reset(stmt);
    }
out:
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return NULL;
}

/* ---- statistics from raft_status --------------------------------------- */

/* The cumulative counters of one status. */
struct bench_counters {
    bool has;          /* status carries the counters */
    double writes;     /* log_writes (fsynced LMDB transactions) */
    double entries_w;  /* entries written = entries_per_fsync * writes */
    double appends;    /* appends_sent */
    double entries_s;  /* entries sent = entries_per_append * appends */
};

static struct bench_counters counters_of(json_t *st)
{
    struct bench_counters c = {0};
    json_t *epf, *epa, *lw, *as;
    if (st == NULL) {
        return c;
    }
    epf = json_object_get(st, "entries_per_fsync");
    epa = json_object_get(st, "entries_per_append");
    lw = json_object_get(st, "log_writes");
    as = json_object_get(st, "appends_sent");
    if (!json_is_number(epf) || !json_is_number(epa)) {
        return c;
    }
    c.has = true;
    if (json_is_number(lw) && json_is_number(as)) {
        c.writes = json_number_value(lw);
        c.entries_w = json_number_value(epf) * c.writes;
        c.appends = json_number_value(as);
        c.entries_s = json_number_value(epa) * c.appends;
    } else {
        /* Only the means: report them as they are (cumulative). */
        c.writes = 1;
        c.entries_w = json_number_value(epf);
        c.appends = 1;
        c.entries_s = json_number_value(epa);
    }
    return c;
}

/* ---- the cluster -------------------------------------------------------- */

/* cluster_start starts nodes 1..3 in @dir, the node meant to lead @want
 * first with a head start, and waits until all agree on a leader, stored
 * in *out_leader. Returns 0, or -1 with a message on stderr. */
static int cluster_start(const struct bench_opts *o, const char *dir,
                         sqlite3 **out_db1, long *out_leader)
{
    int ports[N_NODES];
    char members[256], cfg[2048], db[1200], log[1200], buf[1024];
    int want = o->leader ? 1 : 2;
    int order[N_NODES] = {want, want == 1 ? 2 : 1, 3};
    sqlite3 *db1 = NULL;
    double deadline;

    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "raftsql-bench: mkdir %s: %s\n", dir,
                strerror(errno));
        return -1;
    }
    if (free_ports(N_NODES, ports) != 0) {
        fprintf(stderr, "raftsql-bench: no free port: %s\n", strerror(errno));
        return -1;
    }
    snprintf(members, sizeof members,
             "1@127.0.0.1:%d,2@127.0.0.1:%d,3@127.0.0.1:%d", ports[0],
             ports[1], ports[2]);
    for (int i = 2; i <= N_NODES; i++) {
        snprintf(db, sizeof db, "%s/node%d.db", dir, i);
        snprintf(log, sizeof log, "%s/node%d.log", dir, i);
        if (child_spawn(&g_children[i], o->node, db, log) != 0) {
            fprintf(stderr, "raftsql-bench: cannot start %s: %s\n", o->node,
                    strerror(errno));
            return -1;
        }
    }
    snprintf(db, sizeof db, "%s/node1.db", dir);
    if (sqlite3_open(db, &db1) != SQLITE_OK) {
        fprintf(stderr, "raftsql-bench: open %s: %s\n", db,
                sqlite3_errmsg(db1));
        sqlite3_close(db1);
        return -1;
    }
    sqlite3_busy_timeout(db1, 5000);
    for (int k = 0; k < N_NODES; k++) {
        int id = order[k];
        /* The node meant to lead keeps the default election timeout;
         * the two others wait longer, so it campaigns first. A head start
         * in time does not work: its first votes find no peer listening,
         * and the transport backs off. */
        if (id == want) {
            snprintf(cfg, sizeof cfg, "id=%d cluster=%s %s", id, members,
                     o->config);
        } else {
            snprintf(cfg, sizeof cfg,
                     "id=%d cluster=%s election_timeout_ms=%d %s", id,
                     members, LOSER_TIMEOUT_MS, o->config);
        }
        if (id == 1) {
            if (db_text(db1, "SELECT raft_start(?)", cfg, buf, sizeof buf)) {
                fprintf(stderr, "raftsql-bench: node 1: %s\n", buf);
                goto err;
            }
        } else {
            json_t *v = child_sql(&g_children[id], "SELECT raft_start(?)",
                                  cfg, buf, sizeof buf);
            if (v == NULL) {
                fprintf(stderr, "raftsql-bench: node %d: %s\n", id, buf);
                goto err;
            }
            json_decref(v);
        }
    }
    deadline = now_s() + LEADER_WAIT_S;
    while (now_s() < deadline && !g_signal) {
        long l[N_NODES + 1];
        bool agree = true;
        for (int id = 1; id <= N_NODES; id++) {
            l[id] = node_leader(db1, id);
            if (l[id] < 0) {
                fprintf(stderr, "raftsql-bench: node %d does not answer\n",
                        id);
                goto err;
            }
            agree = agree && l[id] > 0 && l[id] == l[1];
        }
        if (agree) {
            *out_db1 = db1;
            *out_leader = l[1];
            return 0;
        }
        sleep_s(0.02);
    }
    fprintf(stderr, "raftsql-bench: no agreed leader within %d s\n",
            LEADER_WAIT_S);
err:
    sqlite3_exec(db1, "SELECT raft_stop()", NULL, NULL, NULL);
    sqlite3_close(db1);
    return -1;
}

static void cluster_stop(sqlite3 *db1)
{
    children_stop(10.0);
    if (db1 != NULL) {
        sqlite3_exec(db1, "SELECT raft_stop()", NULL, NULL, NULL);
        sqlite3_close(db1);
    }
}

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [options]\n"
            "  --role leader|follower  the clients' node (node 1) leads or "
            "forwards (leader)\n"
            "  --clients N             client threads, one connection each "
            "(1)\n"
            "  --duration S            measured seconds (20)\n"
            "  --warmup S              seconds of load before measuring (1)\n"
            "  --name NAME             RESULT name "
            "(raftsql-<clients>-<role>)\n"
            "  --node PATH             raftsql-node binary (next to this "
            "one)\n"
            "  --dir DIR               work directory, kept (a temporary "
            "one, removed)\n"
            "  --config 'k=v ...'      extra raft_start keys for every node\n",
            argv0);
}

/* parse_opts fills @o from the command line: 0, 1 after --help, or -1
 * with a message on stderr. */
static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
    static const struct option longs[] = {
        {"role", required_argument, NULL, 'r'},
        {"clients", required_argument, NULL, 'c'},
        {"duration", required_argument, NULL, 'd'},
        {"warmup", required_argument, NULL, 'w'},
        {"name", required_argument, NULL, 'n'},
        {"node", required_argument, NULL, 'N'},
        {"dir", required_argument, NULL, 'D'},
        {"config", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char self[2048];
    ssize_t n;
    int ch;

    o->leader = true;
    o->clients = 1;
    o->duration = 20;
    o->warmup = 1;
    n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        char *slash;
        self[n] = '\0';
        slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
        }
        snprintf(o->node, sizeof o->node, "%s/raftsql-node", self);
    } else {
        snprintf(o->node, sizeof o->node, "build/raftsql-node");
    }
    while ((ch = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        char *end = NULL;
        switch (ch) {
            case 'r':
                if (strcmp(optarg, "leader") == 0) {
                    o->leader = true;
                } else if (strcmp(optarg, "follower") == 0) {
                    o->leader = false;
                } else {
                    fprintf(stderr, "--role: leader or follower\n");
                    return -1;
                }
                break;
            case 'c':
                o->clients = (int)strtol(optarg, &end, 10);
                if (*end || o->clients < 1 || o->clients > 4096) {
                    fprintf(stderr, "--clients: 1 to 4096\n");
                    return -1;
                }
                break;
            case 'd':
            case 'w': {
                double v = strtod(optarg, &end);
                if (*end || v < 0 || v > 86400 || (ch == 'd' && v <= 0)) {
                    fprintf(stderr, "--%s: a number of seconds\n",
                            ch == 'd' ? "duration" : "warmup");
                    return -1;
                }
                *(ch == 'd' ? &o->duration : &o->warmup) = v;
                break;
            }
            case 'n':
                snprintf(o->name, sizeof o->name, "%s", optarg);
                break;
            case 'N':
                snprintf(o->node, sizeof o->node, "%s", optarg);
                break;
            case 'D':
                snprintf(o->dir, sizeof o->dir, "%s", optarg);
                o->keep = true;
                break;
            case 'C':
                snprintf(o->config, sizeof o->config, "%s", optarg);
                break;
            case 'h':
                usage(stdout, argv[0]);
                return 1;
            default:
                usage(stderr, argv[0]);
                return -1;
        }
    }
    if (optind != argc) {
        usage(stderr, argv[0]);
        return -1;
    }
    if (o->name[0] == '\0') {
        snprintf(o->name, sizeof o->name, "raftsql-%d-%s", o->clients,
                 o->leader ? "leader" : "follower");
    }
    return 0;
}

static void fmt_ratio(char *out, size_t len, bool has, double num,
                      double den)
{
    if (!has || den <= 0) {
        snprintf(out, len, "n/a");
    } else {
        snprintf(out, len, "%.2f", num / den);
    }
}

int main(int argc, char **argv)
{
    struct bench_opts o = {0};
    struct bench_client *cl = NULL;
    sqlite3 *db1 = NULL;
    uint32_t *all = NULL;
    long leader = 0;
    struct bench_mem m_idle[N_NODES + 1], m0[N_NODES + 1], m1[N_NODES + 1];
    json_t *st0[N_NODES + 1] = {0}, *st1[N_NODES + 1] = {0};
    char base[1024], dir[1100], buf[1024];
    size_t cap, n_ok = 0, n_err = 0, n_drop = 0, n_all = 0;
    int rc = 1, attempt, started = 0;
    double t_start = 0, t_end = 0;
    struct sigaction sa;

    for (int i = 0; i <= N_NODES; i++) {
        g_children[i].in_fd = -1;
    }
    rc = parse_opts(argc, argv, &o);
    if (rc != 0) {
        return rc > 0 ? 0 : 2; /* 1: --help */
    }
    rc = 1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (access(o.node, X_OK) != 0) {
        fprintf(stderr, "raftsql-bench: %s: %s (build it: make)\n", o.node,
                strerror(errno));
        return 1;
    }
    if (o.dir[0] != '\0') {
        if (mkdir(o.dir, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "raftsql-bench: mkdir %s: %s\n", o.dir,
                    strerror(errno));
            return 1;
        }
        snprintf(base, sizeof base, "%s", o.dir);
    } else {
        snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/raftsql-bench-XXXXXX");
        if (mkdtemp(g_tmpdir) == NULL) {
            fprintf(stderr, "raftsql-bench: mkdtemp: %s\n", strerror(errno));
            return 1;
        }
        snprintf(base, sizeof base, "%s", g_tmpdir);
    }
    sqlite3_auto_extension((void (*)(void))sqlite3_raftsql_init);

    /* Start clusters until the clients' node has the wanted role. */
    for (attempt = 1; attempt <= MAX_ATTEMPTS && !g_signal; attempt++) {
        snprintf(dir, sizeof dir, "%s/run%d", base, attempt);
        if (cluster_start(&o, dir, &db1, &leader) != 0) {
            children_stop(2.0);
            goto out;
        }
        if ((leader == 1) == o.leader) {
            break;
        }
        fprintf(stderr,
                "raftsql-bench: node %ld won the election, want node 1 %s;"
                " restarting\n",
                leader, o.leader ? "leader" : "follower");
        cluster_stop(db1);
        db1 = NULL;
    }
    if (db1 == NULL) {
        fprintf(stderr, "raftsql-bench: node 1 never got role %s\n",
                o.leader ? "leader" : "follower");
        goto out;
    }
    if (db_text(db1,
                "SELECT raft_exec('CREATE TABLE IF NOT EXISTS "
                "kv(k BLOB PRIMARY KEY, v BLOB)')",
                NULL, buf, sizeof buf) != SQLITE_OK) {
        fprintf(stderr, "raftsql-bench: create kv: %s\n", buf);
        goto out;
    }

    /* Latency slots, touched now so that RSS counts them from the start. */
    cap = (size_t)(o.duration * SAMPLES_PER_S) / (size_t)o.clients + 1024;
    cl = calloc((size_t)o.clients, sizeof *cl);
    if (cl == NULL) {
        fprintf(stderr, "raftsql-bench: out of memory\n");
        goto out;
    }
    for (int i = 0; i < o.clients; i++) {
        cl[i].idx = i;
        cl[i].db_path = sqlite3_db_filename(db1, "main");
        cl[i].cap = cap;
        cl[i].lat_us = malloc(cap * sizeof(uint32_t));
        if (cl[i].lat_us == NULL) {
            fprintf(stderr, "raftsql-bench: out of memory for latencies\n");
            goto out;
        }
        /* Not zero: the compiler turns malloc + memset(0) into calloc,
         * whose fresh pages stay untouched (and out of RSS) until the
         * latencies land in them, which then looked like a leak of four
         * bytes per write. Only slots below n_ok are ever read. */
        memset(cl[i].lat_us, 0xff, cap * sizeof(uint32_t));
    }
    for (int id = 1; id <= N_NODES; id++) {
        m_idle[id] = mem_of(id == 1 ? getpid() : g_children[id].pid);
    }

    atomic_store(&g_phase, 0);
    for (started = 0; started < o.clients; started++) {
        if (pthread_create(&cl[started].thread, NULL, client_main,
                           &cl[started]) != 0) {
            fprintf(stderr, "raftsql-bench: pthread_create failed\n");
            atomic_store(&g_phase, 2);
            goto join;
        }
    }
    if (!sleep_s(o.warmup)) {
        goto join;
    }
    for (int id = 1; id <= N_NODES; id++) {
        st0[id] = node_status(db1, id);
        m0[id] = mem_of(id == 1 ? getpid() : g_children[id].pid);
    }
    t_start = now_s();
    atomic_store(&g_phase, 1);
    sleep_s(o.duration);
    atomic_store(&g_phase, 2);
    t_end = now_s();

join:
    for (int i = 0; i < started; i++) {
        pthread_join(cl[i].thread, NULL);
    }
    if (g_signal || started < o.clients) {
        fprintf(stderr, "raftsql-bench: interrupted\n");
        goto out;
    }
    for (int id = 1; id <= N_NODES; id++) {
        st1[id] = node_status(db1, id);
        m1[id] = mem_of(id == 1 ? getpid() : g_children[id].pid);
    }

    /* Latencies of all clients, sorted. */
    for (int i = 0; i < o.clients; i++) {
        if (cl[i].open_rc != 0) {
            fprintf(stderr, "raftsql-bench: client %d: %s\n", i,
                    cl[i].last_err);
            goto out;
        }
        n_ok += cl[i].n_ok;
        n_err += cl[i].n_err;
        n_drop += cl[i].n_dropped;
    }
    all = malloc((n_ok - n_drop + 1) * sizeof *all);
    if (all == NULL) {
        fprintf(stderr, "raftsql-bench: out of memory\n");
        goto out;
    }
    for (int i = 0; i < o.clients; i++) {
        size_t k = cl[i].n_ok - cl[i].n_dropped;
        memcpy(all + n_all, cl[i].lat_us, k * sizeof *all);
        n_all += k;
    }
    latency_sort(all, n_all);

    {
        double secs = t_end - t_start;
        double wps = (double)n_ok / secs;
        double p50 = latency_pct_ms(all, n_all, 0.50);
        double p99 = latency_pct_ms(all, n_all, 0.99);
        double p999 = latency_pct_ms(all, n_all, 0.999);
        long lid = 0;
        json_t *ls = st1[1] ? json_object_get(st1[1], "leader") : NULL;
        struct bench_counters a, b, fa = {0}, fb = {0};
        char epf[32], epa[32], epf_f[32];
        bool has;

        lid = json_is_integer(ls) ? (long)json_integer_value(ls) : 0;
        if (lid < 1 || lid > N_NODES) {
            lid = leader;
        }
        a = counters_of(st0[lid]);
        b = counters_of(st1[lid]);
        has = a.has && b.has;
        fmt_ratio(epf, sizeof epf, has, b.entries_w - a.entries_w,
                  b.writes - a.writes);
        fmt_ratio(epa, sizeof epa, has, b.entries_s - a.entries_s,
                  b.appends - a.appends);
        /* Followers' group commit: both followers' writes together. */
        for (int id = 1; id <= N_NODES; id++) {
            struct bench_counters x, y;
            if (id == lid) {
                continue;
            }
            x = counters_of(st0[id]);
            y = counters_of(st1[id]);
            has = has && x.has && y.has;
            fa.writes += x.writes;
            fa.entries_w += x.entries_w;
            fb.writes += y.writes;
            fb.entries_w += y.entries_w;
        }
        fmt_ratio(epf_f, sizeof epf_f, has, fb.entries_w - fa.entries_w,
                  fb.writes - fa.writes);
        if (lid != leader) {
            fprintf(stderr,
                    "raftsql-bench: warning: leader changed during the run "
                    "(%ld -> %ld)\n",
                    leader, lid);
        }
        if (n_err > 0) {
            for (int i = 0; i < o.clients; i++) {
                if (cl[i].last_err[0]) {
                    fprintf(stderr, "raftsql-bench: %zu errors, e.g.: %s\n",
                            n_err, cl[i].last_err);
                    break;
                }
            }
        }
        printf("%s: %.0f writes/s (%zu writes in %.1f s, %zu errors, "
               "%d clients on node 1, node %ld leader), latency ms p50 %.3f "
               "p99 %.3f p99.9 %.3f; entries per fsync %s (leader) %s "
               "(followers), per AppendEntries %s\n",
               o.name, wps, n_ok, secs, n_err, o.clients, lid, p50, p99,
               p999, epf, epf_f, epa);
        for (int id = 1; id <= N_NODES; id++) {
            printf("  node %d memory kB, before load / window start / end: "
                   "RSS %ld / %ld / %ld, anonymous %ld / %ld / %ld\n",
                   id, m_idle[id].rss, m0[id].rss, m1[id].rss,
                   m_idle[id].anon, m0[id].anon, m1[id].anon);
        }
        printf("  (node 1 includes the clients and %zu kB of latency "
               "slots)\n",
               (size_t)o.clients * cap * sizeof(uint32_t) / 1024);
        printf("RESULT name=%s writes_per_s=%.1f p50_ms=%.3f p99_ms=%.3f "
               "p999_ms=%.3f writes=%zu errors=%zu seconds=%.2f clients=%d "
               "role=%s leader=%ld entries_per_fsync=%s "
               "entries_per_fsync_followers=%s entries_per_append=%s "
               "rss1_kb_start=%ld rss1_kb_end=%ld rss2_kb_start=%ld "
               "rss2_kb_end=%ld rss3_kb_start=%ld rss3_kb_end=%ld "
               "anon1_kb_start=%ld anon1_kb_end=%ld anon2_kb_start=%ld "
               "anon2_kb_end=%ld anon3_kb_start=%ld anon3_kb_end=%ld\n",
               o.name, wps, p50, p99, p999, n_ok, n_err, secs, o.clients,
               o.leader ? "leader" : "follower", lid, epf, epf_f, epa,
               m0[1].rss, m1[1].rss, m0[2].rss, m1[2].rss, m0[3].rss,
               m1[3].rss, m0[1].anon, m1[1].anon, m0[2].anon, m1[2].anon,
               m0[3].anon, m1[3].anon);
        fflush(stdout);
        if (n_drop > 0) {
            fprintf(stderr,
                    "raftsql-bench: %zu latencies not kept (slots full)\n",
                    n_drop);
        }
        rc = n_ok > 0 ? 0 : 1;
    }

out:
    cluster_stop(db1);
    children_stop(2.0);
    for (int id = 0; id <= N_NODES; id++) {
        json_decref(st0[id]);
        json_decref(st1[id]);
    }
    if (cl != NULL) {
        for (int i = 0; i < o.clients; i++) {
            free(cl[i].lat_us);
        }
        free(cl);
    }
    free(all);
    sqlite3_reset_auto_extension();
    if (g_tmpdir[0] != '\0' && !o.keep) {
        remove_tree(g_tmpdir);
    }
    if (g_signal) {
        return 128 + g_signal;
    }
    return rc;
}
