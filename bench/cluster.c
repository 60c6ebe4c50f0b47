/* The cluster of raftsql-bench (cluster.h): the node processes' table,
 * free ports, raft_start on every node with the wanted node ahead, the
 * wait for an agreed leader, and the questions asked of a node. */

#include "bench/cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/child.h"
#include "bench/timing.h"

#define LEADER_WAIT_S 20      /* longest wait for an agreed leader */
#define LOSER_TIMEOUT_MS 3000 /* election timeout of the two other nodes */

/* Nodes 2 and 3 (slots 0 and 1 unused). */
static struct bench_child g_children[N_NODES + 1] = {
    [0 ... N_NODES] = {.pid = 0, .in_fd = -1, .out = NULL},
};

void cluster_stop_children(double grace_s)
{
    for (int i = 2; i <= N_NODES; i++) {
        child_stop(&g_children[i], grace_s);
    }
}

int cluster_db_text(sqlite3 *db, const char *sql, const char *param, char *out,
                    size_t out_len)
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
        if (cluster_db_text(db1, "SELECT raft_leader()", NULL, buf,
                            sizeof buf)) {
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

json_t *cluster_status(sqlite3 *db1, int id)
{
    char err[256];
    json_t *v, *o;
    json_error_t jerr;

    if (id == 1) {
        static char buf[65536];
        if (cluster_db_text(db1, "SELECT raft_status()", NULL, buf,
                            sizeof buf)) {
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

/* free_ports writes @n (at most 2 * N_NODES) loopback ports that were free a
 * moment ago into @ports; 0, or -1 with errno set. */
static int free_ports(int n, int *ports)
{
    int fds[2 * N_NODES];
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

/* The delay proxy of a run with --rtt-ms (0: none). */
static pid_t g_proxy;

/* start_proxy runs @proxy_bin holding each byte @rtt_ms / 2 each way, from
 * ports[N_NODES + i] to ports[i] for each node, and waits until it
 * listens. Returns 0, or -1 with a message on stderr. */
static int start_proxy(const char *proxy_bin, double rtt_ms, const int *ports)
{
    char rtt[32], maps[N_NODES][32], line[64];
    char *argv[3 + N_NODES + 1];
    int out[2];
    FILE *f;
    pid_t pid;

    snprintf(rtt, sizeof rtt, "%g", rtt_ms);
    argv[0] = (char *)proxy_bin;
    argv[1] = "--rtt-ms";
    argv[2] = rtt;
    for (int i = 0; i < N_NODES; i++) {
        snprintf(maps[i], sizeof maps[i], "%d:%d", ports[N_NODES + i],
                 ports[i]);
        argv[3 + i] = maps[i];
    }
    argv[3 + N_NODES] = NULL;
    if (pipe2(out, O_CLOEXEC) != 0) {
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        close(out[0]);
        close(out[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(out[1], 1);
        execv(proxy_bin, argv);
        _exit(127);
    }
    close(out[1]);
    g_proxy = pid;
    f = fdopen(out[0], "r");
    if (f == NULL || fgets(line, sizeof line, f) == NULL ||
        strncmp(line, "delay-proxy: ready", 18) != 0) {
        fprintf(stderr, "raftsql-bench: %s did not start\n", proxy_bin);
        if (f != NULL) {
            fclose(f);
        } else {
            close(out[0]);
        }
        return -1;
    }
    fclose(f);
    return 0;
}

/* stop_proxy stops the delay proxy, if one runs. */
static void stop_proxy(void)
{
    if (g_proxy > 0) {
        kill(g_proxy, SIGTERM);
        waitpid(g_proxy, NULL, 0);
        g_proxy = 0;
    }
}

/* dial_for writes into @out the dial= key making node @id reach every
 * other node through its proxy port (ports[N_NODES + j - 1]). */
static void dial_for(int id, const int *ports, char *out, size_t out_len)
{
    size_t n = (size_t)snprintf(out, out_len, "dial=");
    for (int j = 1; j <= N_NODES && n < out_len; j++) {
        if (j != id) {
            n += (size_t)snprintf(out + n, out_len - n, "%s%d@127.0.0.1:%d",
                                  out[n - 1] == '=' ? "" : ",", j,
                                  ports[N_NODES + j - 1]);
        }
    }
}

int cluster_start(const char *bin, const char *config, bool node1_leads,
                  const char *dir, double rtt_ms, const char *proxy_bin,
                  const volatile sig_atomic_t *stop, sqlite3 **out_db1,
                  long *out_leader)
{
    int ports[2 * N_NODES];
    char members[256], cfg[2048], db[1200], log[1200], buf[1024];
    char dial[256] = "";
    int want = node1_leads ? 1 : 2;
    int order[N_NODES] = {want, want == 1 ? 2 : 1, 3};
    sqlite3 *db1 = NULL;
    double deadline;

    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "raftsql-bench: mkdir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    if (free_ports(2 * N_NODES, ports) != 0) {
        fprintf(stderr, "raftsql-bench: no free port: %s\n", strerror(errno));
        return -1;
    }
    stop_proxy();
    if (rtt_ms > 0 && start_proxy(proxy_bin, rtt_ms, ports) != 0) {
        return -1;
    }
    snprintf(members, sizeof members,
             "1@127.0.0.1:%d,2@127.0.0.1:%d,3@127.0.0.1:%d", ports[0], ports[1],
             ports[2]);
    for (int i = 2; i <= N_NODES; i++) {
        snprintf(db, sizeof db, "%s/node%d.db", dir, i);
        snprintf(log, sizeof log, "%s/node%d.log", dir, i);
        if (child_spawn(&g_children[i], bin, db, log) != 0) {
            fprintf(stderr, "raftsql-bench: cannot start %s: %s\n", bin,
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
        if (rtt_ms > 0) {
            dial_for(id, ports, dial, sizeof dial);
        }
        if (id == want) {
            snprintf(cfg, sizeof cfg, "id=%d cluster=%s %s %s", id, members,
                     dial, config);
        } else {
            snprintf(cfg, sizeof cfg,
                     "id=%d cluster=%s election_timeout_ms=%d %s %s", id,
                     members, LOSER_TIMEOUT_MS, dial, config);
        }
        if (id == 1) {
            if (cluster_db_text(db1, "SELECT raft_start(?)", cfg, buf,
                                sizeof buf)) {
                fprintf(stderr, "raftsql-bench: node 1: %s\n", buf);
                goto err;
            }
        } else {
            json_t *v = child_sql(&g_children[id], "SELECT raft_start(?)", cfg,
                                  buf, sizeof buf);
            if (v == NULL) {
                fprintf(stderr, "raftsql-bench: node %d: %s\n", id, buf);
                goto err;
            }
            json_decref(v);
        }
    }
    deadline = timing_now_s() + LEADER_WAIT_S;
    while (timing_now_s() < deadline && !*stop) {
        long l[N_NODES + 1];
        bool agree = true;
        for (int id = 1; id <= N_NODES; id++) {
            l[id] = node_leader(db1, id);
            if (l[id] < 0) {
                fprintf(stderr, "raftsql-bench: node %d does not answer\n", id);
                goto err;
            }
            agree = agree && l[id] > 0 && l[id] == l[1];
        }
        if (agree) {
            *out_db1 = db1;
            *out_leader = l[1];
            return 0;
        }
        timing_sleep_s(0.02, stop);
    }
    fprintf(stderr, "raftsql-bench: no agreed leader within %d s\n",
            LEADER_WAIT_S);
err:
    sqlite3_exec(db1, "SELECT raft_stop()", NULL, NULL, NULL);
    sqlite3_close(db1);
    return -1;
}

void cluster_stop(sqlite3 *db1)
{
    cluster_stop_children(10.0);
    if (db1 != NULL) {
        sqlite3_exec(db1, "SELECT raft_stop()", NULL, NULL, NULL);
        sqlite3_close(db1);
    }
    stop_proxy();
}

pid_t cluster_pid(int id)
{
    return id == 1 ? getpid() : g_children[id].pid;
}
