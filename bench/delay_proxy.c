/* delay-proxy: a TCP proxy on 127.0.0.1 that holds every byte for half a
 * round trip in each direction, the network delay of the benchmark's
 * delayed runs (this kernel has no netem qdisc).
 *
 *     delay-proxy --rtt-ms D LISTEN_PORT:TARGET_PORT [...]
 *
 * Each LISTEN_PORT accepts connections and opens one to TARGET_PORT per
 * accepted one; the bytes read on either side are written to the other
 * D/2 ms after they were read (so a request and its answer through the
 * proxy take D ms more), in order, with TCP_NODELAY on both sockets. D is
 * a decimal number of milliseconds (0.2 .. 10000); 0 forwards at once.
 *
 * Happy path: one thread accepts per port; per connection and direction a
 * reader thread stamps each chunk it reads with its due time and queues
 * it, and a writer thread sleeps until the head chunk is due
 * (clock_nanosleep on CLOCK_MONOTONIC, so the delay holds to about 0.1 ms)
 * and writes it.
 *
 * Failure modes: a target that refuses closes the accepted connection; EOF
 * on one side is passed on as a half close once the bytes before it are
 * written; a read or write error closes both sides of that connection.
 * Nothing is bounded but the queue's memory, which the senders' own flow
 * control bounds. SIGTERM or SIGINT exit at once. Prints "delay-proxy:
 * ready" on stdout once every port listens. */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 16
#define CHUNK_BYTES 65536

struct chunk {
    struct chunk *next;
    struct timespec due; /* CLOCK_MONOTONIC time to write it */
    size_t len;          /* 0: end of stream (a half close) */
    char data[];
};

/* One direction of one connection: @from is read, @to written. */
struct pipe_dir {
    int from, to;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct chunk *head, *tail;
    bool failed; /* the writer gave up: the reader stops */
    struct conn *conn;
};

/* One proxied connection: two directions; freed by the last of its four
 * threads. */
struct conn {
    struct pipe_dir dir[2];
    pthread_mutex_t mu;
    int threads_left;
    int fds[2];
};

static long g_half_ns; /* one-way delay, ns */

static void conn_release(struct conn *c)
{
    int left;
    pthread_mutex_lock(&c->mu);
    left = --c->threads_left;
    pthread_mutex_unlock(&c->mu);
    if (left > 0) {
        return;
    }
    for (int i = 0; i < 2; i++) {
        struct chunk *k = c->dir[i].head;
        while (k != NULL) {
            struct chunk *n = k->next;
            free(k);
            k = n;
        }
        pthread_mutex_destroy(&c->dir[i].mu);
        pthread_cond_destroy(&c->dir[i].cv);
    }
    close(c->fds[0]);
    close(c->fds[1]);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void enqueue(struct pipe_dir *d, struct chunk *k)
{
    clock_gettime(CLOCK_MONOTONIC, &k->due);
    k->due.tv_nsec += g_half_ns % 1000000000L;
    k->due.tv_sec += g_half_ns / 1000000000L + k->due.tv_nsec / 1000000000L;
    k->due.tv_nsec %= 1000000000L;
    k->next = NULL;
    pthread_mutex_lock(&d->mu);
    if (d->tail != NULL) {
        d->tail->next = k;
    } else {
        d->head = k;
    }
    d->tail = k;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

static void *reader_main(void *arg)
{
    struct pipe_dir *d = arg;
    for (;;) {
        struct chunk *k = malloc(sizeof *k + CHUNK_BYTES);
        ssize_t n;
        if (k == NULL) {
            break;
        }
        n = read(d->from, k->data, CHUNK_BYTES);
        if (n < 0 && errno == EINTR) {
            free(k);
            continue;
        }
        k->len = n > 0 ? (size_t)n : 0;
        enqueue(d, k);
        if (n <= 0) {
            break;
        }
        pthread_mutex_lock(&d->mu);
        bool failed = d->failed;
        pthread_mutex_unlock(&d->mu);
        if (failed) {
            break;
        }
    }
    conn_release(d->conn);
    return NULL;
}

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void *writer_main(void *arg)
{
    struct pipe_dir *d = arg;
    for (;;) {
        struct chunk *k;
        pthread_mutex_lock(&d->mu);
        while (d->head == NULL) {
            pthread_cond_wait(&d->cv, &d->mu);
        }
        k = d->head;
        d->head = k->next;
        if (d->head == NULL) {
            d->tail = NULL;
        }
        pthread_mutex_unlock(&d->mu);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &k->due, NULL) ==
               EINTR) {
        }
        if (k->len == 0) {
            free(k);
            shutdown(d->to, SHUT_WR);
            break;
        }
        if (!write_all(d->to, k->data, k->len)) {
            free(k);
            pthread_mutex_lock(&d->mu);
            d->failed = true;
            pthread_mutex_unlock(&d->mu);
            /* Wake the reader of this direction and end the other. */
            shutdown(d->from, SHUT_RDWR);
            shutdown(d->to, SHUT_RDWR);
            break;
        }
        free(k);
    }
    conn_release(d->conn);
    return NULL;
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int dial(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0) {
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    nodelay(fd);
    return fd;
}

static void start_thread(void *(*fn)(void *), void *arg)
{
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 * 1024);
    if (pthread_create(&th, &at, fn, arg) != 0) {
        perror("delay-proxy: pthread_create");
        exit(1);
    }
    pthread_attr_destroy(&at);
}

