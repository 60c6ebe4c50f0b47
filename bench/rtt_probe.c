/* build/rtt-probe: this machine's loopback TCP round trip, one term of the
 * one-client write floor that bench/compare.sh reports each round
 * (bench/README.md "The floor"): 1 / (2 x fsync + RTT).
 *
 * Two processes (a fork: like two nodes, each wake crosses a process),
 * TCP over 127.0.0.1 with TCP_NODELAY, as the nodes' peer links are: the
 * parent sends @size bytes (an AppendEntries of one 1 KiB write is about
 * 1.2 KiB), the child answers 32 bytes (an AppendEntries result), and
 * the parent times each round trip.
 *
 * Usage: rtt-probe [--count N] [--size BYTES] [--name NAME]
 * Prints one line on stdout:
 *   RESULT name=NAME writes_per_s=n/a p50_ms=X p99_ms=X p999_ms=X errors=0
 *          round_trips=N size=BYTES
 * Exit status 0, or 1 with the reason on stderr (a socket call failed,
 * the peer went away, a bad argument). */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "latency.h"
#include "timing.h"

#define REPLY_BYTES 32

/* io_all reads (@out false) or writes (@out true) all @n bytes of @p on
 * @fd. Returns 0, or -1 (errno set; 0 for a closed peer). */
static int io_all(int fd, void *p, size_t n, int out)
{
    char *c = p;
    while (n > 0) {
        ssize_t k = out ? write(fd, c, n) : read(fd, c, n);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            if (k == 0) {
                errno = 0;
            }
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* echo_child answers each @size-byte message on @fd with REPLY_BYTES
 * until the parent closes it. */
static void echo_child(int fd, size_t size)
{
    char *buf = malloc(size);
    char reply[REPLY_BYTES] = {0};
    if (buf == NULL) {
        _exit(1);
    }
    while (io_all(fd, buf, size, 0) == 0) {
        if (io_all(fd, reply, sizeof reply, 1) != 0) {
            break;
        }
    }
    free(buf);
    _exit(0);
}

/* parse_count reads a whole number in [lo, hi] from @s, or exits. */
static long parse_count(const char *opt, const char *s, long lo, long hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "rtt-probe: %s must be a whole number in [%ld, %ld]\n",
                opt, lo, hi);
        exit(1);
    }
    return v;
}

int main(int argc, char **argv)
{
    long count = 2000, size = 1200;
    const char *name = "rtt-loopback";
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t alen = sizeof a;
    int ls, fd, one = 1, status;
    uint32_t *us;
    char *buf, reply[REPLY_BYTES];
    pid_t child;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            count = parse_count("--count", argv[++i], 10, 10000000);
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            size = parse_count("--size", argv[++i], 1, 1 << 20);
        } else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc) {
            name = argv[++i];
        } else {
            fprintf(stderr,
                    "usage: rtt-probe [--count N] [--size BYTES] "
                    "[--name NAME]\n");
            return 1;
        }
    }
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &alen) != 0) {
        fprintf(stderr, "rtt-probe: listen on 127.0.0.1: %s\n",
                strerror(errno));
        return 1;
    }
    child = fork();
    if (child < 0) {
        fprintf(stderr, "rtt-probe: fork: %s\n", strerror(errno));
        return 1;
    }
    if (child == 0) {
        int c = accept(ls, NULL, NULL);
        if (c < 0) {
            _exit(1);
        }
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        close(ls);
        echo_child(c, (size_t)size);
    }
    close(ls);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        fprintf(stderr, "rtt-probe: connect: %s\n", strerror(errno));
        kill(child, SIGKILL);
        return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    us = calloc((size_t)count, sizeof *us);
    buf = calloc(1, (size_t)size);
    if (us == NULL || buf == NULL) {
        fprintf(stderr, "rtt-probe: out of memory\n");
        kill(child, SIGKILL);
        return 1;
    }
    for (long i = 0; i < count; i++) {
        double t0 = timing_now_s(), dt;
        if (io_all(fd, buf, (size_t)size, 1) != 0 ||
            io_all(fd, reply, sizeof reply, 0) != 0) {
            fprintf(stderr, "rtt-probe: round trip %ld: %s\n", i,
                    errno != 0 ? strerror(errno) : "the peer closed");
            kill(child, SIGKILL);
            return 1;
        }
        dt = (timing_now_s() - t0) * 1e6;
        us[i] = dt > 4e9 ? UINT32_MAX : (uint32_t)dt;
    }
    close(fd);
    waitpid(child, &status, 0);
    latency_sort(us, (size_t)count);
    printf(
        "RESULT name=%s writes_per_s=n/a p50_ms=%.3f p99_ms=%.3f "
        "p999_ms=%.3f errors=0 round_trips=%ld size=%ld\n",
        name, latency_pct_ms(us, (size_t)count, 0.50),
        latency_pct_ms(us, (size_t)count, 0.99),
        latency_pct_ms(us, (size_t)count, 0.999), count, size);
    free(us);
    free(buf);
    return 0;
}
