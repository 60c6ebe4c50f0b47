/* How peers authenticate (config_auth.h): the TLS keys of the
 * configuration, and the loopback rule for every address. */

#include "config_auth.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../../raft/address.h"
#include "../../raft/err.h"

/* fail writes the message of @fmt into @errmsg: RAFT_INVALID. */
#define fail(errmsg, errmsg_len, ...)                                          \
    (raft_errmsgf((errmsg), (errmsg_len), __VA_ARGS__), RAFT_INVALID)

/* The keys whose value is a file name, and their field. */
static const struct {
    const char *name;
    size_t offset; /* of the char[4096] field in struct ext_config */
} path_keys[] = {
    {"tls_cert", offsetof(struct ext_config, tls_cert)},
    {"tls_key", offsetof(struct ext_config, tls_key)},
    {"tls_ca", offsetof(struct ext_config, tls_ca)},
    {"secret_file", offsetof(struct ext_config, secret_file)},
};

char *config_auth_field(struct ext_config *c, const char *key)
{
    for (size_t i = 0; i < sizeof path_keys / sizeof path_keys[0]; i++) {
        if (strcmp(key, path_keys[i].name) == 0) {
            return (char *)c + path_keys[i].offset;
        }
    }
    return NULL;
}

/* check_tls checks that @c names the three certificate files or the
 * secret file, or none of them, and sets c->tls. */
static int check_tls(struct ext_config *c, char *errmsg, size_t errmsg_len)
{
    unsigned n_cert = (c->tls_cert[0] != '\0') + (c->tls_key[0] != '\0') +
                      (c->tls_ca[0] != '\0');

    if (n_cert > 0 && c->secret_file[0] != '\0') {
        return fail(errmsg, errmsg_len,
                    "secret_file: cannot be given with tls_cert, tls_key "
                    "or tls_ca (peers authenticate one way: certificates "
                    "or a pre-shared secret)");
    }
    if (n_cert > 0 && n_cert < 3) {
        const char *missing = c->tls_cert[0] == '\0'  ? "tls_cert"
                              : c->tls_key[0] == '\0' ? "tls_key"
                                                      : "tls_ca";
        return fail(errmsg, errmsg_len,
                    "%s: missing (tls_cert, tls_key and tls_ca go "
                    "together)",
                    missing);
    }
    c->tls = n_cert == 3 || c->secret_file[0] != '\0';
    return 0;
}

bool ext_config_peers_authenticated(const struct ext_config *c)
{
    return c->tls; /* set by config_auth_check */
}

/* check_reach refuses the address @text given for @who when it is off
 * loopback, unless peers authenticate each other or insecure=on. */
static int check_reach(const struct ext_config *c, const char *who,
                       const char *text, char *errmsg, size_t errmsg_len)
{
    struct raft_address a;

    if (c->insecure || ext_config_peers_authenticated(c) ||
        (raft_address_parse(text, &a, NULL, 0) == 0 &&
         raft_address_loopback(&a))) {
        return 0;
    }
    return fail(errmsg, errmsg_len,
                "%s: '%s' is off loopback, and peers do not authenticate "
                "each other: refused (give insecure=on to accept that "
                "anyone who can reach the port can write to the database)",
                who, text);
}

int ext_config_metrics_check(const struct ext_config *c, const char *address,
                             bool *out_tls, char *errmsg, size_t errmsg_len)
{
    struct raft_address a;
    char why[256];
    bool tls = c->tls_cert[0] != '\0' && c->tls_key[0] != '\0';

    if (raft_address_parse(address, &a, why, sizeof why) != 0) {
        return fail(errmsg, errmsg_len,
                    "metrics_listen: '%s' is not host:port: %s", address, why);
    }
    if (a.kind == RAFT_ADDRESS_NAME) {
        return fail(errmsg, errmsg_len,
                    "metrics_listen: '%s': give the IP address to serve "
                    "metrics on (127.0.0.1:9101, an interface's own, or a "
                    "wildcard), not a hostname (localhost included)",
                    address);
    }
    if (c->listen_port != 0 && a.port == c->listen_port) {
        struct raft_address l;
        if (raft_address_parse_host(c->listen_host, c->listen_port, &l, NULL,
                                    0) == 0 &&
            (raft_address_wildcard(&l) || raft_address_wildcard(&a) ||
             strcmp(l.host, a.host) == 0)) {
            char text[EXT_ADDRESS_MAX + 1];
            ext_config_listen_format(c, text, sizeof text);
            return fail(
                errmsg, errmsg_len,
                "metrics_listen: '%s' is the port the node listens "
                "on for its peers (listen %s): give the metrics "
                "another port (e.g. %u)",
                address, text,
                c->listen_port < 65535 ? (unsigned)c->listen_port + 1 : 9101u);
        }
    }
    if (!raft_address_loopback(&a) && !tls && !c->insecure) {
        return fail(errmsg, errmsg_len,
                    "metrics_listen: '%s' is off loopback, and the node has "
                    "no certificate to serve metrics with TLS (tls_cert, "
                    "tls_key; a pre-shared secret_file does not count: a "
                    "scraper cannot present it): refused (serve it on "
                    "127.0.0.1, give tls_cert/tls_key/tls_ca, or give "
                    "insecure=on to let anyone who can reach the port read "
                    "the metrics)",
                    address);
    }
    *out_tls = tls;
    return 0;
}

/* check_reaches applies check_reach to every address of @c. */
static int check_reaches(const struct ext_config *c, char *errmsg,
                         size_t errmsg_len)
{
    char text[EXT_ADDRESS_MAX + 1];
    char who[64];
    int rc = 0;

    if (c->listen_port != 0) {
        ext_config_listen_format(c, text, sizeof text);
        rc = check_reach(c, "listen", text, errmsg, errmsg_len);
    }
    if (rc == 0 && c->advertise[0] != '\0') {
        rc = check_reach(c, "advertise", c->advertise, errmsg, errmsg_len);
    }
    for (unsigned i = 0; rc == 0 && i < c->n_members; i++) {
        snprintf(who, sizeof who, "cluster: server %" PRIu64 "'s address",
                 c->members[i].id);
        rc = check_reach(c, who, c->members[i].address, errmsg, errmsg_len);
    }
    for (unsigned i = 0; rc == 0 && i < c->n_dials; i++) {
        snprintf(who, sizeof who, "dial: server %" PRIu64, c->dials[i].id);
        rc = check_reach(c, who, c->dials[i].address, errmsg, errmsg_len);
    }
    if (rc == 0 && c->join_port != 0) {
        struct raft_address a;
        raft_address_parse_host(c->join_host, c->join_port, &a, NULL, 0);
        raft_address_format(&a, text, sizeof text);
        rc = check_reach(c, "join", text, errmsg, errmsg_len);
    }
    return rc;
}

int config_auth_check(struct ext_config *c, char *errmsg, size_t errmsg_len)
{
    int rc = check_tls(c, errmsg, errmsg_len); /* sets c->tls */

    return rc != 0 ? rc : check_reaches(c, errmsg, errmsg_len);
}
