/* raftsql-bench: replicated kv writes through a 3-node raftsql cluster on
 * 127.0.0.1, the work of `dqlite-benchmark -w kvwrite`.
 *
 * Node 1 runs in this process, with the client threads (as dqlite's driver
 * runs beside its node); nodes 2 and 3 are build/raftsql-testhost processes
 * driven over their stdin (JSON lines, tools/raftsql_testhost.c). Every client
 * has its own connection and loops on
 *     SELECT raft_exec('INSERT OR REPLACE INTO kv(k, v) VALUES(?, ?)', ?, ?)
 * with a fresh 32-byte random key and 1024-byte random value, and keeps the
 * latency of each request in an array allocated (and touched) before the
 * run. With --plain each client runs the INSERT itself, a plain autocommit
 * write (the write lease serialises them cluster-wide): SQLITE_BUSY after
 * the connection's busy timeout (5000 ms) is counted as an error, any other
 * error fails the run (no RESULT line, exit status 1). Output: a human line
 * and a `RESULT name=... key=value...` line, with the CPU seconds and disk
 * bytes per write of the three node processes in the window
 * (bench/proc_cost.h) and the client threads' share of the CPU. With
 * --process the client threads run in a process of their own, forked
 * before node 1 starts: another application on node 1's machine, whose
 * connections reach node 1 through the file's socket as any process that
 * loaded raftsql does (its CPU and disk bytes count with node 1's).
 *
 * Usage: raftsql-bench [--role leader|follower] [--clients N] [--plain]
 *                      [--process]
 *                      [--duration S] [--warmup S] [--name NAME]
 *                      [--node PATH] [--dir DIR] [--config 'k=v ...']
 *
 * Every node process it starts is stopped on every exit path: closed stdin
 * then SIGKILL after a grace period, and PR_SET_PDEATHSIG in case this
 * process dies first. A temporary work directory is removed at exit.
 *
 * This file holds the options, the clients and the report; cluster.c
 * starts and stops the cluster, child.c the node processes. */

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/cluster.h"
#include "bench/latency.h"
#include "bench/proc_cost.h"
#include "bench/timing.h"
#include "bench/xorshift.h"
#include "ext/raftsql.h"

#define KEY_LEN 32
#define VALUE_LEN 1024
#define MAX_ATTEMPTS 6       /* cluster starts tried to get the wanted role */
#define SAMPLES_PER_S 100000 /* latency slots allocated per second of run */
#define BUSY_TIMEOUT_MS 5000 /* every client connection's busy timeout */

static const char INSERT_SQL[] =
    "SELECT raft_exec('INSERT OR REPLACE INTO kv(k, v) VALUES(?, ?)', ?, ?)";
/* --plain: the same write as the application's own SQL. */
static const char PLAIN_SQL[] = "INSERT OR REPLACE INTO kv(k, v) VALUES(?, ?)";

/* The options. */
struct bench_opts {
    bool leader;       /* node 1 (the clients' node) is the leader */
    bool plain;        /* plain autocommit INSERTs, not raft_exec */
    bool process;      /* the client threads run in a process of their own
                        * (another application on node 1's machine) */
    int clients;       /* client threads */
    double duration;   /* measured seconds */
    double warmup;     /* seconds of load before measuring */
    char name[128];    /* RESULT name */
    char node[4096];   /* raftsql-testhost binary */
    char dir[1024];    /* work directory ("" = temporary) */
    char config[1024]; /* extra raft_start keys for every node */
    bool keep;         /* keep the work directory */
    double rtt_ms;     /* round trip added to every peer link (0: none) */
    char proxy[4096];  /* delay-proxy binary */
};

