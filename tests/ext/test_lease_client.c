/* Tests of ext/surface/lease_client.c in a process that runs no node: the
 * write lease asked of another process's node over its attach socket
 * (here a fake node: a thread answering on a Unix socket), the node's
 * answers passed on word for word, "outcome unknown" when the connection
 * closes during a commit, a node whose pointer file names no attach
 * version (an older release) sent no request at all, the release's
 * WAL marks sent only to a node of attach protocol 3 and the acquire's
 * flags only to one of protocol 4. */

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "ext/runtime/attach_sock.h"
#include "ext/runtime/node.h"
#include "ext/surface/attach_codec.h"
#include "ext/surface/attach_conn.h"
#include "ext/surface/lease_client.h"
#include "raft/err.h"
#include "tests/sql/helpers.h"

/* A fake node: answers the acquire with @acquire_code (0: lease id 77),
 * then the commit with @commit_code (0: committed; -1: closes the
 * connection without an answer). Records what it received. */
struct fake {
    int listen_fd;
    int acquire_code;
    int commit_code;
    char fns[3][EXT_ATTACH_FN_MAX]; /* the requests, in order */
    unsigned version;               /* its attach protocol, 0: this
                                       build's */
    unsigned flags;                 /* the flags the test asks with */
    int64_t holder;                 /* the acquire's token */
    unsigned acquire_n;             /* the acquire's arguments */
    int64_t acquire_flags;          /* and its flags, when 2 (else -1) */
    size_t changeset_len;           /* the commit's blob */
    unsigned release_n;             /* the release's arguments */
    struct sql_wal_marks marks;     /* and its marks, when 2 */
    int bad;                        /* the fake's own failures (checked
                                       on the test's thread: cmocka
                                       asserts there only) */
    pthread_t thread;
};

/* answer writes an answer to @fd: the integer @v, or error @code. */
static void answer(struct fake *f, int fd, int code, int64_t v,
                   const char *words)
{
    struct ext_attach_answer a;
    char *text = NULL;
    size_t len = 0;
    memset(&a, 0, sizeof a);
    a.ok = code == 0;
    a.code = code;
    a.value.type = SQL_INTEGER;
    a.value.integer = v;
    snprintf(a.errmsg, sizeof a.errmsg, "%s", words);
    if (attach_codec_answer_encode(&a, &text, &len) != 0 ||
        attach_conn_frame_write(fd, text, len) != 0) {
        f->bad++;
    }
    free(text);
}

/* next_call reads one request of @fd into @f->fns[@i]; false at EOF. */
static bool next_call(struct fake *f, int fd, int i, struct sql_value **args,
                      unsigned *n)
{
    char *frame = NULL, err[128];
    size_t len = 0;
    if (attach_conn_frame_read(fd, 5000, NULL, &frame, &len) != 0) {
        return false;
    }
    if (attach_codec_call_decode(frame, len, f->fns[i], args, n, err,
                                 sizeof err) != 0) {
        f->bad++;
        free(frame);
        return false;
    }
    free(frame);
    return true;
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    struct sql_value *args = NULL;
    unsigned n = 0;
    int fd = accept(f->listen_fd, NULL, NULL);

    if (fd < 0) {
        f->bad++;
        return NULL;
    }
    if (next_call(f, fd, 0, &args, &n)) {
        f->holder = n >= 1 ? args[0].integer : -1;
        f->acquire_n = n;
        f->acquire_flags =
            n == 2 && args[1].type == SQL_INTEGER ? args[1].integer : -1;
        attach_codec_values_free(args, n);
        answer(f, fd, f->acquire_code, 77,
               f->acquire_code != 0 ? "the lease is held by holder 9" : "");
    }
    if (f->acquire_code == 0 && next_call(f, fd, 1, &args, &n)) {
        f->changeset_len = n == 2 ? args[1].bytes.len : 0;
        attach_codec_values_free(args, n);
        if (f->commit_code >= 0) {
            answer(f, fd, f->commit_code, 0,
                   f->commit_code != 0 ? "not applied: the lease expired" : "");
            if (next_call(f, fd, 2, &args, &n)) {
                f->release_n = n;
                if (n == 2 && args[1].type == SQL_BLOB &&
                    args[1].bytes.len == sizeof f->marks) {
                    memcpy(&f->marks, args[1].bytes.p, sizeof f->marks);
                }
                attach_codec_values_free(args, n);
                answer(f, fd, 0, 0, "");
            }
        }
    }
    close(fd);
    return NULL;
}

