/* Parsing and checking of the raft_start() configuration string. */

#include "config.h"
#include "config_auth.h"

#include "../../raft/configuration.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXT__DEFAULT_ELECTION_TIMEOUT_MS 1000
#define EXT__DEFAULT_HEARTBEAT_MS 100
#define EXT__DEFAULT_EXEC_TIMEOUT_MS 5000
#define EXT__DEFAULT_LEASE_TIMEOUT_MS 30000
#define EXT__DEFAULT_LOG_MAX_MB 1024
#define EXT__DEFAULT_MAX_REQUEST_BYTES (64u * 1024 * 1024)
#define EXT__DEFAULT_SNAPSHOT_THRESHOLD 8192
#define EXT__DEFAULT_TRAILING_ENTRIES 1024
#define EXT__DEFAULT_SNAPSHOT_CHUNK_BYTES (1024u * 1024)
/* A snapshot transfer's pace while writes go on, MiB per second; 0:
 * unpaced (docs/performance.md, "Again with the transfer paced at 100
 * MiB/s": the 1-client write p99 during a join under writes 1.40 x and
 * 1.04 x its value without one at 0.1 and 1 GB, 5.3 x and 2.9 x
 * unpaced; joins of 0.1 to 4 GB under writes complete). */
#define EXT__DEFAULT_SNAPSHOT_RATE_MB 100
#define EXT__DEFAULT_FOLLOWER_APPLY_MS 20
#define EXT__DEFAULT_MAX_REQUEST_STEPS 50000000u
#define EXT__DEFAULT_REQUEST_ID_WINDOW 100000u
#define EXT__DEFAULT_REQUEST_ID_WINDOW_MS 86400000u
#define EXT__DEFAULT_MAX_RESULT_BYTES (16u * 1024 * 1024)
/* 64 plain writers of another process each hold a place while they wait
 * for the lease, and the holder one more: at 64 the last writers met
 * "busy" and SQLite's busy handler's sleeps, 447 commits a second with a
 * p99 of 4.9 s; at 256, 661 a second and 132 ms (docs/performance.md). */
#define EXT__DEFAULT_SOCKET_MAX_CLIENTS 256

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

/* address_value parses the address @val given for @who (a key, or "key:
 * server N's address") into @out, refusing a wildcard unless
 * @wildcard_ok (only listen= takes one: peers cannot dial it). */
static int address_value(const char *who, const char *val, bool wildcard_ok,
                         struct raft_address *out, char *errmsg,
                         size_t errmsg_len)
{
    char why[160];

    if (raft_address_parse(val, out, why, sizeof why) != 0) {
        return fail(errmsg, errmsg_len, "%s: '%s' is not host:port: %s", who,
                    val, why);
    }
    if (!wildcard_ok && raft_address_wildcard(out)) {
        return fail(errmsg, errmsg_len,
                    "%s: '%s' is a wildcard, which only listen= takes "
                    "(peers cannot dial it)",
                    who, val);
    }
    return 0;
}

/* set_listen makes @a the address @c listens on: its IP, 127.0.0.1 for
 * localhost; another hostname is refused (what to bind is an IP). */
static int set_listen(struct ext_config *c, const struct raft_address *a,
                      const char *val, char *errmsg, size_t errmsg_len)
{
    if (a->kind == RAFT_ADDRESS_NAME && !raft_address_loopback(a)) {
        return fail(errmsg, errmsg_len,
                    "listen: '%s' is a hostname; listen= takes the IP to "
                    "bind (0.0.0.0:%u or [::]:%u for every interface, or "
                    "an address of this machine) and advertise= the name "
                    "peers dial",
                    val, a->port, a->port);
    }
    snprintf(c->listen_host, sizeof c->listen_host, "%s",
             a->kind == RAFT_ADDRESS_NAME ? "127.0.0.1" : a->host);
    c->listen_port = a->port;
    return 0;
}

