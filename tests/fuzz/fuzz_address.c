/* libFuzzer target: the address parser (raft_address_parse,
 * raft/address.h), which reads every address of the configuration string,
 * of raft_add and of a peer's handshake. What it accepts must format to
 * text that parses back to the same address, within the handshake's
 * limit; what it refuses leaves the output untouched and says why. */

#include <string.h>

#include "fuzz.h"
#include "raft/address.h"
#include "raft/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[RAFT_ADDRESS_TEXT_MAX * 2 + 1];
    char back[RAFT_ADDRESS_TEXT_MAX + 1];
    char again[RAFT_ADDRESS_TEXT_MAX + 1];
    struct raft_address a, b, c, untouched;
    char err[200];
    size_t len;
    int rc;

    if (size >= sizeof text) {
        size = sizeof text - 1;
    }
    memcpy(text, data, size);
    text[size] = '\0';
    memset(&a, 0xa5, sizeof a);
    untouched = a;
    rc = raft_address_parse(text, &a, err, sizeof err);
    if (rc != 0) {
        FUZZ_CHECK(rc == RAFT_INVALID, "rc %d", rc);
        FUZZ_CHECK(memcmp(&a, &untouched, sizeof a) == 0,
                   "output written on failure");
        FUZZ_CHECK(fuzz_msg_ok(err, sizeof err), "no error message");
        return 0;
    }
    FUZZ_CHECK(a.kind == RAFT_ADDRESS_IPV4 || a.kind == RAFT_ADDRESS_IPV6 ||
                   a.kind == RAFT_ADDRESS_NAME,
               "kind %d", a.kind);
    FUZZ_CHECK(a.port >= 1, "port 0");
    FUZZ_CHECK(memchr(a.host, 0, sizeof a.host) != NULL, "host unterminated");
    FUZZ_CHECK(strlen(text) <= RAFT_ADDRESS_TEXT_MAX, "%zu bytes accepted",
               strlen(text));
    /* Round trip: the text it formats to reads back to an equal address,
     * and formats to itself. */
    len = raft_address_format(&a, back, sizeof back);
    FUZZ_CHECK(len == strlen(back) && len <= RAFT_ADDRESS_TEXT_MAX,
               "formatted to %zu bytes", len);
    FUZZ_CHECK(raft_address_parse(back, &b, err, sizeof err) == 0,
               "'%s' formatted from '%s' does not parse: %s", back, text, err);
    FUZZ_CHECK(
        a.kind == b.kind && strcmp(a.host, b.host) == 0 && a.port == b.port,
        "'%s' reads back differently", back);
    raft_address_format(&b, again, sizeof again);
    FUZZ_CHECK(strcmp(back, again) == 0, "'%s' formats to '%s'", back, again);
    FUZZ_CHECK(raft_address_equal(&a, &b), "not equal to itself");
    /* The bare host and port make the same address. */
    FUZZ_CHECK(
        raft_address_parse_host(a.host, a.port, &c, err, sizeof err) == 0 &&
            c.kind == a.kind && raft_address_equal(&a, &c),
        "host '%s' port %u: %s", a.host, a.port, err);
    FUZZ_CHECK(!(raft_address_loopback(&a) && raft_address_wildcard(&a)),
               "'%s' loopback and wildcard", text);
    return 0;
}
