/* The wire codec of message.h for frames: encoder, bounds-checked decoder
 * and release.
 * The decoder trusts nothing: every length is checked against the bytes
 * left before it is used, and a failure frees whatever was allocated. */

#include "message.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "byte.h"

/* Bytes of the common body header: version, type, from, to. */
#define RAFT__MSG_HEADER (1 + 1 + 8 + 8)

/* Smallest encoded entry: term, index, type, len (empty payload). */
#define RAFT__ENTRY_MIN (8 + 8 + 1 + 4)

/* Fixed field bytes of each message type, after the body header. */
#define RAFT__RV_LEN (8 + 8 + 8 + 1)
#define RAFT__RVR_LEN (8 + 1 + 1)
#define RAFT__AE_LEN (8 + 8 + 8 + 8 + 8 + 4)
#define RAFT__AER_LEN (8 + 1 + 8 + 8 + 8 + 8)
#define RAFT__FWD_LEN (8 + 8 + 4)
#define RAFT__FWDR_LEN (8 + 8 + 4 + 8 + 8)
#define RAFT__CHUNK_LEN (8 + 8 + 8 + 8 + 8 + 8 + 4)
#define RAFT__CHUNKR_LEN (8 + 8 + 8 + 4)
#define RAFT__TN_LEN 8
#define RAFT__CSUM_LEN (8 + 8 + 1)
#define RAFT__REPAIR_LEN 8
#define RAFT__READ_LEN 8
#define RAFT__READR_LEN (8 + 4 + 8)
#define RAFT__LEASE_LEN (8 + 1 + 8 + 8 + 4)
#define RAFT__LEASER_LEN (8 + 1 + 4 + 8 + 8 + 8)

/* The first wire version with the CHECKSUM and REPAIR_REQUEST frames. */
#define RAFT__WIRE_CHECKSUM 2

/* The first wire version with the READ_INDEX frames. */
#define RAFT__WIRE_READ_INDEX 3

/* The first wire version with the LEASE frames. */
#define RAFT__WIRE_LEASE 5

/* The first wire version whose APPEND_ENTRIES carry quorum_contact. */
#define RAFT__WIRE_QUORUM_CONTACT 6

/* Bytes of APPEND_ENTRIES' quorum_contact (wire version 6 on). */
#define RAFT__AE_QC_LEN 4

/* The first wire version whose APPEND_ENTRIES carry echo and whose
 * APPEND_ENTRIES_RESULT carry sent_at. */
#define RAFT__WIRE_ECHO 7

/* Bytes of APPEND_ENTRIES' echo, and of APPEND_ENTRIES_RESULT's sent_at
 * (wire version 7 on). */
#define RAFT__ECHO_LEN 8

/* RequestVote's flags byte: bit 0 pre-vote, bit 1 disrupt; a byte that
 * is 0 or 1 reads as the pre_vote boolean of before TimeoutNow. */
#define RAFT__RV_PRE_VOTE 1
#define RAFT__RV_DISRUPT 2

static size_t buf_len(const struct raft_buf *b)
{
    return b == NULL ? 0 : b->len;
}

static const void *buf_data(const struct raft_buf *b)
{
    return b == NULL ? NULL : b->data;
}

size_t raft_frame_encoded_len(const struct raft_frame *f)
{
    return raft_frame_encoded_len_at(f, RAFT_WIRE_VERSION);
}

size_t raft_frame_encoded_len_at(const struct raft_frame *f, unsigned version)
{
    size_t n = RAFT_FRAME_HEADER + RAFT__MSG_HEADER;
    uint32_t i;

    switch (f->type) {
        case RAFT_MSG_REQUEST_VOTE:
            return n + RAFT__RV_LEN;
        case RAFT_MSG_REQUEST_VOTE_RESULT:
            return n + RAFT__RVR_LEN;
        case RAFT_MSG_APPEND_ENTRIES:
            n += RAFT__AE_LEN;
            if (version >= RAFT__WIRE_QUORUM_CONTACT) {
                n += RAFT__AE_QC_LEN;
            }
            if (version >= RAFT__WIRE_ECHO) {
                n += RAFT__ECHO_LEN;
            }
            for (i = 0; i < f->message.append_entries.n_entries; i++) {
                n += RAFT__ENTRY_MIN +
                     buf_len(f->message.append_entries.entries[i].data);
            }
            return n;
        case RAFT_MSG_APPEND_ENTRIES_RESULT:
            return n + RAFT__AER_LEN +
                   (version >= RAFT__WIRE_ECHO ? RAFT__ECHO_LEN : 0);
        case RAFT_MSG_TIMEOUT_NOW:
            return n + RAFT__TN_LEN;
        case RAFT_FRAME_FORWARD:
            return n + RAFT__FWD_LEN + buf_len(f->forward.data);
        case RAFT_FRAME_FORWARD_RESULT:
            return n + RAFT__FWDR_LEN;
        case RAFT_FRAME_SNAPSHOT_CHUNK:
            return n + RAFT__CHUNK_LEN + buf_len(f->snapshot_chunk.data);
        case RAFT_FRAME_SNAPSHOT_CHUNK_RESULT:
            return n + RAFT__CHUNKR_LEN;
        case RAFT_FRAME_CHECKSUM:
            return n + RAFT__CSUM_LEN;
        case RAFT_FRAME_REPAIR_REQUEST:
            return n + RAFT__REPAIR_LEN;
        case RAFT_FRAME_READ_INDEX:
            return n + RAFT__READ_LEN;
        case RAFT_FRAME_READ_INDEX_RESULT:
            return n + RAFT__READR_LEN;
        case RAFT_FRAME_LEASE:
            return n + RAFT__LEASE_LEN + buf_len(f->lease.data);
        case RAFT_FRAME_LEASE_RESULT:
            return n + RAFT__LEASER_LEN;
        default:
            return 0;
    }
}

