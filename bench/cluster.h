/* The 3-node cluster of raftsql-bench on 127.0.0.1: node 1 in this process
 * (a SQLite connection that ran raft_start), nodes 2 and 3 child processes
 * (child.h). Starting it with the wanted node ahead, waiting for an agreed
 * leader, asking a node for its status, stopping it. Main thread only. */

#ifndef BENCH_CLUSTER_H
#define BENCH_CLUSTER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>
#include <sqlite3.h>

#define N_NODES 3 /* node ids 1..N_NODES */

/* cluster_start starts nodes 1..3 in the directory @dir (created if
 * missing): nodes 2 and 3 as processes of the raftsql-testhost binary @bin,
 * node 1 in this process; every raft_start gets the extra keys @config.
 * With @rtt_ms > 0 every node reaches the others through one process of
 * the delay proxy @proxy_bin (bench/delay_proxy.c; dial= overrides), so
 * each peer link has @rtt_ms of round trip; it stops with cluster_stop.
 * The node meant to lead (node 1 if @node1_leads, else node 2) starts
 * first and keeps the default election timeout, the two others wait
 * longer. Then it waits (up to 20 s, or until *@stop is not 0) until all
 * agree on a leader. On success *@out_db1 is node 1's connection (release
 * it with cluster_stop) and *@out_leader the leader's id. Returns 0, or -1
 * with a message on stderr; node processes already started are left for
 * cluster_stop_children. */
int cluster_start(const char *bin, const char *config, bool node1_leads,
                  const char *dir, double rtt_ms, const char *proxy_bin,
                  const volatile sig_atomic_t *stop, sqlite3 **out_db1,
                  long *out_leader);

/* cluster_stop stops nodes 2 and 3 (10 s grace each), then node 1, closes
 * @db1 (NULL: only the processes) and stops the delay proxy. */
void cluster_stop(sqlite3 *db1);

/* cluster_stop_children stops the node processes still running, each with
 * @grace_s seconds of grace before SIGKILL. */
void cluster_stop_children(double grace_s);

/* cluster_pid returns the process of node @id (1..N_NODES): this process
 * for node 1, 0 for a node process not running. */
pid_t cluster_pid(int id);

/* cluster_db_text runs @sql (with one optional text parameter @param) on
 * @db and copies the first column of the first row ("" when there is no
 * row) into @out (@out_len bytes); on failure @out holds SQLite's message.
 * Returns SQLITE_OK or the SQLite code. */
int cluster_db_text(sqlite3 *db, const char *sql, const char *param, char *out,
                    size_t out_len);

/* cluster_status returns node @id's raft_status() parsed, a new JSON
 * reference for json_decref, or NULL when the node does not answer or the
 * status does not parse. @db1 is node 1's connection. */
json_t *cluster_status(sqlite3 *db1, int id);

#endif /* BENCH_CLUSTER_H */
