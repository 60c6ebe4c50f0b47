/* The cluster configuration and its codec (see configuration.h). */

#include "configuration.h"

#include <stdlib.h>
#include <string.h>

#include "byte.h"

/* Fixed bytes of one encoded server: id, role, address length (and a
 * flags byte in version 2). */
#define RAFT__SERVER_MIN (8 + 1 + 2)

/* Flags of a server (version 2). */
#define RAFT__FLAG_AUTO_PROMOTE 0x01

void raft_configuration_init(struct raft_configuration *c)
{
    memset(c, 0, sizeof *c);
}

int raft_configuration_find(const struct raft_configuration *c, raft_id id)
{
    unsigned i;

    for (i = 0; i < c->n; i++) {
        if (c->servers[i].id == id) {
            return (int)i;
        }
    }
    return -1;
}

uint8_t raft_configuration_role(const struct raft_configuration *c, raft_id id)
{
    int i = raft_configuration_find(c, id);

    return i < 0 ? 0 : c->servers[i].role;
}

unsigned raft_configuration_n_voters(const struct raft_configuration *c)
{
    unsigned i;
    unsigned n = 0;

    for (i = 0; i < c->n; i++) {
        if (c->servers[i].role == RAFT_VOTER) {
            n++;
        }
    }
    return n;
}

static bool valid_role(uint8_t role)
{
    return role == RAFT_VOTER || role == RAFT_LEARNER;
}

int raft_configuration_add(struct raft_configuration *c, raft_id id,
                           uint8_t role, const char *address)
{
    struct raft_server *s;
    size_t len = address != NULL ? strlen(address) : 0;

    if (id == 0 || raft_configuration_find(c, id) >= 0 || !valid_role(role) ||
        len > RAFT_ADDRESS_MAX || c->n >= RAFT_MAX_SERVERS) {
        return RAFT_INVALID;
    }
    s = &c->servers[c->n++];
    memset(s, 0, sizeof *s);
    s->id = id;
    s->role = role;
    if (len > 0) {
        memcpy(s->address, address, len);
    }
    return 0;
}

int raft_configuration_remove(struct raft_configuration *c, raft_id id)
{
    int i = raft_configuration_find(c, id);

    if (i < 0) {
        return RAFT_NOTFOUND;
    }
    memmove(&c->servers[i], &c->servers[i + 1],
            (c->n - (unsigned)i - 1) * sizeof c->servers[0]);
    c->n--;
    return 0;
}

bool raft_configuration_equal(const struct raft_configuration *a,
                              const struct raft_configuration *b)
{
    unsigned i;

    if (a->n != b->n) {
        return false;
    }
    for (i = 0; i < a->n; i++) {
        if (a->servers[i].id != b->servers[i].id ||
            a->servers[i].role != b->servers[i].role ||
            a->servers[i].auto_promote != b->servers[i].auto_promote ||
            strcmp(a->servers[i].address, b->servers[i].address) != 0) {
            return false;
        }
    }
    return true;
}

/* has_flags tells whether a server of @c has a flag: the encoding is
 * then version 2. */
static bool has_flags(const struct raft_configuration *c)
{
    unsigned i;

    for (i = 0; i < c->n && i < RAFT_MAX_SERVERS; i++) {
        if (c->servers[i].auto_promote) {
            return true;
        }
    }
    return false;
}

size_t raft_configuration_encoded_len(const struct raft_configuration *c)
{
    size_t n = RAFT_CONFIGURATION_HEADER;
    size_t flags = has_flags(c) ? 1 : 0;
    unsigned i;

    for (i = 0; i < c->n && i < RAFT_MAX_SERVERS; i++) {
        n += RAFT__SERVER_MIN + flags +
             strnlen(c->servers[i].address, RAFT_ADDRESS_MAX + 1);
    }
    return n;
}

bool raft_configuration_valid(const struct raft_configuration *c)
{
    unsigned i;
    unsigned j;

    if (c->n > RAFT_MAX_SERVERS) {
        return false;
    }
    for (i = 0; i < c->n; i++) {
        const struct raft_server *s = &c->servers[i];
        if (s->id == 0 || !valid_role(s->role) ||
            (s->auto_promote && s->role != RAFT_LEARNER) ||
            strnlen(s->address, RAFT_ADDRESS_MAX + 1) > RAFT_ADDRESS_MAX) {
            return false;
        }
        for (j = 0; j < i; j++) {
            if (c->servers[j].id == s->id) {
                return false;
            }
        }
    }
    return true;
}