unsigned raft_frame_type_wire_min(uint8_t type)
{
    struct raft_frame f;

    memset(&f, 0, sizeof f);
    f.type = type;
    if (raft_frame_encoded_len(&f) == 0) {
        return 0;
    }
    if (type == RAFT_FRAME_READ_INDEX || type == RAFT_FRAME_READ_INDEX_RESULT) {
        return RAFT__WIRE_READ_INDEX;
    }
    if (type == RAFT_FRAME_LEASE || type == RAFT_FRAME_LEASE_RESULT) {
        return RAFT__WIRE_LEASE;
    }
    return type == RAFT_FRAME_CHECKSUM || type == RAFT_FRAME_REPAIR_REQUEST
               ? RAFT__WIRE_CHECKSUM
               : 1;
}

/* check_encodable validates what the encoder cannot write faithfully. */
static int check_encodable(const struct raft_frame *f)
{
    const struct raft_append_entries *ae = &f->message.append_entries;
    uint32_t i;

    /* Invariant (frame.h): a core message's header is the frame's. */
    if (raft_frame_is_message(f) &&
        (f->message.type != f->type || f->message.from != f->from ||
         f->message.to != f->to)) {
        return RAFT_INVALID;
    }
    if ((f->type == RAFT_FRAME_FORWARD &&
         buf_len(f->forward.data) > UINT32_MAX) ||
        (f->type == RAFT_FRAME_LEASE && buf_len(f->lease.data) > UINT32_MAX)) {
        return RAFT_TOOBIG;
    }
    if (f->type == RAFT_FRAME_SNAPSHOT_CHUNK) {
        const struct raft_snapshot_chunk *c = &f->snapshot_chunk;
        if (buf_len(c->data) > UINT32_MAX) {
            return RAFT_TOOBIG;
        }
        if (c->offset > c->total || buf_len(c->data) > c->total - c->offset) {
            return RAFT_INVALID;
        }
        return 0;
    }
    if (f->type != RAFT_MSG_APPEND_ENTRIES) {
        return 0;
    }
    if (ae->n_entries > 0 && ae->entries == NULL) {
        return RAFT_INVALID;
    }
    for (i = 0; i < ae->n_entries; i++) {
        /* The decoder refuses what it could not read back. */
        if (ae->entries[i].index != ae->prev_log_index + 1 + i ||
            ae->entries[i].index == 0) {
            return RAFT_INVALID;
        }
        if (buf_len(ae->entries[i].data) > UINT32_MAX) {
            return RAFT_TOOBIG;
        }
    }
    return 0;
}

void raft_wire_versions_get(unsigned *lo, unsigned *hi)
{
    *lo = RAFT_WIRE_VERSION_MIN;
    *hi = RAFT_WIRE_VERSION;
}

int raft_frame_encode(const struct raft_frame *f, void *buf, size_t len)
{
    return raft_frame_encode_at(f, RAFT_WIRE_VERSION, buf, len);
}

/* An encoding in progress: where the bytes go, and the payloads of at
 * least @ref_min bytes left out of them (raft_frame_encode_refs). */
struct encoder {
    struct raft_byte_writer w;   /* the bytes written */
    const uint8_t *start;        /* the first byte of the buffer */
    size_t ref_min;              /* payloads this long are referenced */
    struct raft_frame_ref *refs; /* the references, NULL for none */
    unsigned n_refs;             /* references written */
};

/* put_payload writes len:u32 and the bytes of @b, or, when @b has at
 * least ref_min bytes, the length and a reference to @b at the position
 * its bytes would have in the buffer. Returns false when they do not
 * fit. */
