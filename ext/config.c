/* Parsing and checking of the raft_start() configuration string. */

#include "config.h"

#include "../raft/configuration.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXT__DEFAULT_ELECTION_TIMEOUT_MS 1000
#define EXT__DEFAULT_HEARTBEAT_MS 100
#define EXT__DEFAULT_EXEC_TIMEOUT_MS 5000
#define EXT__DEFAULT_LOG_MAX_MB 1024
#define EXT__DEFAULT_MAX_REQUEST_BYTES (64u * 1024 * 1024)
#define EXT__DEFAULT_SNAPSHOT_THRESHOLD 8192
#define EXT__DEFAULT_TRAILING_ENTRIES 1024
#define EXT__DEFAULT_SNAPSHOT_CHUNK_BYTES (1024u * 1024)
#define EXT__DEFAULT_FOLLOWER_APPLY_MS 20
#define EXT__DEFAULT_MAX_REQUEST_STEPS 50000000u

static int fail(char *errmsg, size_t errmsg_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, errmsg_len, fmt, ap);
    va_end(ap);
    return RAFT_INVALID;
}

/* parse_u64 reads a decimal integer in [lo, hi]; returns false if @s is not
 * one. */
static bool parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    if (!isdigit((unsigned char)s[0])) {
        return false;
    }
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) {
        return false;
    }
    *out = v;
    return true;
}

/* parse_address splits "host:port" (host numeric IPv4 or "localhost"). */
static bool parse_address(const char *s, char *host, size_t host_len,
                          uint16_t *port)
{
    const char *colon = strrchr(s, ':');
    uint64_t p;
    struct in_addr addr;
    if (colon == NULL || (size_t)(colon - s) >= host_len || colon == s) {
        return false;
    }
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    if (strcmp(host, "localhost") == 0) {
        snprintf(host, host_len, "127.0.0.1");
    }
    if (inet_pton(AF_INET, host, &addr) != 1) {
        return false;
    }
    if (!parse_u64(colon + 1, 1, 65535, &p)) {
        return false;
    }
    *port = (uint16_t)p;
    return true;
}

/* address_key parses the host:port value @val of key @key (listen, join)
 * with parse_address, naming the key when it is not one. */
static int address_key(const char *key, const char *val, char *host,
                       size_t host_len, uint16_t *port, char *errmsg,
                       size_t errmsg_len)
{
    if (!parse_address(val, host, host_len, port)) {
        return fail(errmsg, errmsg_len,
                    "%s: '%s' is not host:port (numeric IPv4 host, port "
                    "1-65535)",
                    key, val);
    }
    return 0;
}

static bool is_loopback(const char *host)
{
    struct in_addr addr;
    if (inet_pton(AF_INET, host, &addr) != 1) {
        return false;
    }
    return (ntohl(addr.s_addr) >> 24) == 127;
}

/* parse_members reads "1@127.0.0.1:7001,2@127.0.0.1:7002,..." (the value
 * of key @key: cluster or dial) into @out (EXT_MAX_NODES long: the id,
 * host and port of each) and *@out_n, refusing an id or an address given
 * twice. */
