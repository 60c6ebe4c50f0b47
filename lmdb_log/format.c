/* Byte codecs of the LMDB log's records (the format is specified in
 * format.h). */

#include "format.h"

#include <assert.h>
#include <string.h>

#include <xxhash.h>

static void put_u64_le(uint8_t *p, uint64_t v)
{
    for (unsigned i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static uint64_t get_u64_le(const uint8_t *p)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < 8; i++) {
        v |= (uint64_t)p[i] << (8 * i);
    }
    return v;
}

static void put_u32_le(uint8_t *p, uint32_t v)
{
    for (unsigned i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static uint32_t get_u32_le(const uint8_t *p)
{
    uint32_t v = 0;
    for (unsigned i = 0; i < 4; i++) {
        v |= (uint32_t)p[i] << (8 * i);
    }
    return v;
}

void format_key_encode(raft_index index, uint8_t out[LMDB_LOG_FORMAT_KEY_LEN])
{
    for (unsigned i = 0; i < LMDB_LOG_FORMAT_KEY_LEN; i++) {
        out[i] = (uint8_t)(index >> (8 * (LMDB_LOG_FORMAT_KEY_LEN - 1 - i)));
    }
}

int format_key_decode(const void *key, size_t key_len, raft_index *out_index)
{
    const uint8_t *p = key;
    raft_index index = 0;

    if (key_len != LMDB_LOG_FORMAT_KEY_LEN) {
        return RAFT_CORRUPT;
    }
    for (unsigned i = 0; i < LMDB_LOG_FORMAT_KEY_LEN; i++) {
        index = (index << 8) | p[i];
    }
    *out_index = index;
    return 0;
}

size_t format_entry_len(size_t payload_len)
{
    assert(payload_len <= LMDB_LOG_FORMAT_MAX_PAYLOAD);
    return LMDB_LOG_FORMAT_ENTRY_EXTRA + payload_len;
}

void format_entry_encode(const struct raft_entry *e, void *out)
{
    uint8_t *p = out;
    size_t payload_len = e->data != NULL ? e->data->len : 0;
    size_t body_len = LMDB_LOG_FORMAT_ENTRY_HEAD + payload_len;

    assert(payload_len <= LMDB_LOG_FORMAT_MAX_PAYLOAD);
    put_u64_le(p, e->term);
    p[8] = e->type;
    put_u32_le(p + 9, (uint32_t)payload_len);
    if (payload_len > 0) {
        memcpy(p + LMDB_LOG_FORMAT_ENTRY_HEAD, e->data->data, payload_len);
    }
    put_u64_le(p + body_len, XXH64(p, body_len, e->index));
}

const char *format_entry_check(raft_index index, const void *value,
                               size_t value_len)
{
    const uint8_t *p = value;
    size_t body_len;

    if (value_len < LMDB_LOG_FORMAT_ENTRY_EXTRA) {
        return "value shorter than its fixed fields";
    }
    body_len = value_len - 8;
    if ((uint64_t)get_u32_le(p + 9) !=
        (uint64_t)(value_len - LMDB_LOG_FORMAT_ENTRY_EXTRA)) {
        return "payload length does not match the value size";
    }
    if (get_u64_le(p + body_len) != XXH64(p, body_len, index)) {
        return "checksum mismatch";
    }
    return NULL;
}

int format_entry_decode(raft_index index, const void *value, size_t value_len,
                        struct raft_entry *out)
{
    const uint8_t *p = value;
    size_t payload_len;
    struct raft_buf *data = NULL;

    assert(format_entry_check(index, value, value_len) == NULL);
    payload_len = value_len - LMDB_LOG_FORMAT_ENTRY_EXTRA;
    if (payload_len > 0) {
        data = raft_buf_copy(p + LMDB_LOG_FORMAT_ENTRY_HEAD, payload_len);
        if (data == NULL) {
            return RAFT_NOMEM;
        }
    }
    out->term = get_u64_le(p);
    out->index = index;
    out->type = p[8];
    out->data = data;
    return 0;
}

raft_term format_entry_term(const void *value)
{
    return get_u64_le(value);
}

void format_version_encode(uint32_t version,
                           uint8_t out[LMDB_LOG_FORMAT_VERSION_LEN])
{
    put_u32_le(out, version);
}

int format_version_decode(const void *value, size_t value_len,
                          uint32_t *out_version)
{
    if (value_len != LMDB_LOG_FORMAT_VERSION_LEN) {
        return RAFT_CORRUPT;
    }
    *out_version = get_u32_le(value);
    return 0;
}

static uint64_t meta_checksum(const char *name, const uint8_t *value)
{
    uint64_t seed = XXH64(name, strlen(name), 0);
    return XXH64(value, 8, seed);
}

void format_meta_encode(const char *name, uint64_t value,
                        uint8_t out[LMDB_LOG_FORMAT_META_LEN])
{
    put_u64_le(out, value);
    put_u64_le(out + 8, meta_checksum(name, out));
}

int format_meta_decode(const char *name, const void *value, size_t value_len,
                       uint64_t *out_value)
{
    const uint8_t *p = value;

    if (value_len != LMDB_LOG_FORMAT_META_LEN) {
        return RAFT_CORRUPT;
    }
    if (get_u64_le(p + 8) != meta_checksum(name, p)) {
        return RAFT_CORRUPT;
    }
    *out_value = get_u64_le(p);
    return 0;
}
