/* The daemon's metrics endpoint (node_metrics.h) on libmicrohttpd: one
 * internal polling thread (MHD_USE_POLL_INTERNAL_THREAD), which alone runs
 * the handler and so alone uses the SQLite connection it scrapes with.
 *
 * Happy path: GET /metrics -> SELECT raft_metrics() on that connection ->
 * 200, text/plain; version=0.0.4, Connection: close.
 * Failure modes: no node (stopped, failed to start) -> 503 with
 * raft_metrics()'s error; a wrong path 404; a wrong method 405 (Allow:
 * GET); a header over the connection's memory limit, a malformed request
 * line or header -> libmicrohttpd answers 4xx or closes the connection; a
 * client that says nothing is closed at the timeout. None of these
 * touches the node. */

#include "node_metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/raftsql.h"

#define METRICS__MEMORY_LIMIT (8u * 1024) /* a request's header, bytes */
#define METRICS__CONNECTIONS 16           /* connections at once */
#define METRICS__TIMEOUT_S 10             /* idle connection, seconds */
#define METRICS__CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct node_metrics {
    struct MHD_Daemon *daemon; /* serving, NULL before */
    sqlite3 *db;               /* the scrapes' connection (the thread) */
    char *cert;                /* PEM, NUL-terminated, NULL without TLS */
    char *key;                 /* PEM, NUL-terminated, NULL without TLS */
};

/* on_log writes a line of libmicrohttpd's to stderr, as the daemon's. */
static void on_log(void *cls, const char *fmt, va_list ap)
{
    char line[1024];
    size_t len;
    (void)cls;
    vsnprintf(line, sizeof line, fmt, ap);
    len = strlen(line);
    while (len > 0 && line[len - 1] == '\n') {
        line[--len] = '\0';
    }
    fprintf(stderr, "raftsql-node: metrics_listen: %s\n", line);
}

/* answer queues the response @status with @body (@len bytes, malloc'd:
 * taken over, freed by libmicrohttpd) of type @type on @c, closing the
 * connection after it; with @allow an Allow header. */
static enum MHD_Result answer(struct MHD_Connection *c, unsigned status,
                              char *body, size_t len, const char *type,
                              const char *allow)
{
    struct MHD_Response *r;
    enum MHD_Result rc;

    r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(body);
        return MHD_NO; /* closes the connection */
    }
    if (MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type) ==
            MHD_NO ||
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close") ==
            MHD_NO ||
        (allow != NULL &&
         MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow) == MHD_NO)) {
        MHD_destroy_response(r);
        return MHD_NO;
    }
    rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* answer_text answers @status with the text line @text (copied). */
static enum MHD_Result answer_text(struct MHD_Connection *c, unsigned status,
                                   const char *text, const char *allow)
{
    size_t len = strlen(text);
    char *body = malloc(len + 2);
    if (body == NULL) {
        return MHD_NO;
    }
    memcpy(body, text, len);
    body[len] = '\n';
    body[len + 1] = '\0';
    return answer(c, status, body, len + 1, "text/plain; charset=utf-8", allow);
}

/* scrape answers with raft_metrics() on @m's connection: 200, or 503 with
 * its error (no node runs). The thread. */
static enum MHD_Result scrape(struct node_metrics *m, struct MHD_Connection *c)
{
    sqlite3_stmt *stmt = NULL;
    enum MHD_Result result;
    int rc =
        sqlite3_prepare_v2(m->db, "SELECT raft_metrics()", -1, &stmt, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(stmt);
    }
    if (rc == SQLITE_ROW) {
        int len = sqlite3_column_bytes(stmt, 0);
        const unsigned char *text = sqlite3_column_text(stmt, 0);
        char *body = malloc((size_t)len + 1);
        if (body == NULL || text == NULL) {
            free(body);
            sqlite3_finalize(stmt);
            return answer_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
                               "out of memory", NULL);
        }
        memcpy(body, text, (size_t)len + 1);
        sqlite3_finalize(stmt);
        return answer(c, MHD_HTTP_OK, body, (size_t)len, METRICS__CONTENT_TYPE,
                      NULL);
    }
    result = answer_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, sqlite3_errmsg(m->db),
                         NULL);
    sqlite3_finalize(stmt);
    return result;
}

/* on_request answers one request (libmicrohttpd's access handler, called
 * on its thread): at once, on its first call, so that no request body is
 * read. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0) {
        return answer_text(c, MHD_HTTP_METHOD_NOT_ALLOWED,
                           "only GET /metrics is served", "GET");
    }
    if (strcmp(url, "/metrics") != 0) {
        return answer_text(c, MHD_HTTP_NOT_FOUND,
                           "not found: the metrics are at /metrics", NULL);
    }
    return scrape(cls, c);
}

/* read_pem reads the file @path whole into a NUL-terminated string
 * (malloc'd), or returns NULL with @errmsg saying why. */