static int parse_members(const char *key, const char *value,
                         struct ext_member *out, unsigned *out_n, char *errmsg,
                         size_t errmsg_len)
{
    char buf[4096];
    char *save = NULL;
    char *item;
    unsigned n = 0;
    if (strlen(value) >= sizeof buf) {
        return fail(errmsg, errmsg_len, "%s: value too long", key);
    }
    snprintf(buf, sizeof buf, "%s", value);
    if (value[0] == ',' || strstr(value, ",,") != NULL ||
        (value[0] != '\0' && value[strlen(value) - 1] == ',')) {
        return fail(errmsg, errmsg_len, "%s: an empty member in '%s'", key,
                    value);
    }
    for (item = strtok_r(buf, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        struct ext_member *m;
        char *at = strchr(item, '@');
        uint64_t id;
        if (n == EXT_MAX_NODES) {
            return fail(errmsg, errmsg_len, "%s: more than %d members", key,
                        EXT_MAX_NODES);
        }
        if (at == NULL) {
            return fail(errmsg, errmsg_len, "%s: '%s' is not id@host:port", key,
                        item);
        }
        *at = '\0';
        if (!parse_u64(item, 1, INT64_MAX, &id)) {
            return fail(errmsg, errmsg_len,
                        "%s: '%s' is not a server id (an integer > 0)", key,
                        item);
        }
        m = &out[n];
        memset(m, 0, sizeof *m);
        m->id = id;
        if (!parse_address(at + 1, m->host, sizeof m->host, &m->port)) {
            return fail(errmsg, errmsg_len,
                        "%s: '%s' is not host:port (numeric IPv4 host, "
                        "port 1-65535)",
                        key, at + 1);
        }
        for (unsigned i = 0; i < n; i++) {
            if (out[i].id == id) {
                return fail(errmsg, errmsg_len,
                            "%s: server id %" PRIu64 " appears twice", key, id);
            }
            if (out[i].port == m->port && strcmp(out[i].host, m->host) == 0) {
                return fail(errmsg, errmsg_len,
                            "%s: address %s:%u appears twice", key, m->host,
                            m->port);
            }
        }
        n++;
    }
    if (n == 0) {
        return fail(errmsg, errmsg_len, "%s: no members given", key);
    }
    *out_n = n;
    return 0;
}

/* apply_dial sets the dial= overrides of @dial (@n_dial entries) on the
 * members of @c, refusing a server that is not one or is this server. */
static int apply_dial(struct ext_config *c, const struct ext_member *dial,
                      unsigned n_dial, char *errmsg, size_t errmsg_len)
{
    for (unsigned i = 0; i < n_dial; i++) {
        struct ext_member *m = NULL;
        if (dial[i].id == c->id) {
            return fail(errmsg, errmsg_len,
                        "dial: server %" PRIu64
                        " is this server; dial= says where to reach the "
                        "other members",
                        dial[i].id);
        }
        c->dials[i] = dial[i];
        for (unsigned k = 0; k < c->n_members; k++) {
            if (c->members[k].id == dial[i].id) {
                m = &c->members[k];
            }
        }
        if (m == NULL && c->n_members == 0) {
            continue; /* no cluster=: the stored configuration names them */
        }
        if (m == NULL) {
            return fail(errmsg, errmsg_len,
                        "dial: server %" PRIu64
                        " is not in cluster (dial= only says where to reach "
                        "a member; it adds none)",
                        dial[i].id);
        }
        snprintf(m->dial_host, sizeof m->dial_host, "%s", dial[i].host);
        m->dial_port = dial[i].port;
    }
    c->n_dials = n_dial;
    return 0;
}

void ext_member_dial(const struct ext_member *m, const char **out_host,
                     uint16_t *out_port)
{
    if (m->dial_port != 0) {
        *out_host = m->dial_host;
        *out_port = m->dial_port;
    } else {
        *out_host = m->host;
        *out_port = m->port;
    }
}

/* The keys raft_start() knows, in the README's order. */
static const char *const keys[] = {
    "id",
    "listen",
    "cluster",
    "dial",
    "dir",
    "election_timeout_ms",
    "heartbeat_ms",
    "exec_timeout_ms",
    "log_max_mb",
    "max_request_bytes",
    "log_level",
    "snapshot_threshold",
    "trailing_entries",
    "snapshot_chunk_bytes",
    "follower_apply_ms",
    "max_request_steps",
    "join",
    "force_new_cluster",
    "tls_cert",
    "tls_key",
    "tls_ca",
    "secret_file",
};

/* The integer keys: their range (as README gives it) and their field. */
struct int_key {
    const char *name;
    uint64_t lo;    /* smallest value accepted */
    uint64_t hi;    /* largest value accepted */
    uint64_t scale; /* the field holds value * scale (MiB to bytes) */
    size_t offset;  /* of the field in struct ext_config */
    bool narrow;    /* the field is an unsigned, else a uint64_t */
};

#define EXT__INT_KEY(name, lo, hi, scale, field, narrow)                       \
    {                                                                          \
        name, lo, hi, scale, offsetof(struct ext_config, field), narrow        \
    }

static const struct int_key int_keys[] = {
    EXT__INT_KEY("election_timeout_ms", 10, 600000, 1, election_timeout_ms,
                 true),
    EXT__INT_KEY("heartbeat_ms", 1, 60000, 1, heartbeat_ms, true),
    EXT__INT_KEY("exec_timeout_ms", 1, 3600000, 1, exec_timeout_ms, true),
    EXT__INT_KEY("log_max_mb", 1, 1024 * 1024, 1024 * 1024, log_max_bytes,
                 false),
    EXT__INT_KEY("max_request_bytes", 1024, 1024u * 1024 * 1024, 1,
                 max_request_bytes, false),
    EXT__INT_KEY("snapshot_threshold", 16, UINT32_MAX, 1, snapshot_threshold,
                 false),
    EXT__INT_KEY("trailing_entries", 0, UINT32_MAX, 1, trailing_entries, false),
    EXT__INT_KEY("snapshot_chunk_bytes", 4096, 64u * 1024 * 1024, 1,
                 snapshot_chunk_bytes, false),
    EXT__INT_KEY("follower_apply_ms", 0, 1000, 1, follower_apply_ms, true),
    EXT__INT_KEY("max_request_steps", 0, 1000000000000000ull, 1,
                 max_request_steps, false),
};

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

/* path_key_field returns the field of @c that path key @key fills, or NULL
 * when @key is none. */
static char *path_key_field(struct ext_config *c, const char *key)
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

/* int_key_find returns the integer key named @key, or NULL. */
static const struct int_key *int_key_find(const char *key)
{
    for (size_t i = 0; i < sizeof int_keys / sizeof int_keys[0]; i++) {
        if (strcmp(key, int_keys[i].name) == 0) {
            return &int_keys[i];
        }
    }
    return NULL;
}

/* int_key_store writes @v (in range, so the product fits) to @c's field. */
static void int_key_store(const struct int_key *k, struct ext_config *c,
                          uint64_t v)
{
    char *field = (char *)c + k->offset;
    if (k->narrow) {
        unsigned u = (unsigned)(v * k->scale);
        memcpy(field, &u, sizeof u);
    } else {
        uint64_t w = v * k->scale;
        memcpy(field, &w, sizeof w);
    }
}

static int key_index(const char *key)
{
    for (int i = 0; i < (int)(sizeof keys / sizeof keys[0]); i++) {
        if (strcmp(key, keys[i]) == 0) {
            return i;
        }
    }
    return -1;
}

static bool parse_level(const char *v, int *out)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(v, names[i]) == 0) {
            *out = i;
            return true;
        }
    }
    return false;
}