int raft_configuration_encode(const struct raft_configuration *c, void *buf,
                              size_t len)
{
    struct raft_byte_writer w;
    size_t need;
    unsigned i;
    bool ok = true;
    bool flags;

    if (!raft_configuration_valid(c)) {
        return RAFT_INVALID;
    }
    need = raft_configuration_encoded_len(c);
    if (len < need) {
        return RAFT_INVALID;
    }
    flags = has_flags(c);
    w = raft_byte_writer_init(buf, need);
    ok &= raft_byte_put_u8(&w, flags ? RAFT_CONFIGURATION_VERSION_FLAGS
                                     : RAFT_CONFIGURATION_VERSION);
    ok &= raft_byte_put_u32(&w, c->n);
    for (i = 0; i < c->n; i++) {
        const struct raft_server *s = &c->servers[i];
        size_t alen = strlen(s->address);
        uint8_t le16[2] = {(uint8_t)alen, (uint8_t)(alen >> 8)};
        ok &= raft_byte_put_u64(&w, s->id);
        ok &= raft_byte_put_u8(&w, s->role);
        if (flags) {
            ok &= raft_byte_put_u8(
                &w, s->auto_promote ? RAFT__FLAG_AUTO_PROMOTE : 0);
        }
        ok &= raft_byte_put_bytes(&w, le16, 2);
        ok &= raft_byte_put_bytes(&w, s->address, alen);
    }
    /* Invariant: raft_configuration_encoded_len counted every byte. */
    return ok && w.left == 0 ? 0 : RAFT_INVALID;
}

int raft_configuration_encode_buf(const struct raft_configuration *c,
                                  struct raft_buf **out)
{
    struct raft_buf *b;
    int rc;

    if (!raft_configuration_valid(c)) {
        return RAFT_INVALID;
    }
    b = raft_buf_new(raft_configuration_encoded_len(c));
    if (b == NULL) {
        return RAFT_NOMEM;
    }
    rc = raft_configuration_encode(c, b->data, b->len);
    if (rc != 0) {
        raft_buf_unref(b);
        return rc;
    }
    *out = b;
    return 0;
}

