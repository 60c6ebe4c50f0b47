/* The node's TLS credentials (node_tls.h). */

#include "node_tls.h"

#include <stdio.h>
#include <string.h>

#include "../../raft/address.h"
#include "../../raft/err.h"
#include "../../raft/logging.h"

/* files_of fills @tc with the files @c names. */
static void files_of(const struct ext_config *c, struct raft_uv_tls_config *tc)
{
    memset(tc, 0, sizeof *tc);
    if (c->secret_file[0] != '\0') {
        tc->secret_file = c->secret_file;
    } else {
        tc->cert_file = c->tls_cert;
        tc->key_file = c->tls_key;
        tc->ca_file = c->tls_ca;
    }
}

int node_tls_check(const struct ext_config *c, char *errmsg, size_t errmsg_len)
{
    struct raft_uv_tls_config tc;
    struct raft_uv_tls *tls = NULL;
    int rc;

    if (!c->tls) {
        return 0;
    }
    files_of(c, &tc);
    rc = raft_uv_tls_new(&tc, &tls, errmsg, errmsg_len);
    if (rc == 0) {
        raft_uv_tls_free(tls);
    }
    return rc;
}

int node_tls_load(const struct ext_config *c, struct ext_node_log *log,
                  struct raft_uv_tls **out, char *errmsg, size_t errmsg_len)
{
    struct raft_uv_tls_config tc;
    char expires[32];
    int rc;

    if (!c->tls) {
        *out = NULL;
        return 0;
    }
    files_of(c, &tc);
    rc = raft_uv_tls_new(&tc, out, errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    raft_uv_tls_expires(*out, expires, sizeof expires);
    if (tc.secret_file != NULL) {
        node_log_line(log, RAFT_LOG_INFO,
                      "tls: peers authenticate with the pre-shared secret "
                      "of %s",
                      tc.secret_file);
    } else {
        node_log_line(log, RAFT_LOG_INFO,
                      "tls: peers authenticate with certificates: tls_cert "
                      "%s (expires %s), tls_ca %s",
                      tc.cert_file, expires, tc.ca_file);
    }
    return 0;
}

void node_tls_warn_host(struct raft_uv_tls *tls, const char *cert_file,
                        const char *advertised, struct ext_node_log *log)
{
    struct raft_address a;
    char names[512];

    if (tls == NULL || raft_address_parse(advertised, &a, NULL, 0) != 0 ||
        raft_address_wildcard(&a) ||
        raft_uv_tls_names_host(tls, a.host, names, sizeof names)) {
        return;
    }
    node_log_line(log, RAFT_LOG_WARN,
                  "tls_cert: %s does not name this node's advertised host "
                  "%s in its subjectAltName (it holds: %s): peers will "
                  "refuse it; give a certificate for %s (raft_tls_reload() "
                  "takes it)",
                  cert_file, a.host, names, a.host);
}

int node_tls_reload(struct raft_uv_tls *tls, struct ext_node_log *log,
                    char *msg, size_t msg_len)
{
    int rc;

    if (tls == NULL) {
        snprintf(msg, msg_len,
                 "TLS is off: raft_start was given neither tls_cert= nor "
                 "secret_file=");
        return RAFT_INVALID;
    }
    rc = raft_uv_tls_reload(tls, msg, msg_len);
    node_log_line(log, rc == 0 ? RAFT_LOG_INFO : RAFT_LOG_WARN,
                  "tls: raft_tls_reload(): %s%s", msg,
                  rc == 0 ? " (new connections use them)"
                          : " (the previous ones stay in use)");
    return rc;
}