static char *read_pem(const char *what, const char *path, char *errmsg,
                      size_t errmsg_len)
{
    FILE *in = fopen(path, "rb");
    char *text = NULL;
    long len;

    if (in == NULL) {
        snprintf(errmsg, errmsg_len, "%s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    if (fseek(in, 0, SEEK_END) != 0 || (len = ftell(in)) < 0 ||
        len > 1024 * 1024 || fseek(in, 0, SEEK_SET) != 0 ||
        (text = malloc((size_t)len + 1)) == NULL ||
        fread(text, 1, (size_t)len, in) != (size_t)len) {
        snprintf(errmsg, errmsg_len,
                 "%s %s: cannot read it whole (at most 1 MiB)", what, path);
        free(text);
        fclose(in);
        return NULL;
    }
    text[len] = '\0';
    fclose(in);
    return text;
}

/* split_address resolves @address ("host:port", an IPv4 address or an
 * IPv6 one in brackets, checked before) into @out (freeaddrinfo it).
 * Returns 0, or -1 with @errmsg. */
static int split_address(const char *address, struct addrinfo **out,
                         char *errmsg, size_t errmsg_len)
{
    char host[256];
    const char *colon = strrchr(address, ':');
    struct addrinfo hints;
    size_t len;
    int rc;

    if (colon == NULL || (len = (size_t)(colon - address)) >= sizeof host) {
        snprintf(errmsg, errmsg_len, "'%s' is not host:port", address);
        return -1;
    }
    memcpy(host, address, len);
    host[len] = '\0';
    if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
        memmove(host, host + 1, len - 2);
        host[len - 2] = '\0';
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
    rc = getaddrinfo(host, colon + 1, &hints, out);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "'%s': %s", address, gai_strerror(rc));
        return -1;
    }
    return 0;
}

int node_metrics_start(const char *db_path, const char *address, bool tls,
                       const char *cert, const char *key,
                       struct node_metrics **out, char *errmsg,
                       size_t errmsg_len)
{
    struct node_metrics *m = calloc(1, sizeof *m);
    struct addrinfo *ai = NULL;
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;

    if (m == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return -1;
    }
    if (split_address(address, &ai, errmsg, errmsg_len) != 0) {
        goto err;
    }
    if (tls) {
        m->cert = read_pem("tls_cert", cert, errmsg, errmsg_len);
        m->key = m->cert ? read_pem("tls_key", key, errmsg, errmsg_len) : NULL;
        if (m->key == NULL) {
            goto err;
        }
        flags |= MHD_USE_TLS;
    }
    /* Created when missing: the daemon serves the metrics before its
     * node's first start (which would create it too). */
    if (sqlite3_open_v2(db_path, &m->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                        NULL) != SQLITE_OK) {
        snprintf(errmsg, errmsg_len, "cannot open %s: %s", db_path,
                 m->db != NULL ? sqlite3_errmsg(m->db) : "out of memory");
        goto err;
    }
    if (ai->ai_family == AF_INET6) {
        flags |= MHD_USE_IPv6;
    }
    {
        struct MHD_OptionItem ops[] = {
            {MHD_OPTION_SOCK_ADDR, 0, ai->ai_addr},
            {MHD_OPTION_CONNECTION_MEMORY_LIMIT, METRICS__MEMORY_LIMIT, NULL},
            {MHD_OPTION_CONNECTION_LIMIT, METRICS__CONNECTIONS, NULL},
            {MHD_OPTION_CONNECTION_TIMEOUT, METRICS__TIMEOUT_S, NULL},
            {tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, m->key},
            {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, m->cert},
            {MHD_OPTION_END, 0, NULL},
        };
        /* The logger first, so that start-up errors reach it too. */
        m->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, m,
                                     MHD_OPTION_EXTERNAL_LOGGER, on_log, NULL,
                                     MHD_OPTION_ARRAY, ops, MHD_OPTION_END);
    }
    if (m->daemon == NULL) {
        snprintf(errmsg, errmsg_len,
                 "cannot serve on %s (the address taken or not this "
                 "machine's, or the certificate refused: the line before "
                 "says)",
                 address);
        goto err;
    }
    freeaddrinfo(ai);
    *out = m;
    return 0;
err:
    if (ai != NULL) {
        freeaddrinfo(ai);
    }
    node_metrics_stop(m);
    return -1;
}

void node_metrics_stop(struct node_metrics *m)
{
    if (m == NULL) {
        return;
    }
    if (m->daemon != NULL) {
        MHD_stop_daemon(m->daemon);
    }
    sqlite3_close(m->db);
    free(m->cert);
    if (m->key != NULL) {
        explicit_bzero(m->key, strlen(m->key)); /* the private key */
        free(m->key);
    }
    free(m);
}
