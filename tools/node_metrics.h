/* The daemon's metrics endpoint (metrics_listen=): raft_metrics() of its
 * node served over HTTP (libmicrohttpd, Debian's libmicrohttpd-dev) from a
 * thread of its own, for a Prometheus scraper. */

#ifndef NODE_METRICS_H
#define NODE_METRICS_H

#include <stdbool.h>
#include <stddef.h>

struct node_metrics; /* opaque */

/* node_metrics_start serves the Prometheus text of the node this process
 * runs for the database file @db_path on @address ("host:port", an IP
 * address checked by raftsql_metrics_listen_check), with TLS over the PEM
 * files @cert and @key (the node's tls_cert and tls_key, read once here)
 * when @tls. GET /metrics answers 200 with the text (503 with the reason
 * while no node runs); another path 404, another method 405; every
 * answer is HTTP/1.1 with Content-Length and `Connection: close`. A
 * request whose header is over 8 KiB, or malformed, is answered 4xx (or
 * not at all) and its connection closed; at most 16 connections at once,
 * each closed after 10 s idle. The thread scrapes on a SQLite connection
 * of its own to @db_path (raftsql registered with sqlite3_auto_extension
 * before; the file is created when missing: the daemon serves the metrics
 * before its node starts). Returns 0 with *@out set, or -1 with @errmsg (@errmsg_len
 * bytes) saying why (the address taken, a certificate unreadable).
 * Thread: the daemon's main thread, after the signals are blocked (its
 * thread inherits the mask). */
int node_metrics_start(const char *db_path, const char *address, bool tls,
                       const char *cert, const char *key,
                       struct node_metrics **out, char *errmsg,
                       size_t errmsg_len);

/* node_metrics_stop stops serving, joins the thread and frees @m. NULL is
 * ignored. The thread that started it. */
void node_metrics_stop(struct node_metrics *m);

#endif /* NODE_METRICS_H */