/* parse_members reads "1@127.0.0.1:7001,2@127.0.0.1:7002,..." (the value
 * of key @key: cluster or dial) into @out (EXT_MAX_NODES long: the id and
 * address of each) and *@out_n, refusing an id or an address given
 * twice. */
static int parse_members(const char *key, const char *value,
                         struct ext_member *out, unsigned *out_n, char *errmsg,
                         size_t errmsg_len)
{
    struct raft_address addrs[EXT_MAX_NODES];
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
        int rc;
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
        rc = address_value(key, at + 1, false, &addrs[n], errmsg, errmsg_len);
        if (rc != 0) {
            return rc;
        }
        raft_address_format(&addrs[n], m->address, sizeof m->address);
        for (unsigned i = 0; i < n; i++) {
            if (out[i].id == id) {
                return fail(errmsg, errmsg_len,
                            "%s: server id %" PRIu64 " appears twice", key, id);
            }
            if (raft_address_equal(&addrs[i], &addrs[n])) {
                return fail(errmsg, errmsg_len, "%s: address %s appears twice",
                            key, m->address);
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
        snprintf(m->dial, sizeof m->dial, "%s", dial[i].address);
    }
    c->n_dials = n_dial;
    return 0;
}

/* socket_group_value resolves group name @val of socket_group= into @c. */
static int socket_group_value(const char *val, struct ext_config *c,
                              char *errmsg, size_t errmsg_len)
{
    struct group gr, *found = NULL;
    char buf[4096];
    int e;
    if (val[0] == '\0' || strlen(val) >= sizeof c->socket_group) {
        return fail(errmsg, errmsg_len, "socket_group: empty or too long");
    }
    e = getgrnam_r(val, &gr, buf, sizeof buf, &found);
    if (found == NULL) {
        return fail(errmsg, errmsg_len,
                    "socket_group: no group named '%s' on this machine%s%s",
                    val, e != 0 ? ": " : "", e != 0 ? strerror(e) : "");
    }
    snprintf(c->socket_group, sizeof c->socket_group, "%s", val);
    c->socket_gid = (long)gr.gr_gid;
    return 0;
}

/* The keys raft_start() knows (docs/reference.md lists them). */
static const char *const keys[] = {
    "id",
    "listen",
    "advertise",
    "cluster",
    "dial",
    "dir",
    "election_timeout_ms",
    "heartbeat_ms",
    "exec_timeout_ms",
    "lease_timeout_ms",
    "log_max_mb",
    "max_request_bytes",
    "log_level",
    "snapshot_threshold",
    "trailing_entries",
    "snapshot_chunk_bytes",
    "snapshot_rate_mb",
    "follower_apply_ms",
    "max_staleness_ms",
    "max_request_steps",
    "request_id_window",
    "request_id_window_ms",
    "max_result_bytes",
    "join",
    "force_new_cluster",
    "bootstrap_from",
    "tls_cert",
    "tls_key",
    "tls_ca",
    "secret_file",
    "insecure",
    "checksum",
    "socket",
    "socket_group",
    "socket_max_clients",
    "repair",
};

_Static_assert(sizeof keys / sizeof keys[0] <= 64,
               "the parser's seen mask is a uint64_t");

/* The integer keys: their range (as docs/configuration.md gives it) and their field. */
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
    EXT__INT_KEY("lease_timeout_ms", 10, 3600000, 1, lease_timeout_ms, true),
    EXT__INT_KEY("log_max_mb", 1, 1024 * 1024, 1024 * 1024, log_max_bytes,
                 false),
    EXT__INT_KEY("max_request_bytes", 1024, 1024u * 1024 * 1024, 1,
                 max_request_bytes, false),
    EXT__INT_KEY("snapshot_threshold", 16, UINT32_MAX, 1, snapshot_threshold,
                 false),
    EXT__INT_KEY("trailing_entries", 0, UINT32_MAX, 1, trailing_entries, false),
    EXT__INT_KEY("snapshot_chunk_bytes", 4096, 64u * 1024 * 1024, 1,
                 snapshot_chunk_bytes, false),
    EXT__INT_KEY("snapshot_rate_mb", 0, 1024 * 1024, 1024 * 1024,
                 snapshot_rate_bytes, false),
    EXT__INT_KEY("follower_apply_ms", 0, 1000, 1, follower_apply_ms, true),
    EXT__INT_KEY("max_staleness_ms", 0, 3600000, 1, max_staleness_ms, true),
    EXT__INT_KEY("max_request_steps", 0, 1000000000000000ull, 1,
                 max_request_steps, false),
    EXT__INT_KEY("request_id_window", 1, 100000000, 1, request_id_window,
                 false),
    EXT__INT_KEY("request_id_window_ms", 1, 10ull * 366 * 86400000, 1,
                 request_id_window_ms, false),
    /* At most 64 MiB: the JSON, escaped once more, must fit an attach
     * answer (EXT_ATTACH_FRAME_MAX, 192 MiB). */
    EXT__INT_KEY("max_result_bytes", 1024, 64u * 1024 * 1024, 1,
                 max_result_bytes, false),
    EXT__INT_KEY("socket_max_clients", 1, 1024, 1, socket_max_clients, true),
};

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
        /* Cannot fail: ids are distinct, addresses short, n in bounds. */
        raft_configuration_add(out, m->id, RAFT_VOTER, m->address);
    }
    return c->n_members > 0;
}