/* fake_start listens at "<dir>/node.sock" of @d, writes @d's pointer
 * file (attach protocol f->version) naming it, and serves one
 * connection. */
static void fake_start(struct fake *f, struct tmpdb *d)
{
    struct ext_attach_pointer p = {
        .pid = (long)getpid(),
        .timeout_ms = 2000,
        .version = f->version != 0 ? f->version : EXT_ATTACH_VERSION};
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char err[256];

    snprintf(p.socket, sizeof p.socket, "%s/node.sock", d->dir);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", p.socket);
    f->listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(f->listen_fd >= 0);
    assert_int_equal(bind(f->listen_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(f->listen_fd, 4), 0);
    assert_int_equal(attach_sock_pointer_write(d->path, &p, err, sizeof err),
                     0);
    assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f, struct tmpdb *d)
{
    pthread_join(f->thread, NULL);
    close(f->listen_fd);
    assert_int_equal(f->bad, 0);
    attach_sock_pointer_remove(d->path, (long)getpid());
}

/* The pointer file says the socket's version; one without it (an older
 * release's four lines) is version 1. */
static void test_pointer_version(void **state)
{
    struct ext_attach_pointer p = {.pid = (long)getpid(),
                                   .socket = "/nonexistent/node.sock",
                                   .timeout_ms = 1000,
                                   .version = 2},
                              got;
    struct tmpdb d;
    char err[256], path[128];
    FILE *fp;
    (void)state;

    tmpdb_init(&d);
    assert_int_equal(attach_sock_pointer_write(d.path, &p, err, sizeof err), 0);
    assert_int_equal(attach_sock_find(d.path, &got), 0);
    assert_int_equal(got.version, 2);
    snprintf(path, sizeof path, "%s-raftsql", d.path);
    fp = fopen(path, "w");
    assert_non_null(fp);
    fprintf(fp,
            "raftsql-attach 1\npid=%ld\nsocket=/x/node.sock\n"
            "timeout_ms=1000\n",
            (long)getpid());
    fclose(fp);
    assert_int_equal(attach_sock_find(d.path, &got), 0);
    assert_int_equal(got.version, 1);
    assert_int_equal(got.timeout_ms, 1000);
    tmpdb_remove(&d);
}

/* A node of attach protocol 1 is asked nothing: the acquire is refused,
 * naming the older release. */
static void test_older_node_refused(void **state)
{
    struct ext_attach_pointer p = {.pid = (long)getpid(),
                                   .socket = "/nonexistent/node.sock",
                                   .timeout_ms = 1000,
                                   .version = 1};
    struct lease_hold h;
    struct tmpdb d;
    char err[256], why[600] = "";
    (void)state;

    tmpdb_init(&d);
    lease_hold_init(&h);
    assert_int_equal(attach_sock_pointer_write(d.path, &p, err, sizeof err), 0);
    assert_int_equal(lease_client_acquire(d.path, 5, 0, &h, why, sizeof why),
                     RAFT_FORMAT);
    assert_non_null(strstr(why, "older release"));
    assert_int_equal(h.id, 0);
    assert_int_equal(h.fd, -1);
    tmpdb_remove(&d);
}

/* acquire_from_fake starts fake node @f on a new database @d and takes
 * its lease into @h: id 77 on a connection of its own. */
static void acquire_from_fake(struct fake *f, struct tmpdb *d,
                              struct lease_hold *h)
{
    char why[600] = "";
    tmpdb_init(d);
    fake_start(f, d);
    assert_int_equal(
        lease_client_acquire(d->path, 5, f->flags, h, why, sizeof why), 0);
    assert_int_equal(h->id, 77);
    assert_true(h->fd >= 0);
}

/* The lease over the socket: acquire (the token travels), commit (the
 * changeset travels, the node's error words come back as they are),
 * release on the same connection, with the writer's WAL marks. */
static void test_remote_lease(void **state)
{
    static const char changeset[] = "a changeset";
    struct fake f = {.acquire_code = 0, .commit_code = RAFT_TIMEOUT};
    struct sql_wal_marks m;
    struct lease_hold h;
    struct tmpdb d;
    char why[600] = "";
    (void)state;

    memset(m.locked, 'L', sizeof m.locked);
    memset(m.done, 'D', sizeof m.done);
    acquire_from_fake(&f, &d, &h);
    assert_int_equal(
        lease_client_commit(d.path, &h, changeset, sizeof changeset, NULL, why,
                            sizeof why),
        RAFT_TIMEOUT);
    assert_string_equal(why, "not applied: the lease expired");
    lease_client_release(d.path, &h, &m);
    assert_int_equal(h.id, 0);
    assert_int_equal(h.fd, -1);
    fake_stop(&f, &d);
    assert_string_equal(f.fns[0], EXT_ATTACH_LEASE_ACQUIRE);
    assert_string_equal(f.fns[1], EXT_ATTACH_LEASE_COMMIT);
    assert_string_equal(f.fns[2], EXT_ATTACH_LEASE_RELEASE);
    assert_int_equal(f.holder, 5);
    assert_int_equal(f.changeset_len, sizeof changeset);
    assert_int_equal(f.release_n, 2);
    assert_memory_equal(&f.marks, &m, sizeof m);
    tmpdb_remove(&d);
}

/* A node of attach protocol 2 takes a release with a second argument
 * for a malformed call: it is sent the lease id alone. */
static void test_remote_release_version_2(void **state)
{
    struct fake f = {.acquire_code = 0, .commit_code = 0, .version = 2};
    struct sql_wal_marks m;
    struct lease_hold h;
    struct tmpdb d;
    char why[600] = "";
    (void)state;

    memset(&m, 'M', sizeof m);
    acquire_from_fake(&f, &d, &h);
    assert_int_equal(
        lease_client_commit(d.path, &h, "x", 1, NULL, why, sizeof why), 0);
    lease_client_release(d.path, &h, &m);
    fake_stop(&f, &d);
    assert_string_equal(f.fns[2], EXT_ATTACH_LEASE_RELEASE);
    assert_int_equal(f.release_n, 1);
    tmpdb_remove(&d);
}

/* The one-try flag travels with the acquire to a node of attach
 * protocol 4; a node of protocol 3 takes a second argument for a
 * malformed call: it is sent the token alone. No flags, no argument. */
static void test_remote_acquire_flags(void **state)
{
    static const unsigned versions[] = {EXT_ATTACH_VERSION, 3,
                                        EXT_ATTACH_VERSION};
    static const unsigned flags[] = {EXT_LEASE_ONE_TRY, EXT_LEASE_ONE_TRY, 0};
    static const unsigned want_n[] = {2, 1, 1};
    static const int64_t want_flags[] = {EXT_LEASE_ONE_TRY, -1, -1};
    (void)state;

    for (unsigned i = 0; i < 3; i++) {
        struct fake f = {.acquire_code = 0,
                         .commit_code = 0,
                         .version = versions[i],
                         .flags = flags[i]};
        struct lease_hold h;
        struct tmpdb d;

        acquire_from_fake(&f, &d, &h);
        lease_client_release(d.path, &h, NULL);
        fake_stop(&f, &d);
        assert_int_equal(f.holder, 5);
        assert_int_equal(f.acquire_n, want_n[i]);
        assert_int_equal(f.acquire_flags, want_flags[i]);
        tmpdb_remove(&d);
    }
}

/* The node busy (another holder): RAFT_BUSY with its words, no lease. */
static void test_remote_busy(void **state)
{
    struct fake f = {.acquire_code = RAFT_BUSY};
    struct lease_hold h;
    struct tmpdb d;
    char why[600] = "";
    (void)state;

    tmpdb_init(&d);
    lease_hold_init(&h);
    fake_start(&f, &d);
    assert_int_equal(lease_client_acquire(d.path, 5, 0, &h, why, sizeof why),
                     RAFT_BUSY);
    assert_string_equal(why, "the lease is held by holder 9");
    assert_int_equal(h.fd, -1);
    fake_stop(&f, &d);
    tmpdb_remove(&d);
}

/* The node's process closes the connection during the commit: "outcome
 * unknown", saying so. */
static void test_remote_commit_connection_closed(void **state)
{
    struct fake f = {.acquire_code = 0, .commit_code = -1};
    struct lease_hold h;
    struct tmpdb d;
    char why[600] = "";
    (void)state;

    acquire_from_fake(&f, &d, &h);
    assert_int_equal(
        lease_client_commit(d.path, &h, "x", 1, NULL, why, sizeof why),
        RAFT_UNKNOWN);
    assert_non_null(strstr(why, "outcome unknown: the connection closed"));
    lease_client_release(d.path, &h, NULL);
    assert_int_equal(h.fd, -1);
    fake_stop(&f, &d);
    tmpdb_remove(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pointer_version),
        cmocka_unit_test(test_older_node_refused),
        cmocka_unit_test(test_remote_lease),
        cmocka_unit_test(test_remote_release_version_2),
        cmocka_unit_test(test_remote_acquire_flags),
        cmocka_unit_test(test_remote_busy),
        cmocka_unit_test(test_remote_commit_connection_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
