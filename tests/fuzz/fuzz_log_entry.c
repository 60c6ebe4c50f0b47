/* libFuzzer target: the LMDB log's entry records (lmdb_log/format.h):
 * format_key_decode, format_entry_check and format_entry_decode on any
 * key and value. Input: a mode byte, an 8-byte key, the value; mode bit 0
 * first makes the value's length field and checksum right (as format.h
 * specifies them), so the fuzzer gets past the checksum too. */

#include <stdbool.h>
#include <string.h>
#include <xxhash.h>

#include "fuzz.h"
#include "lmdb_log/format.h"

#define MODE_FIX 0x01 /* mode bit: make length and checksum right */

static void store_le(uint8_t *p, uint64_t v, unsigned n)
{
    unsigned i;

    for (i = 0; i < n; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

/* check_key: only 8 bytes are a key, and a key encodes back to itself. */
static void check_key(const uint8_t *key, size_t len, raft_index *out)
{
    uint8_t enc[LMDB_LOG_FORMAT_KEY_LEN];
    raft_index index = 0;
    int rc = format_key_decode(key, len, &index);

    FUZZ_CHECK((rc == 0) == (len == LMDB_LOG_FORMAT_KEY_LEN),
               "key of %zu bytes: rc %d", len, rc);
    if (rc != 0) {
        return;
    }
    format_key_encode(index, enc);
    FUZZ_CHECK(memcmp(enc, key, sizeof enc) == 0, "key re-encodes otherwise");
    *out = index;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    raft_index index = 0;
    struct raft_entry e;
    const char *defect;
    uint8_t *value, *enc;
    size_t len, payload_len;
    bool fixed = false;
    int rc;

    if (size < 1) {
        return 0;
    }
    check_key(data + 1, size - 1, &index);
    if (size < 1 + LMDB_LOG_FORMAT_KEY_LEN) {
        return 0;
    }
    check_key(data + 1, LMDB_LOG_FORMAT_KEY_LEN, &index);

    /* The value, in a buffer of its own size so that ASan sees any read
     * past it. */
    len = size - 1 - LMDB_LOG_FORMAT_KEY_LEN;
    value = malloc(len > 0 ? len : 1);
    FUZZ_CHECK(value != NULL, "out of memory");
    memcpy(value, data + 1 + LMDB_LOG_FORMAT_KEY_LEN, len);
    if ((data[0] & MODE_FIX) && len >= LMDB_LOG_FORMAT_ENTRY_EXTRA) {
        size_t body = len - 8;
        store_le(value + 9, len - LMDB_LOG_FORMAT_ENTRY_EXTRA, 4);
        store_le(value + body, XXH64(value, body, index), 8);
        fixed = true;
    }

    defect = format_entry_check(index, value, len);
    FUZZ_CHECK(len >= LMDB_LOG_FORMAT_ENTRY_EXTRA || defect != NULL,
               "a value of %zu bytes passed", len);
    FUZZ_CHECK(!fixed || defect == NULL, "a sound value refused: %s", defect);
    if (defect != NULL) {
        FUZZ_CHECK(defect[0] != 0, "empty defect");
        free(value);
        return 0;
    }

    memset(&e, 0, sizeof e);
    rc = format_entry_decode(index, value, len, &e);
    FUZZ_CHECK(rc == 0, "decode of a checked value: rc %d", rc);
    payload_len = e.data != NULL ? e.data->len : 0;
    FUZZ_CHECK(e.index == index && e.term == format_entry_term(value),
               "index or term");
    FUZZ_CHECK(e.data == NULL || payload_len > 0, "empty payload not NULL");
    FUZZ_CHECK(format_entry_len(payload_len) == len, "entry length %zu",
               format_entry_len(payload_len));

    /* Round trip: the entry encodes back to the value. */
    enc = malloc(len);
    FUZZ_CHECK(enc != NULL, "out of memory");
    format_entry_encode(&e, enc);
    FUZZ_CHECK(memcmp(enc, value, len) == 0, "entry re-encodes otherwise");
    /* The checksum binds the value to its key. */
    FUZZ_CHECK(format_entry_check(index + 1, value, len) != NULL,
               "value accepted under index %llu too",
               (unsigned long long)(index + 1));
    free(enc);
    raft_buf_unref(e.data);
    free(value);
    return 0;
}