int ext_config_dial(const struct ext_config *c, raft_id id, const char *address,
                    char *out_host, size_t host_len, uint16_t *out_port)
{
    struct raft_address a;
    for (unsigned i = 0; i < c->n_dials; i++) {
        if (c->dials[i].id == id) {
            address = c->dials[i].address;
        }
    }
    if (raft_address_parse(address, &a, NULL, 0) != 0) {
        return RAFT_INVALID;
    }
    snprintf(out_host, host_len, "%s", a.host);
    *out_port = a.port;
    return 0;
}

void ext_config_listen_format(const struct ext_config *c, char *out, size_t len)
{
    bool ipv6 = strchr(c->listen_host, ':') != NULL;
    snprintf(out, len, ipv6 ? "[%s]:%u" : "%s:%u", c->listen_host,
             c->listen_port);
}

/* advertise_set takes @a (@address, this server's address in the stored
 * configuration, parsed) as the advertised address of @c, whose listen= is
 * a wildcard given without advertise= nor cluster=. */
static int advertise_set(struct ext_config *c, const struct raft_address *a,
                         const char *address, char *errmsg, size_t errmsg_len)
{
    if (raft_address_wildcard(a)) {
        return fail(errmsg, errmsg_len,
                    "listen: this server's address '%s' in the stored "
                    "configuration is a wildcard; give advertise=",
                    address);
    }
    if (a->port != c->listen_port) {
        return fail(errmsg, errmsg_len,
                    "listen: port %u differs from this server's address "
                    "'%s' in the stored configuration; give advertise= "
                    "when they differ on purpose (NAT, a proxy)",
                    c->listen_port, address);
    }
    raft_address_format(a, c->advertise, sizeof c->advertise);
    return 0;
}

int ext_config_listen_set(struct ext_config *c, const char *address,
                          char *errmsg, size_t errmsg_len)
{
    struct raft_address a;
    char why[160];
    int rc = raft_address_parse(address, &a, why, sizeof why);
    if (rc == 0 && c->listen_port != 0 && c->advertise[0] == '\0') {
        return advertise_set(c, &a, address, errmsg, errmsg_len);
    }
    if (rc == 0 && raft_address_wildcard(&a)) {
        snprintf(why, sizeof why, "a wildcard");
        rc = RAFT_INVALID;
    }
    if (rc != 0) {
        return fail(errmsg, errmsg_len,
                    "listen: this server's address '%s' in the stored "
                    "configuration is not host:port (%s); give listen=",
                    address, why);
    }
    if (a.kind == RAFT_ADDRESS_NAME && !raft_address_loopback(&a)) {
        return fail(errmsg, errmsg_len,
                    "listen: this server's address '%s' in the stored "
                    "configuration is a hostname; give listen= (the IP to "
                    "bind, e.g. 0.0.0.0:%u) and advertise=%s",
                    address, a.port, address);
    }
    if (!c->insecure && !ext_config_peers_authenticated(c) &&
        !raft_address_loopback(&a)) {
        return fail(errmsg, errmsg_len,
                    "listen: '%s' (this server's address in the stored "
                    "configuration) is off loopback, and peers do not "
                    "authenticate each other: give insecure=on to accept "
                    "that anyone who can reach the port can write to the "
                    "database",
                    address);
    }
    set_listen(c, &a, address, errmsg, errmsg_len); /* cannot fail */
    raft_address_format(&a, c->advertise, sizeof c->advertise);
    return 0;
}