static bool put_payload(struct encoder *e, struct raft_buf *b)
{
    size_t n = buf_len(b);

    if (!raft_byte_put_u32(&e->w, (uint32_t)n)) {
        return false;
    }
    if (e->refs == NULL || n == 0 || n < e->ref_min) {
        return raft_byte_put_bytes(&e->w, buf_data(b), n);
    }
    e->refs[e->n_refs].at = (size_t)(e->w.p - e->start);
    e->refs[e->n_refs].buf = b;
    e->n_refs++;
    return true;
}

size_t raft_frame_encoded_len_refs(const struct raft_frame *f, unsigned version,
                                   size_t ref_min, unsigned *out_n_refs)
{
    size_t n = raft_frame_encoded_len_at(f, version);
    unsigned k = 0;

#define RAFT__REF(b)                                                           \
    do {                                                                       \
        if (buf_len(b) > 0 && buf_len(b) >= ref_min) {                         \
            n -= buf_len(b);                                                   \
            k++;                                                               \
        }                                                                      \
    } while (0)
    if (n == 0) {
        *out_n_refs = 0;
        return 0;
    }
    switch (f->type) {
        case RAFT_MSG_APPEND_ENTRIES:
            for (uint32_t i = 0; i < f->message.append_entries.n_entries; i++) {
                RAFT__REF(f->message.append_entries.entries[i].data);
            }
            break;
        case RAFT_FRAME_FORWARD:
            RAFT__REF(f->forward.data);
            break;
        case RAFT_FRAME_SNAPSHOT_CHUNK:
            RAFT__REF(f->snapshot_chunk.data);
            break;
        case RAFT_FRAME_LEASE:
            RAFT__REF(f->lease.data);
            break;
        default:
            break;
    }
#undef RAFT__REF
    *out_n_refs = k;
    return n;
}

int raft_frame_encode_at(const struct raft_frame *f, unsigned version,
                         void *buf, size_t len)
{
    unsigned n;
    return raft_frame_encode_refs(f, version, buf, len, SIZE_MAX, NULL, &n);
}

int raft_frame_encode_refs(const struct raft_frame *f, unsigned version,
                           void *buf, size_t len, size_t ref_min,
                           struct raft_frame_ref *refs, unsigned *out_n_refs)
{
    struct encoder e;
    size_t need;
    size_t head;
    unsigned n_refs = 0;
    uint32_t i;
    bool ok = true;
    int rc;

    if (refs == NULL) {
        ref_min = SIZE_MAX;
    }
    need = raft_frame_encoded_len_at(f, version);
    if (need == 0 || version < RAFT_WIRE_VERSION_MIN ||
        version > RAFT_WIRE_VERSION ||
        version < raft_frame_type_wire_min(f->type)) {
        return RAFT_INVALID;
    }
    rc = check_encodable(f);
    if (rc != 0) {
        return rc;
    }
    if (need - RAFT_FRAME_HEADER > UINT32_MAX) {
        return RAFT_TOOBIG;
    }
    head = raft_frame_encoded_len_refs(f, version, ref_min, &n_refs);
    if (len < head) {
        return RAFT_INVALID;
    }