int raft_configuration_decode(const void *buf, size_t len,
                              struct raft_configuration *out, char *errmsg,
                              size_t errmsg_len)
{
    struct raft_byte_reader r = raft_byte_reader_init(buf, len);
    struct raft_configuration tmp;
    struct raft_configuration *c = &tmp;
    uint8_t version;
    uint8_t flags;
    bool any_flag = false;
    uint32_t n;
    uint32_t i;

    if (!raft_byte_get_u8(&r, &version)) {
        raft_errmsgf(errmsg, errmsg_len, "configuration: empty");
        return RAFT_CORRUPT;
    }
    if (version != RAFT_CONFIGURATION_VERSION &&
        version != RAFT_CONFIGURATION_VERSION_FLAGS) {
        raft_errmsgf(errmsg, errmsg_len,
                     "configuration: unknown version %u (this build reads "
                     "%u and %u)",
                     (unsigned)version, RAFT_CONFIGURATION_VERSION,
                     RAFT_CONFIGURATION_VERSION_FLAGS);
        return RAFT_FORMAT;
    }
    if (!raft_byte_get_u32(&r, &n)) {
        raft_errmsgf(errmsg, errmsg_len, "configuration: truncated count");
        return RAFT_CORRUPT;
    }
    if (n > RAFT_MAX_SERVERS) {
        raft_errmsgf(errmsg, errmsg_len,
                     "configuration: %u servers, at most %u", (unsigned)n,
                     RAFT_MAX_SERVERS);
        return RAFT_CORRUPT;
    }
    raft_configuration_init(c);
    for (i = 0; i < n; i++) {
        struct raft_server *s = &c->servers[i];
        const uint8_t *p;
        uint16_t alen;
        flags = 0;
        if (!raft_byte_get_u64(&r, &s->id) || !raft_byte_get_u8(&r, &s->role) ||
            (version == RAFT_CONFIGURATION_VERSION_FLAGS &&
             !raft_byte_get_u8(&r, &flags)) ||
            !raft_byte_get_bytes(&r, 2, &p)) {
            raft_errmsgf(errmsg, errmsg_len,
                         "configuration: server %u truncated", (unsigned)i);
            goto err;
        }
        alen = (uint16_t)(p[0] | p[1] << 8);
        if (s->id == 0 || raft_configuration_find(c, s->id) >= 0) {
            raft_errmsgf(errmsg, errmsg_len,
                         "configuration: server %u: %s id %llu", (unsigned)i,
                         s->id == 0 ? "zero" : "duplicate",
                         (unsigned long long)s->id);
            goto err;
        }
        if (!valid_role(s->role)) {
            raft_errmsgf(errmsg, errmsg_len,
                         "configuration: server %llu: unknown role %u",
                         (unsigned long long)s->id, (unsigned)s->role);
            goto err;
        }
        if ((flags & ~RAFT__FLAG_AUTO_PROMOTE) != 0 ||
            (flags != 0 && s->role != RAFT_LEARNER)) {
            raft_errmsgf(errmsg, errmsg_len,
                         "configuration: server %llu: flags 0x%02x%s",
                         (unsigned long long)s->id, (unsigned)flags,
                         (flags & ~RAFT__FLAG_AUTO_PROMOTE) != 0
                             ? " unknown"
                             : " on a voter");
            goto err;
        }
        s->auto_promote = flags != 0;
        any_flag = any_flag || flags != 0;
        if (alen > RAFT_ADDRESS_MAX) {
            raft_errmsgf(errmsg, errmsg_len,
                         "configuration: server %llu: address of %u bytes, "
                         "at most %u",
                         (unsigned long long)s->id, (unsigned)alen,
                         RAFT_ADDRESS_MAX);
            goto err;
        }
        if (!raft_byte_get_bytes(&r, alen, &p)) {
            raft_errmsgf(errmsg, errmsg_len,
                         "configuration: server %llu: address truncated",
                         (unsigned long long)s->id);
            goto err;
        }
        if (memchr(p, 0, alen) != NULL) {
            raft_errmsgf(errmsg, errmsg_len,
                         "configuration: server %llu: NUL in address",
                         (unsigned long long)s->id);
            goto err;
        }
        memcpy(s->address, p, alen);
        s->address[alen] = '\0';
        c->n = i + 1;
    }
    if (r.left != 0) {
        raft_errmsgf(errmsg, errmsg_len, "configuration: %zu trailing bytes",
                     r.left);
        goto err;
    }
    if (version == RAFT_CONFIGURATION_VERSION_FLAGS && !any_flag) {
        /* One encoding per configuration: version 1 says this. */
        raft_errmsgf(errmsg, errmsg_len,
                     "configuration: version %u without any flag",
                     (unsigned)version);
        goto err;
    }
    *out = *c;
    return 0;

err:
    return RAFT_CORRUPT;
}

/* by_id orders servers by increasing id. */
static int by_id(const void *a, const void *b)
{
    raft_id x = ((const struct raft_server *)a)->id;
    raft_id y = ((const struct raft_server *)b)->id;

    return x < y ? -1 : x > y;
}

int raft_configuration_bootstrap(const struct raft_configuration *c,
                                 struct raft_entry *out_entry,
                                 struct raft_hard_state *out_hs)
{
    struct raft_configuration tmp;
    struct raft_configuration *sorted = &tmp;
    struct raft_buf *b = NULL;
    unsigned i;
    int rc;

    if (c->n == 0 || !raft_configuration_valid(c)) {
        return RAFT_INVALID;
    }
    *sorted = *c;
    for (i = 0; i < sorted->n; i++) {
        sorted->servers[i].role = RAFT_VOTER;
        sorted->servers[i].auto_promote = false;
    }
    qsort(sorted->servers, sorted->n, sizeof sorted->servers[0], by_id);
    rc = raft_configuration_encode_buf(sorted, &b);
    if (rc != 0) {
        return rc;
    }
    out_entry->term = 1;
    out_entry->index = 1;
    out_entry->type = RAFT_ENTRY_CONFIG;
    out_entry->data = b;
    out_hs->term = 1;
    out_hs->vote = 0;
    return 0;
}