/* One client thread. */
struct bench_client {
    pthread_t thread;    /* the thread */
    int idx;             /* 0-based client number */
    const char *db_path; /* node 1's database file */
    bool plain;          /* plain INSERTs (bench_opts.plain) */
    uint32_t *lat_us;    /* latencies in the window, microseconds */
    size_t cap;          /* slots in lat_us */
    size_t n_ok;         /* writes completed in the window */
    size_t n_err;        /* failed writes in the window */
    size_t n_busy;       /* of n_err, SQLITE_BUSY (plain: after the timeout) */
    size_t n_other;      /* plain: 1 once an error but SQLITE_BUSY (warmup
                          * included) stopped this client */
    size_t n_dropped;    /* window writes without a free slot */
    char last_err[256];  /* last error message */
    char other_err[320]; /* plain: the first error but SQLITE_BUSY */
    int open_rc;         /* sqlite3 error opening/preparing, or 0 */
    double cpu_end_s;    /* this thread's CPU seconds when it ended */
};

static volatile sig_atomic_t g_signal;
static atomic_int g_phase; /* 0 warmup, 1 measuring, 2 stop */
static char g_tmpdir[1024];

static void on_signal(int sig)
{
    g_signal = sig;
    atomic_store(&g_phase, 2);
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
        sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
        rc = sqlite3_prepare_v2(db, c->plain ? PLAIN_SQL : INSERT_SQL, -1,
                                &stmt, NULL);
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
        t0 = timing_now_s();
        rc = sqlite3_step(stmt);
        t1 = timing_now_s();
        /* Count a request only if it started and ended in the window. */
        bool counted = phase == 1 && atomic_load(&g_phase) == 1;
        if (rc == (c->plain ? SQLITE_DONE : SQLITE_ROW)) {
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
            int ext = sqlite3_extended_errcode(db);
            bool busy = (ext & 0xff) == SQLITE_BUSY;
            if (counted) {
                c->n_err++;
                c->n_busy += busy;
            }
            snprintf(c->last_err, sizeof c->last_err, "%s", sqlite3_errmsg(db));
            if (c->plain && !busy) {
                /* The run has failed: this client stops here (a write
                 * refused at COMMIT also logs a line, once is enough). */
                c->n_other++;
                snprintf(c->other_err, sizeof c->other_err, "code %d: %s", ext,
                         sqlite3_errmsg(db));
                break;
            }
        }
        sqlite3_reset(stmt);
    }
out:
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    {
        struct timespec ts;
        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) {
            c->cpu_end_s = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
        }
    }
    return NULL;
}

/* ---- the clients in a process of their own (--process) ------------------ */

/* The client process (forked before node 1 starts, while this process has
 * one thread) runs the same client threads as another application on node
 * 1's machine would: its connections find node 1 through the file, as any
 * process that loaded raftsql does. It is told over a pipe, one line each:
 * "open <db path>" (start the clients: warmup), "measure" (the window
 * starts), "stop" (it ends); after "stop" it joins its clients and writes
 * back one struct proc_report and the kept latencies per client, then
 * exits. When the pipe closes early (this process died) it stops its
 * clients and exits without a report; PR_SET_PDEATHSIG kills it if that
 * is not soon enough. */

/* One client's figures, as the client process sends them back. */
struct proc_report {
    uint64_t n_ok, n_err, n_busy, n_other, n_dropped; /* bench_client's */
    int32_t open_rc;                                  /* bench_client's */
    char last_err[256];                               /* bench_client's */
    char other_err[320];                              /* bench_client's */
};

/* The client process, as this process sees it. */
struct client_proc {
    pid_t pid;  /* 0: none */
    int cmd_fd; /* its command pipe (we write) */
    int res_fd; /* its report pipe (we read) */
};

static struct client_proc g_client_proc = {0, -1, -1};

/* io_all writes (@writing) or reads all @len bytes of @buf to or from @fd:
 * 0, or -1 on an error (or, reading, an end of file first). */
static int io_all(int fd, void *buf, size_t len, bool writing)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* client_proc_main is the client process: @n clients of @cap latency
 * slots each, plain or not, told by @cmd_fd, reporting to @res_fd. Never
 * returns. */