    e.w = raft_byte_writer_init(buf, head);
    e.start = buf;
    e.ref_min = ref_min;
    e.refs = refs;
    e.n_refs = 0;
#define w (e.w)
    ok &= raft_byte_put_u32(&w, (uint32_t)(need - RAFT_FRAME_HEADER));
    ok &= raft_byte_put_u8(&w, (uint8_t)version);
    ok &= raft_byte_put_u8(&w, f->type);
    ok &= raft_byte_put_u64(&w, f->from);
    ok &= raft_byte_put_u64(&w, f->to);
    switch (f->type) {
        case RAFT_MSG_REQUEST_VOTE: {
            const struct raft_request_vote *rv = &f->message.request_vote;
            ok &= raft_byte_put_u64(&w, rv->term);
            ok &= raft_byte_put_u64(&w, rv->last_log_index);
            ok &= raft_byte_put_u64(&w, rv->last_log_term);
            ok &= raft_byte_put_u8(
                &w, (uint8_t)((rv->pre_vote ? RAFT__RV_PRE_VOTE : 0) |
                              (rv->disrupt ? RAFT__RV_DISRUPT : 0)));
            break;
        }
        case RAFT_MSG_REQUEST_VOTE_RESULT: {
            const struct raft_request_vote_result *rr =
                &f->message.request_vote_result;
            ok &= raft_byte_put_u64(&w, rr->term);
            ok &= raft_byte_put_u8(&w, rr->vote_granted ? 1 : 0);
            ok &= raft_byte_put_u8(&w, rr->pre_vote ? 1 : 0);
            break;
        }
        case RAFT_MSG_APPEND_ENTRIES: {
            const struct raft_append_entries *ae = &f->message.append_entries;
            ok &= raft_byte_put_u64(&w, ae->term);
            ok &= raft_byte_put_u64(&w, ae->prev_log_index);
            ok &= raft_byte_put_u64(&w, ae->prev_log_term);
            ok &= raft_byte_put_u64(&w, ae->leader_commit);
            ok &= raft_byte_put_u64(&w, ae->seq);
            if (version >= RAFT__WIRE_QUORUM_CONTACT) {
                ok &= raft_byte_put_u32(&w, ae->quorum_contact);
            }
            if (version >= RAFT__WIRE_ECHO) {
                ok &= raft_byte_put_u64(&w, ae->echo);
            }
            ok &= raft_byte_put_u32(&w, ae->n_entries);
            for (i = 0; i < ae->n_entries; i++) {
                const struct raft_entry *ent = &ae->entries[i];
                ok &= raft_byte_put_u64(&w, ent->term);
                ok &= raft_byte_put_u64(&w, ent->index);
                ok &= raft_byte_put_u8(&w, ent->type);
                ok &= put_payload(&e, ent->data);
            }
            break;
        }
        case RAFT_MSG_APPEND_ENTRIES_RESULT: {
            const struct raft_append_entries_result *ar =
                &f->message.append_entries_result;
            ok &= raft_byte_put_u64(&w, ar->term);
            ok &= raft_byte_put_u8(&w, ar->success ? 1 : 0);
            ok &= raft_byte_put_u64(&w, ar->reject_index);
            ok &= raft_byte_put_u64(&w, ar->last_log_index);
            ok &= raft_byte_put_u64(&w, ar->conflict_index);
            ok &= raft_byte_put_u64(&w, ar->seq);
            if (version >= RAFT__WIRE_ECHO) {
                ok &= raft_byte_put_u64(&w, ar->sent_at);
            }
            break;
        }
        case RAFT_MSG_TIMEOUT_NOW:
            ok &= raft_byte_put_u64(&w, f->message.timeout_now.term);
            break;
        case RAFT_FRAME_FORWARD: {
            const struct raft_forward *fw = &f->forward;
            ok &= raft_byte_put_u64(&w, fw->request_id[0]);
            ok &= raft_byte_put_u64(&w, fw->request_id[1]);
            ok &= put_payload(&e, fw->data);
            break;
        }
        case RAFT_FRAME_FORWARD_RESULT: {
            const struct raft_forward_result *fr = &f->forward_result;
            ok &= raft_byte_put_u64(&w, fr->request_id[0]);
            ok &= raft_byte_put_u64(&w, fr->request_id[1]);
            ok &= raft_byte_put_u32(&w, (uint32_t)fr->status);
            ok &= raft_byte_put_u64(&w, fr->index);
            ok &= raft_byte_put_u64(&w, fr->term);
            break;
        }
        case RAFT_FRAME_SNAPSHOT_CHUNK: {
            const struct raft_snapshot_chunk *c = &f->snapshot_chunk;
            ok &= raft_byte_put_u64(&w, c->term);
            ok &= raft_byte_put_u64(&w, c->last_index);
            ok &= raft_byte_put_u64(&w, c->last_term);
            ok &= raft_byte_put_u64(&w, c->total);
            ok &= raft_byte_put_u64(&w, c->offset);
            ok &= raft_byte_put_u64(&w, c->checksum);
            ok &= put_payload(&e, c->data);
            break;
        }
        case RAFT_FRAME_SNAPSHOT_CHUNK_RESULT: {
            const struct raft_snapshot_chunk_result *cr =
                &f->snapshot_chunk_result;
            ok &= raft_byte_put_u64(&w, cr->term);
            ok &= raft_byte_put_u64(&w, cr->last_index);
            ok &= raft_byte_put_u64(&w, cr->offset);
            ok &= raft_byte_put_u32(&w, (uint32_t)cr->status);
            break;
        }
        case RAFT_FRAME_CHECKSUM:
            ok &= raft_byte_put_u64(&w, f->checksum.index);
            ok &= raft_byte_put_u64(&w, f->checksum.checksum);
            ok &= raft_byte_put_u8(&w, f->checksum.probe ? 1 : 0);
            break;
        case RAFT_FRAME_REPAIR_REQUEST:
            ok &= raft_byte_put_u64(&w, f->repair_request.applied);
            break;
        case RAFT_FRAME_READ_INDEX:
            ok &= raft_byte_put_u64(&w, f->read_index.tag);
            break;
        case RAFT_FRAME_READ_INDEX_RESULT:
            ok &= raft_byte_put_u64(&w, f->read_index_result.tag);
            ok &= raft_byte_put_u32(&w, (uint32_t)f->read_index_result.status);
            ok &= raft_byte_put_u64(&w, f->read_index_result.index);
            break;
        case RAFT_FRAME_LEASE: {
            const struct raft_lease_request *l = &f->lease;
            ok &= raft_byte_put_u64(&w, l->tag);
            ok &= raft_byte_put_u8(&w, l->op);
            ok &= raft_byte_put_u64(&w, l->holder);
            ok &= raft_byte_put_u64(&w, l->id);
            ok &= put_payload(&e, l->data);
            break;
        }
        case RAFT_FRAME_LEASE_RESULT: {
            const struct raft_lease_result *lr = &f->lease_result;
            ok &= raft_byte_put_u64(&w, lr->tag);
            ok &= raft_byte_put_u8(&w, lr->op);
            ok &= raft_byte_put_u32(&w, (uint32_t)lr->status);
            ok &= raft_byte_put_u64(&w, lr->id);
            ok &= raft_byte_put_u64(&w, lr->index);
            ok &= raft_byte_put_u64(&w, lr->server);
            break;
        }
        default:
            return RAFT_INVALID;
    }
#undef w
    /* Invariant: raft_frame_encoded_len_refs counted every byte written
     * and every reference. */
    if (!ok || e.w.left != 0 || e.n_refs != n_refs) {
        return RAFT_INVALID;
    }
    *out_n_refs = n_refs;
    return 0;
}