/* differs refuses @a, given for @key, when it is not @self's address in
 * cluster= (peers dial that one). */
static int differs(const char *key, const struct raft_address *a,
                   const struct ext_member *self, char *errmsg,
                   size_t errmsg_len)
{
    struct raft_address s;
    char text[EXT_ADDRESS_MAX + 1];

    raft_address_parse(self->address, &s, NULL, 0); /* cannot fail */
    if (raft_address_equal(a, &s)) {
        return 0;
    }
    raft_address_format(a, text, sizeof text);
    return fail(errmsg, errmsg_len,
                "%s: %s differs from server %" PRIu64
                "'s address %s in cluster; peers dial the cluster "
                "address, so they would never reach this node",
                key, text, self->id, self->address);
}

/* settle_advertise sets the address @c listens on and the one it
 * advertises from listen= (@listen, NULL when not given), advertise=
 * (@adv, likewise) and this id's cluster= address, and checks they agree
 * (ext_config_parse says how). */
static int settle_advertise(struct ext_config *c,
                            const struct raft_address *listen,
                            const struct raft_address *adv, char *errmsg,
                            size_t errmsg_len)
{
    const struct ext_member *self = NULL;
    struct raft_address s;
    int rc = 0;

    for (unsigned i = 0; i < c->n_members; i++) {
        if (c->members[i].id == c->id) {
            self = &c->members[i];
        }
    }
    if (c->n_members > 0 && self == NULL) {
        return fail(errmsg, errmsg_len,
                    "id: server %" PRIu64 " is not in cluster", c->id);
    }
    if (adv != NULL || (listen != NULL && !raft_address_wildcard(listen))) {
        const struct raft_address *a = adv != NULL ? adv : listen;
        if (self != NULL) {
            rc = differs(adv != NULL ? "advertise" : "listen", a, self, errmsg,
                         errmsg_len);
        }
        raft_address_format(a, c->advertise, sizeof c->advertise);
        return rc;
    }
    if (self == NULL) {
        char text[EXT_ADDRESS_MAX + 1];
        if (listen == NULL || !ext_config_join(c)) {
            return 0; /* the stored configuration will tell */
        }
        ext_config_listen_format(c, text, sizeof text);
        return fail(errmsg, errmsg_len,
                    "listen: %s is a wildcard: give advertise= (the address "
                    "peers dial to reach this node) or a cluster= entry for "
                    "server %" PRIu64,
                    text, c->id);
    }
    raft_address_parse(self->address, &s, NULL, 0); /* cannot fail */
    if (listen == NULL && s.kind == RAFT_ADDRESS_NAME &&
        !raft_address_loopback(&s)) {
        return fail(errmsg, errmsg_len,
                    "listen: missing, and server %" PRIu64
                    "'s address %s in cluster is a hostname: give listen= "
                    "(the IP to bind, e.g. 0.0.0.0:%u)",
                    c->id, self->address, s.port);
    }
    if (listen != NULL && listen->port != s.port) {
        return fail(errmsg, errmsg_len,
                    "listen: port %u differs from server %" PRIu64
                    "'s address %s in cluster; give advertise= when they "
                    "differ on purpose (NAT, a proxy)",
                    listen->port, c->id, self->address);
    }
    if (listen == NULL) {
        rc = set_listen(c, &s, self->address, errmsg, errmsg_len);
    }
    snprintf(c->advertise, sizeof c->advertise, "%s", self->address);
    return rc;
}