static void client_proc_main(int n, size_t cap, bool plain, int cmd_fd,
                             int res_fd)
{
    struct bench_client *cl = calloc((size_t)n, sizeof *cl);
    FILE *in = fdopen(cmd_fd, "r");
    char line[4200], *path, *nl;
    int started = 0, code = 1;
    bool report = false;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (cl == NULL || in == NULL || fgets(line, sizeof line, in) == NULL ||
        strncmp(line, "open ", 5) != 0) {
        _exit(1);
    }
    path = line + 5;
    nl = strchr(path, '\n');
    if (nl != NULL) {
        *nl = '\0';
    }
    atomic_store(&g_phase, 0);
    for (started = 0; started < n; started++) {
        cl[started].idx = started;
        cl[started].db_path = path;
        cl[started].plain = plain;
        cl[started].cap = cap;
        cl[started].lat_us = malloc(cap * sizeof(uint32_t));
        if (cl[started].lat_us == NULL) {
            break;
        }
        memset(cl[started].lat_us, 0xff, cap * sizeof(uint32_t));
        if (pthread_create(&cl[started].thread, NULL, client_main,
                           &cl[started]) != 0) {
            free(cl[started].lat_us);
            break;
        }
    }
    if (started == n) {
        char cmd[64];
        while (fgets(cmd, sizeof cmd, in) != NULL) {
            if (strcmp(cmd, "measure\n") == 0) {
                atomic_store(&g_phase, 1);
            } else if (strcmp(cmd, "stop\n") == 0) {
                report = true;
                break;
            }
        }
    }
    atomic_store(&g_phase, 2);
    for (int i = 0; i < started; i++) {
        pthread_join(cl[i].thread, NULL);
    }
    if (report) {
        code = 0;
        for (int i = 0; i < n && code == 0; i++) {
            struct proc_report r = {
                .n_ok = cl[i].n_ok,
                .n_err = cl[i].n_err,
                .n_busy = cl[i].n_busy,
                .n_other = cl[i].n_other,
                .n_dropped = cl[i].n_dropped,
                .open_rc = cl[i].open_rc,
            };
            memcpy(r.last_err, cl[i].last_err, sizeof r.last_err);
            memcpy(r.other_err, cl[i].other_err, sizeof r.other_err);
            if (io_all(res_fd, &r, sizeof r, true) != 0 ||
                io_all(res_fd, cl[i].lat_us,
                       (cl[i].n_ok - cl[i].n_dropped) * sizeof(uint32_t),
                       true) != 0) {
                code = 1;
            }
        }
    }
    _exit(code);
}

/* client_proc_spawn forks the client process for @o (@cap latency slots
 * per client) into g_client_proc. Call it while this process has one
 * thread. Returns 0, or -1 with a message on stderr. Main thread. */
static int client_proc_spawn(const struct bench_opts *o, size_t cap)
{
    int cmd[2], res[2];
    pid_t pid;

    if (pipe2(cmd, O_CLOEXEC) != 0) {
        fprintf(stderr, "raftsql-bench: pipe: %s\n", strerror(errno));
        return -1;
    }
    if (pipe2(res, O_CLOEXEC) != 0) {
        fprintf(stderr, "raftsql-bench: pipe: %s\n", strerror(errno));
        close(cmd[0]);
        close(cmd[1]);
        return -1;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "raftsql-bench: fork: %s\n", strerror(errno));
        close(cmd[0]);
        close(cmd[1]);
        close(res[0]);
        close(res[1]);
        return -1;
    }
    if (pid == 0) {
        close(cmd[1]);
        close(res[0]);
        client_proc_main(o->clients, cap, o->plain, cmd[0], res[1]);
    }
    close(cmd[0]);
    close(res[1]);
    g_client_proc = (struct client_proc){pid, cmd[1], res[0]};
    return 0;
}

/* client_proc_tell writes the command line @cmd to the client process:
 * 0, or -1 (it has exited). Main thread. */
static int client_proc_tell(const char *cmd)
{
    return io_all(g_client_proc.cmd_fd, (char *)cmd, strlen(cmd), true);
}

/* client_proc_collect tells the client process to stop, and reads its
 * report into @cl (@n clients whose lat_us have the client process's
 * slots). Returns 0, or -1 with a message on stderr. Main thread. */
