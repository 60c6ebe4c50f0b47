/* The node's TLS credentials: loading those the configuration names,
 * warning when the certificate does not name the advertised host, and
 * raft_tls_reload() (the credentials themselves: raft/uv_tls.h). */

#ifndef EXT_NODE_TLS_H
#define EXT_NODE_TLS_H

#include <stddef.h>

#include "../../raft/uv_tls.h"
#include "config.h"
#include "node_log.h"

/* node_tls_load loads the credentials @c names (tls_cert/tls_key/tls_ca or
 * secret_file) into *@out and logs which at INFO on @log; with TLS off
 * (c->tls false) it sets *@out to NULL and returns 0. The caller owns *@out
 * (raft_uv_tls_free). Errors: those of raft_uv_tls_new (RAFT_INVALID,
 * RAFT_IOERR, RAFT_NOMEM), with @errmsg (@errmsg_len bytes) naming the file
 * and the reason; *@out untouched. Any thread (the start's). */
int node_tls_load(const struct ext_config *c, struct ext_node_log *log,
                  struct raft_uv_tls **out, char *errmsg, size_t errmsg_len);

/* node_tls_check loads the credentials @c names as node_tls_load would,
 * and frees them: a configuration check (raftsql_config_check, the
 * daemon's --check) finds what the start would refuse (a file missing, a
 * key that does not match, a certificate tls_ca did not sign). Returns 0
 * (also with TLS off), or node_tls_load's error with @errmsg (@errmsg_len
 * bytes). Any thread. */
int node_tls_check(const struct ext_config *c, char *errmsg, size_t errmsg_len);

/* node_tls_warn_host logs a WARN on @log when the certificate of @tls
 * (loaded from @cert_file) does not name the host of @advertised
 * ("host:port"): peers refuse it then (a first start may not know its
 * final address, so it is no error). Nothing when @tls is NULL, uses a
 * pre-shared secret, or @advertised is a wildcard or does not parse. Any
 * thread. */
void node_tls_warn_host(struct raft_uv_tls *tls, const char *cert_file,
                        const char *advertised, struct ext_node_log *log);

/* node_tls_reload re-reads the certificate files of @tls now and logs the
 * outcome on @log; @msg (@msg_len bytes) gets what was loaded, or why not.
 * Returns 0, RAFT_INVALID when @tls is NULL (TLS off), or the error of
 * raft_uv_tls_reload (the credentials in use stay). Any thread. */
int node_tls_reload(struct raft_uv_tls *tls, struct ext_node_log *log,
                    char *msg, size_t msg_len);

#endif /* EXT_NODE_TLS_H */