/* status_of reads an i32 from its u32 wire form: two's complement,
 * without implementation-defined casts. */
static int32_t status_of(uint32_t status)
{
    return status <= INT32_MAX ? (int32_t)status
                               : -(int32_t)(UINT32_MAX - status) - 1;
}

/* get_bool reads a u8 that must be 0 or 1. */
static bool get_bool(struct raft_byte_reader *r, bool *out)
{
    uint8_t v;

    if (!raft_byte_get_u8(r, &v) || v > 1) {
        return false;
    }
    *out = v == 1;
    return true;
}

/* get_rv_flags reads RequestVote's flags byte (bits above 1 refused). */
static bool get_rv_flags(struct raft_byte_reader *r,
                         struct raft_request_vote *rv)
{
    uint8_t v;

    if (!raft_byte_get_u8(r, &v) ||
        (v & ~(RAFT__RV_PRE_VOTE | RAFT__RV_DISRUPT)) != 0) {
        return false;
    }
    rv->pre_vote = (v & RAFT__RV_PRE_VOTE) != 0;
    rv->disrupt = (v & RAFT__RV_DISRUPT) != 0;
    return true;
}

/* The body being decoded: a buffer whose payloads of at least
 * RAFT_FRAME_SLICE_MIN bytes are sliced rather than copied, or NULL. */
struct decoder {
    struct raft_buf *body; /* the body's buffer, or NULL: copy all */
};

/* get_payload reads len:u32 bytes[len] into a new buf (NULL when empty):
 * a slice of the body's buffer for a large payload (@d->body set), else a
 * copy. Returns 0, RAFT_PROTO (truncated) or RAFT_NOMEM. */
static int get_payload(const struct decoder *d, struct raft_byte_reader *r,
                       struct raft_buf **out)
{
    const uint8_t *p;
    uint32_t len;
    struct raft_buf *b = NULL;

    if (!raft_byte_get_u32(r, &len) || !raft_byte_get_bytes(r, len, &p)) {
        return RAFT_PROTO;
    }
    if (len > 0 && d->body != NULL && len >= RAFT_FRAME_SLICE_MIN) {
        b = raft_buf_slice(d->body, (size_t)(p - d->body->data), len);
        if (b == NULL) {
            return RAFT_NOMEM;
        }
    } else if (len > 0) {
        b = raft_buf_copy(p, len);
        if (b == NULL) {
            return RAFT_NOMEM;
        }
    }
    *out = b;
    return 0;
}

static void release_entries(struct raft_entry *entries, uint32_t n)
{
    uint32_t i;

    if (entries == NULL) {
        return;
    }
    for (i = 0; i < n; i++) {
        raft_buf_unref(entries[i].data);
    }
    free(entries);
}

/* decode_entries reads the @ae->n_entries entries of an AppendEntries.
 * On success @ae->entries holds them; on failure nothing is allocated. */