static int client_proc_collect(struct bench_client *cl, int n)
{
    if (client_proc_tell("stop\n") != 0) {
        fprintf(stderr, "raftsql-bench: the client process has exited\n");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        struct proc_report r;
        size_t k;
        if (io_all(g_client_proc.res_fd, &r, sizeof r, false) != 0) {
            fprintf(stderr,
                    "raftsql-bench: no report from the client "
                    "process\n");
            return -1;
        }
        k = (size_t)(r.n_ok - r.n_dropped);
        if (r.n_dropped > r.n_ok || k > cl[i].cap ||
            io_all(g_client_proc.res_fd, cl[i].lat_us, k * sizeof(uint32_t),
                   false) != 0) {
            fprintf(stderr,
                    "raftsql-bench: a bad report from the client "
                    "process\n");
            return -1;
        }
        cl[i].n_ok = (size_t)r.n_ok;
        cl[i].n_err = (size_t)r.n_err;
        cl[i].n_busy = (size_t)r.n_busy;
        cl[i].n_other = (size_t)r.n_other;
        cl[i].n_dropped = (size_t)r.n_dropped;
        cl[i].open_rc = r.open_rc;
        memcpy(cl[i].last_err, r.last_err, sizeof cl[i].last_err);
        cl[i].last_err[sizeof cl[i].last_err - 1] = '\0';
        memcpy(cl[i].other_err, r.other_err, sizeof cl[i].other_err);
        cl[i].other_err[sizeof cl[i].other_err - 1] = '\0';
    }
    return 0;
}

/* client_proc_end closes the pipes (a client process still running stops
 * its clients and exits), waits up to 10 s for it, then kills it. Main
 * thread; a no-op without a client process. */
static void client_proc_end(void)
{
    struct client_proc *p = &g_client_proc;
    if (p->pid == 0) {
        return;
    }
    close(p->cmd_fd);
    close(p->res_fd);
    for (int i = 0; i < 1000; i++) {
        if (waitpid(p->pid, NULL, WNOHANG) != 0) {
            p->pid = 0;
            return;
        }
        usleep(10000);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
}

/* ---- statistics from raft_status --------------------------------------- */

/* The cumulative counters of one status. */
struct bench_counters {
    bool has;         /* status carries the counters */
    double writes;    /* log_writes (fsynced LMDB transactions) */
    double entries_w; /* entries written = entries_per_fsync * writes */
    double appends;   /* appends_sent */
    double entries_s; /* entries sent = entries_per_append * appends */
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

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [options]\n"
            "  --role leader|follower  the clients' node (node 1) leads or "
            "forwards (leader)\n"
            "  --clients N             client threads, one connection each "
            "(1)\n"
            "  --plain                 plain autocommit INSERTs, not "
            "raft_exec\n"
            "  --process               the client threads in a process of "
            "their own, as\n"
            "                          another application on node 1's "
            "machine\n"
            "  --duration S            measured seconds (20)\n"
            "  --warmup S              seconds of load before measuring (1)\n"
            "  --name NAME             RESULT name "
            "(raftsql[-plain]-<clients>-<role>)\n"
            "  --node PATH             raftsql-testhost binary (next to this "
            "one)\n"
            "  --dir DIR               work directory, kept (a temporary "
            "one, removed)\n"
            "  --config 'k=v ...'      extra raft_start keys for every node\n"
            "  --rtt-ms D              add D ms of round trip to every peer "
            "link (0)\n"
            "  --proxy PATH            delay-proxy binary (next to this "
            "one)\n",
            argv0);
}

/* parse_opts fills @o from the command line: 0, 1 after --help, or -1
 * with a message on stderr. */
