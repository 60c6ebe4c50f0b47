/* libFuzzer target: the wire codec's frame decoder (raft_frame_decode,
 * raft/message.h) on any body, every frame type of frame.h and snapshot
 * chunks included; what it accepts must encode back to the same bytes. */

#include <string.h>

#include "fuzz.h"
#include "raft/byte.h"
#include "raft/message.h"

/* check_payload: an empty payload is NULL in memory (message.h). */
static void check_payload(const struct raft_buf *b, const char *what)
{
    FUZZ_CHECK(b == NULL || b->len > 0, "%s: empty payload not NULL", what);
}

/* check_decoded verifies what message.h promises of a decoded frame
 * beyond its bytes: the invariant of frame.h, consecutive entries of known
 * types, chunks within their file. */
static void check_decoded(const struct raft_frame *f)
{
    uint32_t i;

    if (raft_frame_is_message(f)) {
        FUZZ_CHECK(f->message.type == f->type && f->message.from == f->from &&
                       f->message.to == f->to,
                   "message header differs from the frame's");
    }
    switch (f->type) {
        case RAFT_MSG_APPEND_ENTRIES: {
            const struct raft_append_entries *ae = &f->message.append_entries;
            FUZZ_CHECK(ae->n_entries == 0 || ae->entries != NULL,
                       "%u entries, no array", (unsigned)ae->n_entries);
            for (i = 0; i < ae->n_entries; i++) {
                const struct raft_entry *e = &ae->entries[i];
                FUZZ_CHECK(
                    e->index == ae->prev_log_index + 1 + i && e->index != 0,
                    "entry %u has index %llu", (unsigned)i,
                    (unsigned long long)e->index);
                FUZZ_CHECK(e->type == RAFT_ENTRY_NORMAL ||
                               e->type == RAFT_ENTRY_NOOP ||
                               e->type == RAFT_ENTRY_CONFIG,
                           "entry %u has type %u", (unsigned)i,
                           (unsigned)e->type);
                check_payload(e->data, "entry");
            }
            break;
        }
        case RAFT_FRAME_FORWARD:
            check_payload(f->forward.data, "forward");
            break;
        case RAFT_FRAME_SNAPSHOT_CHUNK: {
            const struct raft_snapshot_chunk *c = &f->snapshot_chunk;
            size_t len = c->data == NULL ? 0 : c->data->len;
            check_payload(c->data, "chunk");
            FUZZ_CHECK(c->offset <= c->total && len <= c->total - c->offset,
                       "chunk of %zu bytes at %llu past total %llu", len,
                       (unsigned long long)c->offset,
                       (unsigned long long)c->total);
            break;
        }
        default:
            break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct raft_frame f, untouched, again, zero;
    char err[160];
    uint8_t *buf;
    size_t len;
    int rc, rc2;

    memset(&f, 0xa5, sizeof f);
    untouched = f;
    rc = raft_frame_decode(data, size, &f, err, sizeof err);
    /* The same bytes give the same answer, with or without a message. */
    rc2 = raft_frame_decode(data, size, &again, NULL, 0);
    FUZZ_CHECK(rc == rc2, "rc %d, then %d without errmsg", rc, rc2);
    if (rc2 == 0) {
        raft_frame_release(&again);
    }
    if (rc != 0) {
        FUZZ_CHECK(rc == RAFT_PROTO || rc == RAFT_FORMAT || rc == RAFT_NOMEM,
                   "rc %d", rc);
        FUZZ_CHECK(memcmp(&f, &untouched, sizeof f) == 0,
                   "output written on failure (rc %d)", rc);
        FUZZ_CHECK(fuzz_msg_ok(err, sizeof err), "no error message");
        return 0;
    }
    check_decoded(&f);

    /* Round trip: the frame encodes back, in its wire version, to its
     * length prefix and the very bytes it was decoded from. */
    len = raft_frame_encoded_len_at(&f, data[0]);
    FUZZ_CHECK(len == RAFT_FRAME_HEADER + size, "encoded length %zu for %zu",
               len, size);
    buf = malloc(len);
    FUZZ_CHECK(buf != NULL, "out of memory");
    /* In the wire version it came in (the decoder takes every version
     * this build speaks; the encoder's default is the highest). */
    rc = raft_frame_encode_at(&f, data[0], buf, len);
    FUZZ_CHECK(rc == 0, "encode of a decoded frame: rc %d", rc);
    FUZZ_CHECK(raft_byte_load_u32(buf) == size, "length prefix %u",
               (unsigned)raft_byte_load_u32(buf));
    FUZZ_CHECK(memcmp(buf + RAFT_FRAME_HEADER, data, size) == 0,
               "type %u: re-encoded bytes differ", (unsigned)f.type);
    free(buf);

    raft_frame_release(&f);
    memset(&zero, 0, sizeof zero);
    FUZZ_CHECK(memcmp(&f, &zero, sizeof f) == 0, "release left fields");
    return 0;
}
