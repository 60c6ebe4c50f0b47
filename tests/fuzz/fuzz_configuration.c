/* libFuzzer target: the configuration decoder (raft_configuration_decode,
 * raft/configuration.h), which reads the payload of RAFT_ENTRY_CONFIG
 * entries received from peers and of snapshot metadata; what it accepts
 * must be a valid configuration that encodes back to the same bytes. */

#include <string.h>

#include "fuzz.h"
#include "raft/configuration.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct raft_configuration c;
    struct raft_configuration untouched;
    char err[160];
    uint8_t *buf;
    unsigned i;
    unsigned j;
    int rc;

    memset(&c, 0xa5, sizeof c);
    untouched = c;
    rc = raft_configuration_decode(data, size, &c, err, sizeof err);
    if (rc != 0) {
        FUZZ_CHECK(rc == RAFT_FORMAT || rc == RAFT_CORRUPT, "rc %d", rc);
        FUZZ_CHECK(memcmp(&c, &untouched, sizeof c) == 0,
                   "output written on failure (rc %d)", rc);
        FUZZ_CHECK(fuzz_msg_ok(err, sizeof err), "no error message");
        return 0;
    }
    FUZZ_CHECK(c.n <= RAFT_MAX_SERVERS, "%u servers", c.n);
    for (i = 0; i < c.n; i++) {
        const struct raft_server *s = &c.servers[i];
        FUZZ_CHECK(s->id != 0, "server %u: id 0", i);
        FUZZ_CHECK(s->role == RAFT_VOTER || s->role == RAFT_LEARNER,
                   "server %u: role %u", i, (unsigned)s->role);
        FUZZ_CHECK(memchr(s->address, 0, sizeof s->address) != NULL,
                   "server %u: address not terminated", i);
        for (j = 0; j < i; j++) {
            FUZZ_CHECK(c.servers[j].id != s->id, "duplicate id");
        }
    }
    FUZZ_CHECK(raft_configuration_encoded_len(&c) == size,
               "encoded length %zu for %zu", raft_configuration_encoded_len(&c),
               size);
    buf = malloc(size);
    FUZZ_CHECK(buf != NULL, "out of memory");
    FUZZ_CHECK(raft_configuration_encode(&c, buf, size) == 0, "encode");
    FUZZ_CHECK(memcmp(buf, data, size) == 0, "round trip differs");
    free(buf);
    return 0;
}