static int decode_entries(const struct decoder *d, struct raft_byte_reader *r,
                          struct raft_append_entries *ae, char *errmsg,
                          size_t errmsg_len)
{
    struct raft_entry *entries;
    uint32_t i;
    int rc;

    /* Check the count against the body before trusting it to allocate. */
    if (ae->n_entries > r->left / RAFT__ENTRY_MIN) {
        raft_errmsgf(errmsg, errmsg_len,
                     "append entries: %u entries cannot fit in %zu bytes",
                     (unsigned)ae->n_entries, r->left);
        return RAFT_PROTO;
    }
    ae->entries = NULL;
    if (ae->n_entries == 0) {
        return 0;
    }
    entries = calloc(ae->n_entries, sizeof *entries);
    if (entries == NULL) {
        raft_errmsgf(errmsg, errmsg_len, "append entries: out of memory");
        return RAFT_NOMEM;
    }
    for (i = 0; i < ae->n_entries; i++) {
        struct raft_entry *e = &entries[i];
        if (!raft_byte_get_u64(r, &e->term) ||
            !raft_byte_get_u64(r, &e->index) ||
            !raft_byte_get_u8(r, &e->type)) {
            raft_errmsgf(errmsg, errmsg_len,
                         "append entries: entry %u truncated", (unsigned)i);
            rc = RAFT_PROTO;
            goto err_entries;
        }
        if (e->index != ae->prev_log_index + 1 + i || e->index == 0) {
            raft_errmsgf(errmsg, errmsg_len,
                         "append entries: entry %u has index %llu, "
                         "expected %llu",
                         (unsigned)i, (unsigned long long)e->index,
                         (unsigned long long)(ae->prev_log_index + 1 + i));
            rc = RAFT_PROTO;
            goto err_entries;
        }
        if (e->type != RAFT_ENTRY_NORMAL && e->type != RAFT_ENTRY_NOOP &&
            e->type != RAFT_ENTRY_CONFIG) {
            raft_errmsgf(errmsg, errmsg_len,
                         "append entries: entry %u has unknown type %u",
                         (unsigned)i, (unsigned)e->type);
            rc = RAFT_PROTO;
            goto err_entries;
        }
        rc = get_payload(d, r, &e->data);
        if (rc != 0) {
            raft_errmsgf(errmsg, errmsg_len, "append entries: entry %u %s",
                         (unsigned)i,
                         rc == RAFT_NOMEM ? "out of memory" : "truncated");
            goto err_entries;
        }
    }
    ae->entries = entries;
    return 0;

err_entries:
    release_entries(entries, i);
    return rc;
}

/* decode is raft_frame_decode and raft_frame_decode_buf: @shared is the
 * buffer whose bytes are @body, or NULL. */
static int decode(const void *body, size_t len, struct raft_buf *shared,
                  struct raft_frame *out, char *errmsg, size_t errmsg_len)
{
    struct raft_byte_reader r = raft_byte_reader_init(body, len);
    struct decoder d = {.body = shared};
    struct raft_frame f;
    uint8_t version;
    bool ok = true;
    int rc;

    memset(&f, 0, sizeof f);
    if (!raft_byte_get_u8(&r, &version)) {
        raft_errmsgf(errmsg, errmsg_len, "empty message body");
        return RAFT_PROTO;
    }
    if (version < RAFT_WIRE_VERSION_MIN || version > RAFT_WIRE_VERSION) {
        raft_errmsgf(errmsg, errmsg_len,
                     "unsupported wire version %u (want %u to %u)",
                     (unsigned)version, (unsigned)RAFT_WIRE_VERSION_MIN,
                     (unsigned)RAFT_WIRE_VERSION);
        return RAFT_FORMAT;
    }
    if (!raft_byte_get_u8(&r, &f.type) || !raft_byte_get_u64(&r, &f.from) ||
        !raft_byte_get_u64(&r, &f.to)) {
        raft_errmsgf(errmsg, errmsg_len, "truncated message header (%zu bytes)",
                     len);
        return RAFT_PROTO;
    }
    if (raft_frame_type_wire_min(f.type) > version) {
        raft_errmsgf(errmsg, errmsg_len,
                     "message type %u in wire version %u (it exists from "
                     "version %u)",
                     (unsigned)f.type, (unsigned)version,
                     raft_frame_type_wire_min(f.type));
        return RAFT_PROTO;
    }
    if (raft_frame_is_message(&f)) {
        f.message.type = f.type;
        f.message.from = f.from;
        f.message.to = f.to;
    }

