/* Helpers of the libFuzzer targets (tests/fuzz/fuzz_*.c): a check that
 * fails the run, which libFuzzer then reports as a crash and keeps the
 * input of. */

#ifndef TESTS_FUZZ_H
#define TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The entry point libFuzzer calls with each input (@size bytes at @data,
 * read only); returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The cluster id of the receiver of fuzz_recv.c, for gen_corpus.c's
 * samples: an initializer of 16 bytes. */
#define FUZZ_CLUSTER_ID                                                        \
    {                                                                          \
        0xc1, 0x05, 0x7e, 0x41, 0xd0, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,      \
            0x07, 0x08, 0x09, 0x0a, 0x0b                                       \
    }

/* FUZZ_CHECK aborts with the failed condition and a message when @cond is
 * false: a wrong decoder is a finding like a crash. */
#define FUZZ_CHECK(cond, ...)                                                  \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__,   \
                    #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* fuzz_msg_ok says whether the error message buffer @msg (@len bytes) holds
 * a non-empty NUL-terminated message. */
static inline int fuzz_msg_ok(const char *msg, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        if (msg[i] == 0) {
            return i > 0;
        }
    }
    return 0;
}

#endif /* TESTS_FUZZ_H */