static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
    static const struct option longs[] = {
        {"role", required_argument, NULL, 'r'},
        {"clients", required_argument, NULL, 'c'},
        {"plain", no_argument, NULL, 'p'},
        {"process", no_argument, NULL, 'x'},
        {"duration", required_argument, NULL, 'd'},
        {"warmup", required_argument, NULL, 'w'},
        {"name", required_argument, NULL, 'n'},
        {"node", required_argument, NULL, 'N'},
        {"dir", required_argument, NULL, 'D'},
        {"config", required_argument, NULL, 'C'},
        {"rtt-ms", required_argument, NULL, 'R'},
        {"proxy", required_argument, NULL, 'P'},
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
        snprintf(o->node, sizeof o->node, "%s/raftsql-testhost", self);
        snprintf(o->proxy, sizeof o->proxy, "%s/delay-proxy", self);
    } else {
        snprintf(o->node, sizeof o->node, "build/raftsql-testhost");
        snprintf(o->proxy, sizeof o->proxy, "build/delay-proxy");
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
            case 'p':
                o->plain = true;
                break;
            case 'x':
                o->process = true;
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
            case 'R':
                o->rtt_ms = strtod(optarg, &end);
                if (*end || !(o->rtt_ms == 0 ||
                              (o->rtt_ms >= 0.2 && o->rtt_ms <= 10000))) {
                    fprintf(stderr, "--rtt-ms: 0, or 0.2 to 10000 ms\n");
                    return -1;
                }
                break;
            case 'P':
                snprintf(o->proxy, sizeof o->proxy, "%s", optarg);
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
        snprintf(o->name, sizeof o->name, "raftsql-%s%d-%s%s",
                 o->plain ? "plain-" : "", o->clients,
                 o->leader ? "leader" : "follower", o->process ? "-proc" : "");
    }
    return 0;
}

/* cost_sample reads the cost of every node process into @out (index 1 to
 * N_NODES): node 1 is this process (with the clients; not its other
 * children, the node processes and the delay proxies), nodes 2 and 3 their
 * processes with any descendants. */
static void cost_sample(struct proc_cost *out)
{
    for (int id = 1; id <= N_NODES; id++) {
        out[id] = (struct proc_cost){0};
        proc_cost_add(cluster_pid(id), id != 1, &out[id]);
    }
    /* The client process's too (--process): its connections do the
     * writer's share of a plain commit, as the threads do in node 1. */
    if (g_client_proc.pid != 0) {
        proc_cost_add(g_client_proc.pid, false, &out[1]);
    }
}

/* client_proc_cpu_s returns the CPU seconds the client process has used so
 * far (0 without one). */
static double client_proc_cpu_s(void)
{
    struct proc_cost c = {0};
    if (g_client_proc.pid != 0) {
        proc_cost_add(g_client_proc.pid, false, &c);
    }
    return c.cpu_s;
}

/* clients_cpu_s returns the CPU seconds the @n running client threads @cl
 * have used so far (a thread that has already ended counts 0). */
static double clients_cpu_s(const struct bench_client *cl, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) {
        clockid_t cid;
        struct timespec ts;
        if (pthread_getcpuclockid(cl[i].thread, &cid) == 0 &&
            clock_gettime(cid, &ts) == 0) {
            s += (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
        }
    }
    return s;
}