bool ext_config_cluster(const struct ext_config *c,
                        struct raft_configuration *out)
{
    raft_configuration_init(out);
    for (unsigned i = 0; i < c->n_members; i++) {
        const struct ext_member *m = &c->members[i];
        char address[96];
        snprintf(address, sizeof address, "%s:%u", m->host, m->port);
        /* Cannot fail: ids are distinct, addresses short, n in bounds. */
        raft_configuration_add(out, m->id, RAFT_VOTER, address);
    }
    return c->n_members > 0;
}

int ext_config_dial(const struct ext_config *c, raft_id id, const char *address,
                    char *out_host, size_t host_len, uint16_t *out_port)
{
    char host[64];
    uint16_t port;
    for (unsigned i = 0; i < c->n_dials; i++) {
        if (c->dials[i].id == id) {
            snprintf(out_host, host_len, "%s", c->dials[i].host);
            *out_port = c->dials[i].port;
            return 0;
        }
    }
    if (!parse_address(address, host, sizeof host, &port)) {
        return RAFT_INVALID;
    }
    snprintf(out_host, host_len, "%s", host);
    *out_port = port;
    return 0;
}

int ext_config_listen_set(struct ext_config *c, const char *address,
                          char *errmsg, size_t errmsg_len)
{
    char host[64];
    uint16_t port;
    if (!parse_address(address, host, sizeof host, &port)) {
        return fail(errmsg, errmsg_len,
                    "listen: this server's address '%s' in the stored "
                    "configuration is not host:port; give listen=",
                    address);
    }
    if (!is_loopback(host)) {
        return fail(errmsg, errmsg_len,
                    "listen: '%s' (this server's address in the stored "
                    "configuration) is off loopback; refused until nodes "
                    "authenticate each other",
                    address);
    }
    snprintf(c->listen_host, sizeof c->listen_host, "%s", host);
    c->listen_port = port;
    return 0;
}

int ext_config_parse(const char *text, const char *db_path,
                     struct ext_config *out, char *errmsg, size_t errmsg_len)
{
    struct ext_config *c = calloc(1, sizeof *c);
    char *copy = strdup(text == NULL ? "" : text);
    char *save = NULL;
    char *tok;
    bool have_id = false, have_cluster = false, have_listen = false;
    char listen_raw[128] = "";
    struct ext_member dial[EXT_MAX_NODES];
    unsigned n_dial = 0;
    unsigned seen = 0;
    const struct int_key *ik;
    char *field;
    uint64_t v;
    int rc = 0;