/* check_list_blanks refuses @text when a blank splits the value of a
 * list key (cluster=, dial=): keys are separated by blanks, so the list's
 * tail would read as a token of its own (and its head, ending with a
 * comma, as an empty member). Returns 0 or RAFT_INVALID with the
 * message. */
static int check_list_blanks(const char *text, char *errmsg, size_t errmsg_len)
{
    static const char blanks[] = " \t\r\n";
    const char *list = NULL; /* the previous token, when a list key's */
    size_t list_len = 0;

    for (const char *p = text + strspn(text, blanks); *p != '\0';
         p += strspn(p, blanks)) {
        size_t len = strcspn(p, blanks);
        const char *eq = memchr(p, '=', len);

        if (eq == NULL && list != NULL) {
            return fail(errmsg, errmsg_len,
                        "%.*s: a blank inside the %.*s= list, before "
                        "'%.*s': write its entries separated by commas only, "
                        "without blanks (id@host:port,id@host:port)",
                        (int)list_len, list, (int)list_len, list, (int)len, p);
        }
        list = NULL;
        if (eq != NULL && ((eq - p == 7 && strncmp(p, "cluster", 7) == 0) ||
                           (eq - p == 4 && strncmp(p, "dial", 4) == 0))) {
            list = p;
            list_len = (size_t)(eq - p);
        }
        p += len;
    }
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
    bool have_advertise = false;
    struct raft_address listen, advertise;
    struct ext_member dial[EXT_MAX_NODES];
    unsigned n_dial = 0;
    uint64_t seen = 0; /* bit k: keys[k] was given */
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
    c->lease_timeout_ms = EXT__DEFAULT_LEASE_TIMEOUT_MS;
    c->log_max_bytes = (uint64_t)EXT__DEFAULT_LOG_MAX_MB * 1024 * 1024;
    c->max_request_bytes = EXT__DEFAULT_MAX_REQUEST_BYTES;
    c->snapshot_threshold = EXT__DEFAULT_SNAPSHOT_THRESHOLD;
    c->trailing_entries = EXT__DEFAULT_TRAILING_ENTRIES;
    c->snapshot_chunk_bytes = EXT__DEFAULT_SNAPSHOT_CHUNK_BYTES;
    c->snapshot_rate_bytes = (uint64_t)EXT__DEFAULT_SNAPSHOT_RATE_MB << 20;
    c->follower_apply_ms = EXT__DEFAULT_FOLLOWER_APPLY_MS;
    c->max_request_steps = EXT__DEFAULT_MAX_REQUEST_STEPS;
    c->request_id_window = EXT__DEFAULT_REQUEST_ID_WINDOW;
    c->request_id_window_ms = EXT__DEFAULT_REQUEST_ID_WINDOW_MS;
    c->max_result_bytes = EXT__DEFAULT_MAX_RESULT_BYTES;
    c->log_level = RAFT_LOG_WARN;
    c->checksum = true;
    snprintf(c->dir, sizeof c->dir, "%s-raft", db_path);
    c->socket = true;
    c->socket_max_clients = EXT__DEFAULT_SOCKET_MAX_CLIENTS;
    c->socket_gid = -1;

    rc = check_list_blanks(copy, errmsg, errmsg_len);
    if (rc != 0) {
        goto out;
    }
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
            if (k >= 0 && (seen & (1ull << k))) {
                rc = fail(errmsg, errmsg_len, "%s: given twice", key);
                goto out;
            }
            if (k >= 0) {
                seen |= 1ull << k;
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
            rc = address_value(key, val, true, &listen, errmsg, errmsg_len);
            if (rc == 0) {
                rc = set_listen(c, &listen, val, errmsg, errmsg_len);
            }
            if (rc != 0) {
                goto out;
            }
            have_listen = true;
        } else if (strcmp(key, "advertise") == 0) {
            rc = address_value(key, val, false, &advertise, errmsg, errmsg_len);
            if (rc != 0) {
                goto out;
            }
            raft_address_format(&advertise, c->advertise, sizeof c->advertise);
            have_advertise = true;
        } else if (strcmp(key, "insecure") == 0 ||
                   strcmp(key, "checksum") == 0) {
            if (strcmp(val, "on") != 0 && strcmp(val, "off") != 0) {
                rc = fail(errmsg, errmsg_len, "%s: '%s' is not on or off", key,
                          val);
                goto out;
            }
            *(key[0] == 'i' ? &c->insecure : &c->checksum) = val[1] == 'n';
        } else if (strcmp(key, "repair") == 0) {
            if (strcmp(val, "auto") != 0 && strcmp(val, "manual") != 0) {
                rc = fail(errmsg, errmsg_len,
                          "repair: '%s' is not auto or manual", val);
                goto out;
            }
            c->repair_manual = val[0] == 'm';
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
            struct raft_address a;
            rc = address_value(key, val, false, &a, errmsg, errmsg_len);
            if (rc != 0) {
                goto out;
            }
            snprintf(c->join_host, sizeof c->join_host, "%s", a.host);
            c->join_port = a.port;
        } else if (strcmp(key, "force_new_cluster") == 0) {
            if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0) {
                rc = fail(errmsg, errmsg_len,
                          "force_new_cluster: '%s' is not 0 or 1", val);
                goto out;
            }
            c->force_new_cluster = val[0] == '1';
        } else if (strcmp(key, "bootstrap_from") == 0) {
            if (val[0] == '\0' || strlen(val) >= sizeof c->bootstrap_from) {
                rc = fail(errmsg, errmsg_len,
                          "bootstrap_from: empty or too long");
                goto out;
            }
            snprintf(c->bootstrap_from, sizeof c->bootstrap_from, "%s", val);
        } else if (strcmp(key, "dir") == 0) {
            if (val[0] == '\0' || strlen(val) >= sizeof c->dir) {
                rc = fail(errmsg, errmsg_len, "dir: empty or too long");
                goto out;
            }
            snprintf(c->dir, sizeof c->dir, "%s", val);
        } else if (strcmp(key, "socket") == 0) {
            if (strcmp(val, "on") != 0 && strcmp(val, "off") != 0) {
                rc = fail(errmsg, errmsg_len, "socket: '%s' is not on or off",
                          val);
                goto out;
            }
            c->socket = val[1] == 'n';
        } else if (strcmp(key, "socket_group") == 0) {
            rc = socket_group_value(val, c, errmsg, errmsg_len);
            if (rc != 0) {
                goto out;
            }
        } else if ((field = config_auth_field(c, key)) != NULL) {
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
            rc = fail(
                errmsg, errmsg_len,
                "unknown key '%s' (known: id, listen, advertise, "
                "cluster, dial, dir, "
                "election_timeout_ms, heartbeat_ms, exec_timeout_ms, "
                "lease_timeout_ms, log_max_mb, max_request_bytes, log_level, "
                "snapshot_threshold, trailing_entries, "
                "snapshot_chunk_bytes, snapshot_rate_mb, follower_apply_ms, "
                "max_staleness_ms, max_request_steps, request_id_window, "
                "request_id_window_ms, max_result_bytes, join, "
                "force_new_cluster, bootstrap_from, "
                "insecure, tls_cert, tls_key, tls_ca, secret_file, socket, "
                "socket_group, socket_max_clients, repair, checksum)",
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
    if (c->bootstrap_from[0] != '\0' && !have_cluster) {
        rc = fail(errmsg, errmsg_len,
                  "bootstrap_from: needs cluster= (it fills the first node "
                  "of a new cluster; a joining node receives the data as a "
                  "snapshot)");
        goto out;
    }
    if (c->bootstrap_from[0] != '\0' && c->force_new_cluster) {
        rc = fail(errmsg, errmsg_len,
                  "bootstrap_from: cannot be given with force_new_cluster=1");
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
    if (have_advertise && !have_listen) {
        rc = fail(errmsg, errmsg_len,
                  "advertise: needs listen= (the address to listen on; "
                  "advertise= is the one peers dial)");
        goto out;
    }
    rc = apply_dial(c, dial, n_dial, errmsg, errmsg_len);
    if (rc == 0) {
        rc = config_auth_check(c, errmsg, errmsg_len);
    }
    if (rc == 0) {
        rc = settle_advertise(c, have_listen ? &listen : NULL,
                              have_advertise ? &advertise : NULL, errmsg,
                              errmsg_len);
    }
    if (rc != 0) {
        goto out;
    }
    /* One entry must always fit in the log, even beside others: a request
     * the log can never take would stop every node's log for good. */
    if (c->max_request_bytes > c->log_max_bytes / 4) {
        if (seen & (1ull << key_index("max_request_bytes"))) {
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

/* parent_of writes into @out (@out_len bytes) the directory that holds
 * @path: "." for a bare name, "/" for a name in the root. */
static void parent_of(const char *path, char *out, size_t out_len)
{
    const char *slash = strrchr(path, '/');

    if (slash == NULL) {
        snprintf(out, out_len, ".");
    } else if (slash == path) {
        snprintf(out, out_len, "/");
    } else {
        snprintf(out, out_len, "%.*s", (int)(slash - path), path);
    }
}

/* dir_writable checks that @dir, the directory where @key's files go
 * (@what says which), exists and is a directory this process may create
 * files in. Returns 0 or RAFT_INVALID with the message. */
static int dir_writable(const char *key, const char *dir, const char *what,
                        char *errmsg, size_t errmsg_len)
{
    struct stat st;

    if (stat(dir, &st) != 0) {
        return fail(errmsg, errmsg_len, "%s: the directory %s of %s %s", key,
                    dir, what,
                    errno == ENOENT ? "does not exist" : strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        return fail(errmsg, errmsg_len,
                    "%s: %s (the directory of %s) is not "
                    "a directory",
                    key, dir, what);
    }
    if (access(dir, W_OK | X_OK) != 0) {
        return fail(errmsg, errmsg_len,
                    "%s: the directory %s of %s is not writable: %s", key, dir,
                    what, strerror(errno));
    }
    return 0;
}

int ext_config_check_paths(const struct ext_config *c, const char *db_path,
                           char *errmsg, size_t errmsg_len)
{
    char dir[sizeof c->dir + 8], what[sizeof c->dir + 64];
    struct stat st;
    int rc;

    parent_of(db_path, dir, sizeof dir);
    snprintf(what, sizeof what, "%s", db_path);
    rc = dir_writable("database", dir, what, errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    if (stat(db_path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            return fail(errmsg, errmsg_len, "database: %s is a directory",
                        db_path);
        }
        if (access(db_path, R_OK | W_OK) != 0) {
            return fail(errmsg, errmsg_len,
                        "database: %s cannot be read and written: %s", db_path,
                        strerror(errno));
        }
    }
    if (stat(c->dir, &st) != 0) {
        /* The start creates the log directory (not its parents). */
        parent_of(c->dir, dir, sizeof dir);
        snprintf(what, sizeof what, "the log directory %s", c->dir);
        return dir_writable("dir", dir, what, errmsg, errmsg_len);
    }
    if (!S_ISDIR(st.st_mode)) {
        return fail(errmsg, errmsg_len,
                    "dir: %s (the log directory) is not a directory", c->dir);
    }
    if (access(c->dir, W_OK | X_OK) != 0) {
        return fail(errmsg, errmsg_len,
                    "dir: the log directory %s is not writable: %s", c->dir,
                    strerror(errno));
    }
    return 0;
}
