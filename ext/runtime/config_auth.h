/* How peers authenticate, as the raft_start() configuration says: the TLS
 * keys (tls_cert, tls_key, tls_ca, secret_file) and the rule that an
 * address off loopback needs authenticated peers or insecure=on. Private
 * to config.c. */

#ifndef EXT_CONFIG_AUTH_H
#define EXT_CONFIG_AUTH_H

#include <stddef.h>

#include "config.h"

/* config_auth_field returns the field of @c that the file name key @key
 * fills (tls_cert, tls_key, tls_ca or secret_file: char[4096]), or NULL
 * when @key is none of them. Pure. */
char *config_auth_field(struct ext_config *c, const char *key);

/* config_auth_check checks the parsed @c: the three certificate files or
 * the secret file, or none of them (setting c->tls), then every address
 * of @c (listen, advertise, cluster, dial, join) against the loopback
 * rule. Errors: RAFT_INVALID with @errmsg (@errmsg_len bytes) naming the
 * key, e.g. "tls_key: missing (tls_cert, tls_key and tls_ca go
 * together)", "cluster: server 2's address: '10.0.0.2:7002' is off
 * loopback, and peers do not authenticate each other: refused (...)".
 * Pure; any thread. */
int config_auth_check(struct ext_config *c, char *errmsg, size_t errmsg_len);

#endif /* EXT_CONFIG_AUTH_H */
