/* libFuzzer target: the membership change request codec
 * (ext/runtime/change_codec.h): change_codec_decode on any payload; what
 * decodes must encode back to the same bytes, and its words must be
 * printable. */

#include <string.h>

#include "ext/runtime/change_codec.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ext_change_request q;
    struct raft_buf *b = NULL;
    char words[512];
    int rc = change_codec_decode(data, size, &q);

    if (rc != 0) {
        FUZZ_CHECK(rc == RAFT_CORRUPT || rc == RAFT_FORMAT, "code %d", rc);
        return 0;
    }
    FUZZ_CHECK(change_codec_encode(&q, &b) == 0, "decoded, not encoded");
    FUZZ_CHECK(b->len == size && memcmp(b->data, data, size) == 0,
               "encoded back differently (%zu bytes, then %zu)", size, b->len);
    raft_buf_unref(b);
    for (unsigned why = 0; why <= EXT_WHY_ADDRESS + 1; why++) {
        change_codec_describe(&q, RAFT_INVALID, why, 2, words, sizeof words);
        FUZZ_CHECK(fuzz_msg_ok(words, sizeof words), "no words for %u", why);
        (void)change_codec_already(&q, RAFT_INVALID, why, 2);
    }
    return 0;
}