static void fmt_ratio(char *out, size_t len, bool has, double num, double den)
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
    struct proc_cost c0[N_NODES + 1] = {{0}}, c1[N_NODES + 1] = {{0}};
    double cl_cpu0 = 0, cl_cpu1 = 0;
    char base[1024], dir[1100], buf[1024];
    size_t cap, n_ok = 0, n_err = 0, n_busy = 0, n_other = 0, n_drop = 0;
    size_t n_all = 0;
    const char *other_err = NULL;
    int rc = 1, attempt, started = 0;
    double t_start = 0, t_end = 0;
    struct sigaction sa;

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
    cap = (size_t)(o.duration * SAMPLES_PER_S) / (size_t)o.clients + 1024;
    /* Before node 1's threads: the fork copies this one thread only. */
    if (o.process && client_proc_spawn(&o, cap) != 0) {
        goto out;
    }

    /* Start clusters until the clients' node has the wanted role. */
    for (attempt = 1; attempt <= MAX_ATTEMPTS && !g_signal; attempt++) {
        snprintf(dir, sizeof dir, "%s/run%d", base, attempt);
        if (cluster_start(o.node, o.config, o.leader, dir, o.rtt_ms, o.proxy,
                          &g_signal, &db1, &leader) != 0) {
            cluster_stop_children(2.0);
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
    if (cluster_db_text(db1,
                        "SELECT raft_exec('CREATE TABLE IF NOT EXISTS "
                        "kv(k BLOB PRIMARY KEY, v BLOB)')",
                        NULL, buf, sizeof buf) != SQLITE_OK) {
        fprintf(stderr, "raftsql-bench: create kv: %s\n", buf);
        goto out;
    }

    /* Latency slots, touched now so that RSS counts them from the start
     * (with --process they receive the client process's latencies). */
    cl = calloc((size_t)o.clients, sizeof *cl);
    if (cl == NULL) {
        fprintf(stderr, "raftsql-bench: out of memory\n");
        goto out;
    }
    for (int i = 0; i < o.clients; i++) {
        cl[i].idx = i;
        cl[i].db_path = sqlite3_db_filename(db1, "main");
        cl[i].plain = o.plain;
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
        m_idle[id] = mem_of(cluster_pid(id));
    }

    atomic_store(&g_phase, 0);
    if (o.process) {
        snprintf(buf, sizeof buf, "open %s\n",
                 sqlite3_db_filename(db1, "main"));
        if (client_proc_tell(buf) != 0) {
            fprintf(stderr, "raftsql-bench: the client process has exited\n");
            goto out;
        }
        started = o.clients;
    }
    for (; started < o.clients; started++) {
        if (pthread_create(&cl[started].thread, NULL, client_main,
                           &cl[started]) != 0) {
            fprintf(stderr, "raftsql-bench: pthread_create failed\n");
            atomic_store(&g_phase, 2);
            goto join;
        }
    }
    if (!timing_sleep_s(o.warmup, &g_signal)) {
        goto join;
    }
    for (int id = 1; id <= N_NODES; id++) {
        st0[id] = cluster_status(db1, id);
        m0[id] = mem_of(cluster_pid(id));
    }
    cost_sample(c0);
    cl_cpu0 = o.process ? client_proc_cpu_s() : clients_cpu_s(cl, started);
    t_start = timing_now_s();
    atomic_store(&g_phase, 1);
    if (o.process && client_proc_tell("measure\n") != 0) {
        fprintf(stderr, "raftsql-bench: the client process has exited\n");
        goto out;
    }
    timing_sleep_s(o.duration, &g_signal);
    atomic_store(&g_phase, 2);
    t_end = timing_now_s();
    cost_sample(c1);
    if (o.process) {
        cl_cpu1 = client_proc_cpu_s();
    }

join:
    if (o.process) {
        if (!g_signal && client_proc_collect(cl, o.clients) != 0) {
            goto out;
        }
    } else {
        for (int i = 0; i < started; i++) {
            pthread_join(cl[i].thread, NULL);
            /* Its CPU time when it ended: at most one request after the
             * window's end. */
            cl_cpu1 += cl[i].cpu_end_s;
        }
    }
    if (g_signal || started < o.clients) {
        fprintf(stderr, "raftsql-bench: interrupted\n");
        goto out;
    }
    for (int id = 1; id <= N_NODES; id++) {
        st1[id] = cluster_status(db1, id);
        m1[id] = mem_of(cluster_pid(id));
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
        n_busy += cl[i].n_busy;
        n_other += cl[i].n_other;
        n_drop += cl[i].n_dropped;
        if (cl[i].n_other > 0 && other_err == NULL) {
            other_err = cl[i].other_err;
        }
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
        char epf[32], epa[32], epf_f[32], cost[256];
        struct proc_cost all0 = {0}, all1 = {0};
        bool has;

        for (int id = 1; id <= N_NODES; id++) {
            all0.cpu_s += c0[id].cpu_s;
            all0.write_bytes += c0[id].write_bytes;
            all1.cpu_s += c1[id].cpu_s;
            all1.write_bytes += c1[id].write_bytes;
        }
        proc_cost_format(cost, sizeof cost, &all0, &all1, n_ok);

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
        printf(
            "%s: %.0f writes/s (%zu writes in %.1f s, %zu errors (%zu "
            "SQLITE_BUSY), %d clients on node 1%s (%s), node %ld leader), "
            "latency ms p50 %.3f p99 %.3f p99.9 %.3f; entries per fsync %s "
            "(leader) %s (followers), per AppendEntries %s\n",
            o.name, wps, n_ok, secs, n_err, n_busy, o.clients,
            o.process ? "'s machine, in a process of their own" : "",
            o.plain ? "plain INSERTs" : "raft_exec", lid, p50, p99, p999, epf,
            epf_f, epa);
        for (int id = 1; id <= N_NODES; id++) {
            printf(
                "  node %d memory kB, before load / window start / end: "
                "RSS %ld / %ld / %ld, anonymous %ld / %ld / %ld\n",
                id, m_idle[id].rss, m0[id].rss, m1[id].rss, m_idle[id].anon,
                m0[id].anon, m1[id].anon);
        }
        printf("  (node 1 includes %s%zu kB of latency slots)\n",
               o.process ? "" : "the clients and ",
               (size_t)o.clients * cap * sizeof(uint32_t) / 1024);
        printf(
            "  CPU s in the window: node 1 %.2f (its client %s "
            "%.2f), node 2 %.2f, node 3 %.2f; disk MB written %.1f, "
            "%.1f, %.1f\n",
            c1[1].cpu_s - c0[1].cpu_s, o.process ? "process" : "threads",
            cl_cpu1 - cl_cpu0, c1[2].cpu_s - c0[2].cpu_s,
            c1[3].cpu_s - c0[3].cpu_s,
            (double)(c1[1].write_bytes - c0[1].write_bytes) / 1e6,
            (double)(c1[2].write_bytes - c0[2].write_bytes) / 1e6,
            (double)(c1[3].write_bytes - c0[3].write_bytes) / 1e6);
        /* A run that failed prints no RESULT line: compare.sh shows it as
         * FAILED, never as a row of zero or few writes. */
        if (n_other > 0 || n_ok == 0) {
            if (n_other > 0) {
                fprintf(stderr,
                        "raftsql-bench: FAILED: %zu clients stopped on a "
                        "plain write that failed with an error other than "
                        "SQLITE_BUSY, e.g. %s\n",
                        n_other, other_err);
            } else {
                fprintf(stderr,
                        "raftsql-bench: FAILED: no write succeeded in the "
                        "window (%zu errors)\n",
                        n_err);
            }
            fflush(stdout);
            goto out;
        }
        printf(
            "RESULT name=%s writes_per_s=%.1f p50_ms=%.3f p99_ms=%.3f "
            "p999_ms=%.3f writes=%zu errors=%zu busy=%zu seconds=%.2f "
            "clients=%d mode=%s clients_in=%s role=%s leader=%ld "
            "entries_per_fsync=%s "
            "entries_per_fsync_followers=%s entries_per_append=%s "
            "rss1_kb_start=%ld rss1_kb_end=%ld rss2_kb_start=%ld "
            "rss2_kb_end=%ld rss3_kb_start=%ld rss3_kb_end=%ld "
            "anon1_kb_start=%ld anon1_kb_end=%ld anon2_kb_start=%ld "
            "anon2_kb_end=%ld anon3_kb_start=%ld anon3_kb_end=%ld %s "
            "clients_cpu_s_per_write=%.7f cpu1_s=%.2f cpu2_s=%.2f "
            "cpu3_s=%.2f\n",
            o.name, wps, p50, p99, p999, n_ok, n_err, n_busy, secs, o.clients,
            o.plain ? "plain" : "raft_exec", o.process ? "process" : "node1",
            o.leader ? "leader" : "follower", lid, epf, epf_f, epa, m0[1].rss,
            m1[1].rss, m0[2].rss, m1[2].rss, m0[3].rss, m1[3].rss, m0[1].anon,
            m1[1].anon, m0[2].anon, m1[2].anon, m0[3].anon, m1[3].anon, cost,
            (cl_cpu1 - cl_cpu0) / (double)n_ok, c1[1].cpu_s - c0[1].cpu_s,
            c1[2].cpu_s - c0[2].cpu_s, c1[3].cpu_s - c0[3].cpu_s);
        fflush(stdout);
        if (n_drop > 0) {
            fprintf(stderr,
                    "raftsql-bench: %zu latencies not kept (slots full)\n",
                    n_drop);
        }
        rc = 0;
    }

out:
    client_proc_end();
    cluster_stop(db1);
    cluster_stop_children(2.0);
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