static void proxy(int client, int target_port)
{
    int server = dial(target_port);
    struct conn *c;
    if (server < 0) {
        close(client);
        return;
    }
    nodelay(client);
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        close(client);
        close(server);
        return;
    }
    c->fds[0] = client;
    c->fds[1] = server;
    c->threads_left = 4;
    pthread_mutex_init(&c->mu, NULL);
    for (int i = 0; i < 2; i++) {
        struct pipe_dir *d = &c->dir[i];
        d->from = c->fds[i];
        d->to = c->fds[1 - i];
        d->conn = c;
        pthread_mutex_init(&d->mu, NULL);
        pthread_cond_init(&d->cv, NULL);
    }
    for (int i = 0; i < 2; i++) {
        start_thread(reader_main, &c->dir[i]);
        start_thread(writer_main, &c->dir[i]);
    }
}

struct listener {
    int fd;
    int target_port;
};

static void *accept_main(void *arg)
{
    struct listener *l = arg;
    for (;;) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE) {
                continue;
            }
            perror("delay-proxy: accept");
            exit(1);
        }
        proxy(fd, l->target_port);
    }
    return NULL;
}

static int listen_on(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port)};
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(fd, 128) != 0) {
        return -1;
    }
    return fd;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: delay-proxy --rtt-ms D LISTEN_PORT:TARGET_PORT "
            "[LISTEN_PORT:TARGET_PORT ...]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static struct listener ls[MAX_PORTS];
    int n = 0;
    double rtt;
    char *end;
    sigset_t set;
    int sig;

    if (argc < 4 || strcmp(argv[1], "--rtt-ms") != 0) {
        usage();
    }
    rtt = strtod(argv[2], &end);
    if (*end != '\0' || !(rtt == 0 || (rtt >= 0.2 && rtt <= 10000))) {
        fprintf(stderr,
                "delay-proxy: --rtt-ms: '%s' is not 0 or a number "
                "of milliseconds from 0.2 to 10000\n",
                argv[2]);
        return 2;
    }
    g_half_ns = (long)(rtt * 1e6 / 2);
    if (argc - 3 > MAX_PORTS) {
        fprintf(stderr, "delay-proxy: at most %d ports\n", MAX_PORTS);
        return 2;
    }
    /* Threads inherit a blocked SIGPIPE (a closed peer is a write error)
     * and the exit signals, which main waits for. */
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    for (int i = 3; i < argc; i++) {
        long lp, tp;
        lp = strtol(argv[i], &end, 10);
        if (*end != ':' || lp <= 0 || lp > 65535) {
            usage();
        }
        tp = strtol(end + 1, &end, 10);
        if (*end != '\0' || tp <= 0 || tp > 65535) {
            usage();
        }
        ls[n].fd = listen_on((int)lp);
        if (ls[n].fd < 0) {
            fprintf(stderr, "delay-proxy: listen on 127.0.0.1:%ld: %s\n", lp,
                    strerror(errno));
            return 1;
        }
        ls[n].target_port = (int)tp;
        n++;
    }
    for (int i = 0; i < n; i++) {
        start_thread(accept_main, &ls[i]);
    }
    printf("delay-proxy: ready\n");
    fflush(stdout);
    sigdelset(&set, SIGPIPE);
    sigwait(&set, &sig);
    return 0;
}