    if (c == NULL || copy == NULL) {
        rc = RAFT_NOMEM;
        snprintf(errmsg, errmsg_len, "out of memory");
        goto out;
    }
    c->election_timeout_ms = EXT__DEFAULT_ELECTION_TIMEOUT_MS;
    c->heartbeat_ms = EXT__DEFAULT_HEARTBEAT_MS;
    c->exec_timeout_ms = EXT__DEFAULT_EXEC_TIMEOUT_MS;
    c->log_max_bytes = (uint64_t)EXT__DEFAULT_LOG_MAX_MB * 1024 * 1024;
    c->max_request_bytes = EXT__DEFAULT_MAX_REQUEST_BYTES;
    c->snapshot_threshold = EXT__DEFAULT_SNAPSHOT_THRESHOLD;
    c->trailing_entries = EXT__DEFAULT_TRAILING_ENTRIES;
    c->snapshot_chunk_bytes = EXT__DEFAULT_SNAPSHOT_CHUNK_BYTES;
    c->follower_apply_ms = EXT__DEFAULT_FOLLOWER_APPLY_MS;
    c->max_request_steps = EXT__DEFAULT_MAX_REQUEST_STEPS;
    c->log_level = RAFT_LOG_WARN;
    snprintf(c->dir, sizeof c->dir, "%s-raft", db_path);