    switch (f.type) {
        case RAFT_MSG_REQUEST_VOTE: {
            struct raft_request_vote *rv = &f.message.request_vote;
            ok = raft_byte_get_u64(&r, &rv->term) &&
                 raft_byte_get_u64(&r, &rv->last_log_index) &&
                 raft_byte_get_u64(&r, &rv->last_log_term) &&
                 get_rv_flags(&r, rv);
            break;
        }
        case RAFT_MSG_REQUEST_VOTE_RESULT: {
            struct raft_request_vote_result *rr =
                &f.message.request_vote_result;
            ok = raft_byte_get_u64(&r, &rr->term) &&
                 get_bool(&r, &rr->vote_granted) && get_bool(&r, &rr->pre_vote);
            break;
        }
        case RAFT_MSG_APPEND_ENTRIES: {
            struct raft_append_entries *ae = &f.message.append_entries;
            ok = raft_byte_get_u64(&r, &ae->term) &&
                 raft_byte_get_u64(&r, &ae->prev_log_index) &&
                 raft_byte_get_u64(&r, &ae->prev_log_term) &&
                 raft_byte_get_u64(&r, &ae->leader_commit) &&
                 raft_byte_get_u64(&r, &ae->seq) &&
                 (version < RAFT__WIRE_QUORUM_CONTACT ||
                  raft_byte_get_u32(&r, &ae->quorum_contact)) &&
                 (version < RAFT__WIRE_ECHO ||
                  raft_byte_get_u64(&r, &ae->echo)) &&
                 raft_byte_get_u32(&r, &ae->n_entries);
            if (!ok) {
                break;
            }
            rc = decode_entries(&d, &r, ae, errmsg, errmsg_len);
            if (rc != 0) {
                return rc;
            }
            break;
        }
        case RAFT_MSG_APPEND_ENTRIES_RESULT: {
            struct raft_append_entries_result *ar =
                &f.message.append_entries_result;
            ok = raft_byte_get_u64(&r, &ar->term) &&
                 get_bool(&r, &ar->success) &&
                 raft_byte_get_u64(&r, &ar->reject_index) &&
                 raft_byte_get_u64(&r, &ar->last_log_index) &&
                 raft_byte_get_u64(&r, &ar->conflict_index) &&
                 raft_byte_get_u64(&r, &ar->seq) &&
                 (version < RAFT__WIRE_ECHO ||
                  raft_byte_get_u64(&r, &ar->sent_at));
            break;
        }
        case RAFT_MSG_TIMEOUT_NOW:
            ok = raft_byte_get_u64(&r, &f.message.timeout_now.term);
            break;
        case RAFT_FRAME_FORWARD: {
            struct raft_forward *fw = &f.forward;
            ok = raft_byte_get_u64(&r, &fw->request_id[0]) &&
                 raft_byte_get_u64(&r, &fw->request_id[1]);
            if (!ok) {
                break;
            }
            rc = get_payload(&d, &r, &fw->data);
            if (rc == RAFT_NOMEM) {
                raft_errmsgf(errmsg, errmsg_len, "forward: out of memory");
                return rc;
            }
            ok = rc == 0;
            break;
        }
        case RAFT_FRAME_FORWARD_RESULT: {
            struct raft_forward_result *fr = &f.forward_result;
            uint32_t status = 0;
            ok = raft_byte_get_u64(&r, &fr->request_id[0]) &&
                 raft_byte_get_u64(&r, &fr->request_id[1]) &&
                 raft_byte_get_u32(&r, &status) &&
                 raft_byte_get_u64(&r, &fr->index) &&
                 raft_byte_get_u64(&r, &fr->term);
            fr->status = status_of(status);
            break;
        }
        case RAFT_FRAME_SNAPSHOT_CHUNK: {
            struct raft_snapshot_chunk *c = &f.snapshot_chunk;
            ok = raft_byte_get_u64(&r, &c->term) &&
                 raft_byte_get_u64(&r, &c->last_index) &&
                 raft_byte_get_u64(&r, &c->last_term) &&
                 raft_byte_get_u64(&r, &c->total) &&
                 raft_byte_get_u64(&r, &c->offset) &&
                 raft_byte_get_u64(&r, &c->checksum);
            if (!ok) {
                break;
            }
            rc = get_payload(&d, &r, &c->data);
            if (rc == RAFT_NOMEM) {
                raft_errmsgf(errmsg, errmsg_len,
                             "snapshot chunk: out of memory");
                return rc;
            }
            ok = rc == 0;
            if (ok && (c->offset > c->total ||
                       buf_len(c->data) > c->total - c->offset)) {
                raft_errmsgf(errmsg, errmsg_len,
                             "snapshot chunk: %zu bytes at %llu past "
                             "total %llu",
                             buf_len(c->data), (unsigned long long)c->offset,
                             (unsigned long long)c->total);
                rc = RAFT_PROTO;
                goto err_release;
            }
            break;
        }
        case RAFT_FRAME_SNAPSHOT_CHUNK_RESULT: {
            struct raft_snapshot_chunk_result *cr = &f.snapshot_chunk_result;
            uint32_t status = 0;
            ok = raft_byte_get_u64(&r, &cr->term) &&
                 raft_byte_get_u64(&r, &cr->last_index) &&
                 raft_byte_get_u64(&r, &cr->offset) &&
                 raft_byte_get_u32(&r, &status);
            cr->status = status_of(status);
            break;
        }
        case RAFT_FRAME_CHECKSUM:
            ok = raft_byte_get_u64(&r, &f.checksum.index) &&
                 raft_byte_get_u64(&r, &f.checksum.checksum) &&
                 get_bool(&r, &f.checksum.probe);
            break;
        case RAFT_FRAME_REPAIR_REQUEST:
            ok = raft_byte_get_u64(&r, &f.repair_request.applied);
            break;
        case RAFT_FRAME_READ_INDEX:
            ok = raft_byte_get_u64(&r, &f.read_index.tag);
            break;
        case RAFT_FRAME_READ_INDEX_RESULT: {
            uint32_t status = 0;
            ok = raft_byte_get_u64(&r, &f.read_index_result.tag) &&
                 raft_byte_get_u32(&r, &status) &&
                 raft_byte_get_u64(&r, &f.read_index_result.index);
            f.read_index_result.status = status_of(status);
            break;
        }
        case RAFT_FRAME_LEASE: {
            struct raft_lease_request *l = &f.lease;
            ok = raft_byte_get_u64(&r, &l->tag) &&
                 raft_byte_get_u8(&r, &l->op) &&
                 raft_byte_get_u64(&r, &l->holder) &&
                 raft_byte_get_u64(&r, &l->id);
            if (!ok) {
                break;
            }
            if (l->op < RAFT_LEASE_ASK || l->op > RAFT_LEASE_RELEASE) {
                raft_errmsgf(errmsg, errmsg_len, "lease: unknown op %u",
                             (unsigned)l->op);
                return RAFT_PROTO;
            }
            rc = get_payload(&d, &r, &l->data);
            if (rc == RAFT_NOMEM) {
                raft_errmsgf(errmsg, errmsg_len, "lease: out of memory");
                return rc;
            }
            ok = rc == 0;
            break;
        }
        case RAFT_FRAME_LEASE_RESULT: {
            struct raft_lease_result *lr = &f.lease_result;
            uint32_t status = 0;
            ok = raft_byte_get_u64(&r, &lr->tag) &&
                 raft_byte_get_u8(&r, &lr->op) &&
                 raft_byte_get_u32(&r, &status) &&
                 raft_byte_get_u64(&r, &lr->id) &&
                 raft_byte_get_u64(&r, &lr->index) &&
                 raft_byte_get_u64(&r, &lr->server);
            lr->status = status_of(status);
            break;
        }
        default:
            raft_errmsgf(errmsg, errmsg_len, "unknown message type %u",
                         (unsigned)f.type);
            return RAFT_PROTO;
    }
    if (!ok) {
        raft_errmsgf(errmsg, errmsg_len,
                     "message type %u: truncated body or bad field "
                     "(%zu bytes)",
                     (unsigned)f.type, len);
        rc = RAFT_PROTO;
        goto err_release;
    }
    if (r.left != 0) {
        raft_errmsgf(errmsg, errmsg_len, "message type %u: %zu trailing bytes",
                     (unsigned)f.type, r.left);
        rc = RAFT_PROTO;
        goto err_release;
    }
    *out = f;
    return 0;

err_release:
    raft_frame_release(&f);
    return rc;
}

int raft_frame_decode(const void *body, size_t len, struct raft_frame *out,
                      char *errmsg, size_t errmsg_len)
{
    return decode(body, len, NULL, out, errmsg, errmsg_len);
}

int raft_frame_decode_buf(struct raft_buf *body, size_t len,
                          struct raft_frame *out, char *errmsg,
                          size_t errmsg_len)
{
    return decode(body->data, len, body, out, errmsg, errmsg_len);
}

void raft_frame_release(struct raft_frame *f)
{
    if (raft_frame_is_message(f)) {
        raft_message_release(&f->message);
    } else if (f->type == RAFT_FRAME_FORWARD) {
        raft_buf_unref(f->forward.data);
    } else if (f->type == RAFT_FRAME_SNAPSHOT_CHUNK) {
        raft_buf_unref(f->snapshot_chunk.data);
    } else if (f->type == RAFT_FRAME_LEASE) {
        raft_buf_unref(f->lease.data);
    }
    memset(f, 0, sizeof *f);
}

void raft_message_release(struct raft_message *m)
{
    if (m->type == RAFT_MSG_APPEND_ENTRIES) {
        release_entries(m->append_entries.entries, m->append_entries.n_entries);
    }
    memset(m, 0, sizeof *m);
}
