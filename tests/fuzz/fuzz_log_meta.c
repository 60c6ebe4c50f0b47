/* libFuzzer target: the LMDB log's meta records (lmdb_log/format.h):
 * format_meta_decode under each record name and format_version_decode,
 * on any value. Input: a selector byte (the record; bit 7 first makes the
 * checksum right, as format.h specifies it), then the value. */

#include <stdbool.h>
#include <string.h>
#include <xxhash.h>

#include "fuzz.h"
#include "lmdb_log/format.h"

#define SEL_FIX 0x80 /* selector bit: make the checksum right */

/* The u64 records; one more selector value picks the "format" record. */
static const char *const names[] = {
    LMDB_LOG_FORMAT_META_TERM,          LMDB_LOG_FORMAT_META_VOTE,
    LMDB_LOG_FORMAT_META_FIRST_INDEX,   LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX,
    LMDB_LOG_FORMAT_META_SNAPSHOT_TERM, LMDB_LOG_FORMAT_META_CLUSTER_ID_0,
    LMDB_LOG_FORMAT_META_CLUSTER_ID_1,
};
#define N_NAMES (sizeof names / sizeof names[0])

static void check_version(const uint8_t *value, size_t len)
{
    uint8_t enc[LMDB_LOG_FORMAT_VERSION_LEN];
    uint32_t version = 0;
    int rc = format_version_decode(value, len, &version);

    FUZZ_CHECK((rc == 0) == (len == LMDB_LOG_FORMAT_VERSION_LEN),
               "format record of %zu bytes: rc %d", len, rc);
    if (rc == 0) {
        format_version_encode(version, enc);
        FUZZ_CHECK(memcmp(enc, value, sizeof enc) == 0,
                   "format record re-encodes otherwise");
    }
}

static void check_meta(unsigned which, uint8_t *value, size_t len, bool fix)
{
    const char *name = names[which];
    uint8_t enc[LMDB_LOG_FORMAT_META_LEN];
    uint64_t v = 0;
    unsigned i;
    int rc;

    if (fix && len == LMDB_LOG_FORMAT_META_LEN) {
        uint64_t sum = XXH64(value, 8, XXH64(name, strlen(name), 0));
        for (i = 0; i < 8; i++) {
            value[8 + i] = (uint8_t)(sum >> (8 * i));
        }
    }
    rc = format_meta_decode(name, value, len, &v);
    FUZZ_CHECK(rc == 0 || rc == RAFT_CORRUPT, "%s: rc %d", name, rc);
    FUZZ_CHECK(!fix || len != LMDB_LOG_FORMAT_META_LEN || rc == 0,
               "%s: a sound record refused", name);
    if (rc != 0) {
        return;
    }
    FUZZ_CHECK(len == LMDB_LOG_FORMAT_META_LEN, "%s of %zu bytes", name, len);
    format_meta_encode(name, v, enc);
    FUZZ_CHECK(memcmp(enc, value, sizeof enc) == 0, "%s re-encodes otherwise",
               name);
    /* The checksum binds a record to its name. */
    for (i = 0; i < N_NAMES; i++) {
        uint64_t other;
        FUZZ_CHECK(
            i == which || format_meta_decode(names[i], value, len, &other) != 0,
            "%s accepted as %s", name, names[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned which;
    uint8_t *value;
    size_t len;

    if (size < 1) {
        return 0;
    }
    which = (data[0] & ~SEL_FIX) % (N_NAMES + 1);
    len = size - 1;
    /* A buffer of the value's own size, so that ASan sees a read past it. */
    value = malloc(len > 0 ? len : 1);
    FUZZ_CHECK(value != NULL, "out of memory");
    memcpy(value, data + 1, len);
    if (which == N_NAMES) {
        check_version(value, len);
    } else {
        check_meta(which, value, len, (data[0] & SEL_FIX) != 0);
    }
    free(value);
    return 0;
}