    for (tok = strtok_r(copy, " \t\r\n", &save); tok != NULL;
         tok = strtok_r(NULL, " \t\r\n", &save)) {
        char *eq = strchr(tok, '=');
        const char *key = tok;
        const char *val;
        if (eq == NULL) {
            rc = fail(errmsg, errmsg_len, "'%s' is not key=value", tok);
            goto out;
        }
        *eq = '\0';
        val = eq + 1;
        {
            int k = key_index(key);
            if (k >= 0 && (seen & (1u << k))) {
                rc = fail(errmsg, errmsg_len, "%s: given twice", key);
                goto out;
            }
            if (k >= 0) {
                seen |= 1u << k;
            }
        }
        if (strcmp(key, "id") == 0) {
            if (!parse_u64(val, 1, INT64_MAX, &v)) {
                rc = fail(errmsg, errmsg_len,
                          "id: '%s' is not a server id (an integer > 0)", val);
                goto out;
            }
            c->id = v;
            have_id = true;
        } else if (strcmp(key, "listen") == 0) {
            snprintf(listen_raw, sizeof listen_raw, "%s", val);
            rc = address_key(key, val, c->listen_host, sizeof c->listen_host,
                             &c->listen_port, errmsg, errmsg_len);
            if (rc != 0) {
                goto out;
            }
            have_listen = true;
        } else if (strcmp(key, "cluster") == 0) {
            rc = parse_members(key, val, c->members, &c->n_members, errmsg,
                               errmsg_len);
            if (rc != 0) {
                goto out;
            }
            have_cluster = true;
        } else if (strcmp(key, "dial") == 0) {
            rc = parse_members(key, val, dial, &n_dial, errmsg, errmsg_len);
            if (rc != 0) {
                goto out;
            }
        } else if (strcmp(key, "join") == 0) {
            rc = address_key(key, val, c->join_host, sizeof c->join_host,
                             &c->join_port, errmsg, errmsg_len);
            if (rc != 0) {
                goto out;
            }
        } else if (strcmp(key, "force_new_cluster") == 0) {
            if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0) {
                rc = fail(errmsg, errmsg_len,
                          "force_new_cluster: '%s' is not 0 or 1", val);
                goto out;
            }
            c->force_new_cluster = val[0] == '1';
        } else if (strcmp(key, "dir") == 0) {
            if (val[0] == '\0' || strlen(val) >= sizeof c->dir) {
                rc = fail(errmsg, errmsg_len, "dir: empty or too long");
                goto out;
            }
            snprintf(c->dir, sizeof c->dir, "%s", val);
        } else if ((field = path_key_field(c, key)) != NULL) {
            if (val[0] == '\0' || strlen(val) >= sizeof c->tls_cert) {
                rc = fail(errmsg, errmsg_len, "%s: empty or too long", key);
                goto out;
            }
            snprintf(field, sizeof c->tls_cert, "%s", val);
        } else if ((ik = int_key_find(key)) != NULL) {
            if (!parse_u64(val, ik->lo, ik->hi, &v)) {
                rc = fail(errmsg, errmsg_len,
                          "%s: '%s' is not an integer in [%" PRIu64 ", %" PRIu64
                          "]",
                          key, val, ik->lo, ik->hi);
                goto out;
            }
            int_key_store(ik, c, v);
        } else if (strcmp(key, "log_level") == 0) {
            if (!parse_level(val, &c->log_level)) {
                rc = fail(errmsg, errmsg_len,
                          "log_level: '%s' is not one of debug, info, "
                          "warn, error",
                          val);
                goto out;
            }
        } else {
            rc = fail(errmsg, errmsg_len,
                      "unknown key '%s' (known: id, listen, cluster, dial, "
                      "dir, "
                      "election_timeout_ms, heartbeat_ms, exec_timeout_ms, "
                      "log_max_mb, max_request_bytes, log_level, "
                      "snapshot_threshold, trailing_entries, "
                      "snapshot_chunk_bytes, follower_apply_ms, "
                      "max_request_steps, join, force_new_cluster, "
                      "tls_cert, tls_key, tls_ca, secret_file)",
                      key);
            goto out;
        }
    }

    if (!have_id) {
        rc = fail(errmsg, errmsg_len, "id: missing (this server's id)");
        goto out;
    }
    if (c->join_port != 0 && have_cluster) {
        rc = fail(errmsg, errmsg_len,
                  "join: cannot be given with cluster= (cluster= founds a "
                  "new cluster, join= enters an existing one: give one)");
        goto out;
    }
    if (c->join_port != 0 && c->force_new_cluster) {
        rc = fail(errmsg, errmsg_len,
                  "join: cannot be given with force_new_cluster=1 (which "
                  "restarts a surviving member alone)");
        goto out;
    }
    if (c->join_port != 0 && !have_listen) {
        rc = fail(errmsg, errmsg_len,
                  "join: needs listen= (the address the cluster will know "
                  "this node by)");
        goto out;
    }
    if (have_cluster) {
        const struct ext_member *self = NULL;
        for (unsigned i = 0; i < c->n_members; i++) {
            if (c->members[i].id == c->id) {
                self = &c->members[i];
            }
        }
        if (self == NULL) {
            rc = fail(errmsg, errmsg_len,
                      "id: server %" PRIu64 " is not in cluster", c->id);
            goto out;
        }
        if (!have_listen) {
            snprintf(c->listen_host, sizeof c->listen_host, "%s", self->host);
            c->listen_port = self->port;
        } else if (c->listen_port != self->port ||
                   (is_loopback(c->listen_host) &&
                    strcmp(c->listen_host, self->host) != 0)) {
            /* (An address off loopback gets the error below.) */
            rc = fail(errmsg, errmsg_len,
                      "listen: %s:%u differs from server %" PRIu64
                      "'s address %s:%u in cluster; peers dial the cluster "
                      "address, so they would never reach this node",
                      c->listen_host, c->listen_port, c->id, self->host,
                      self->port);
            goto out;
        }
    }
    rc = apply_dial(c, dial, n_dial, errmsg, errmsg_len);
    if (rc == 0) {
        rc = check_tls(c, errmsg, errmsg_len);
    }
    if (rc != 0) {
        goto out;
    }
    if (c->listen_port != 0 && !is_loopback(c->listen_host)) {
        rc = fail(errmsg, errmsg_len,
                  "listen: '%s' is off loopback; refused until nodes "
                  "authenticate each other (use 127.0.0.1)",
                  have_listen ? listen_raw : c->listen_host);
        goto out;
    }
    /* One entry must always fit in the log, even beside others: a request
     * the log can never take would stop every node's log for good. */
    if (c->max_request_bytes > c->log_max_bytes / 4) {
        if (seen & (1u << key_index("max_request_bytes"))) {
            rc = fail(errmsg, errmsg_len,
                      "max_request_bytes: %" PRIu64
                      " is more than a "
                      "quarter of log_max_mb (%" PRIu64
                      " bytes); a "
                      "request that large could fill the log for good: "
                      "raise log_max_mb or lower max_request_bytes",
                      c->max_request_bytes, c->log_max_bytes);
            goto out;
        }
        c->max_request_bytes = c->log_max_bytes / 4;
    }
    if (c->heartbeat_ms >= c->election_timeout_ms) {
        rc = fail(errmsg, errmsg_len,
                  "heartbeat_ms: %u must be below election_timeout_ms (%u)",
                  c->heartbeat_ms, c->election_timeout_ms);
        goto out;
    }
    *out = *c;

out:
    free(copy);
    free(c);
    return rc;
}
