/* Tests of ext/runtime/barrier.c, raft_barrier's ReadIndex, through
 * barrier.h on real drivers (tests/uv/fake.h: in-memory store and
 * transport; two linked drivers for a follower's read) with a real apply
 * thread on a temporary database: a confirmed read index applied before
 * the call returns, a follower's READ_INDEX answered by its leader, and
 * each refusal (shutdown, every slot busy, no leader, an interrupted
 * caller, a diverged replica that would never reach the index). */

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ext/runtime/barrier.h"
#include "tests/ext/helpers.h"
#include "tests/uv/fake.h"

/* Barriers that may wait at once on one node (barrier.c). */
#define SLOTS 256

/* One server: a driver, its apply thread and its barriers. */
struct node {
    struct fake fk;
    struct tmpdb db;
    struct ext_node_log log;
    struct ext_applier *a;
    struct ext_barrier *b;
};

static void app_loop(void *data)
{
    struct node *n = data;
    barrier_on_loop(n->b, n->fk.d);
}

static void app_read(void *data, const struct raft_read *reads, unsigned k)
{
    struct node *n = data;
    barrier_on_reads(n->b, n->fk.d, reads, k);
}

static void app_forward(void *data, const struct raft_frame *f)
{
    struct node *n = data;
    if (barrier_is_frame(f)) {
        barrier_on_frame(n->b, n->fk.d, f);
    }
}

static void app_apply(void *data, const struct raft_entry *entries, unsigned k)
{
    struct node *n = data;
    assert_int_equal(applier_push(n->a, entries, k), 0);
}

/* init prepares server @id, whose barriers wait @confirm_ms for a
 * confirmed read index. */
static void init(struct node *n, raft_id id, unsigned confirm_ms)
{
    memset(n, 0, sizeof *n);
    n->a = applier_start_quiet(&n->db, &n->log);
    assert_int_equal(barrier_new(id, confirm_ms, 5000, &n->b), 0);
    fake_init(&n->fk, id);
}

/* run starts its driver on a core of @n_voters voters 1, 2 (a server
 * alone among two voters never leads). */
static void run(struct node *n, unsigned n_voters)
{
    static const raft_id voters[2] = {1, 2};
    struct raft_uv_node_callbacks app = {
        .data = n,
        .wake = app_loop,
        .tick = app_loop,
        .read = app_read,
        .forward = app_forward,
        .apply = app_apply,
    };
    raft_id other = n->fk.id == 1 ? 2 : 1;
    struct fake_opts o = {
        .peers = &other, .n_peers = n_voters - 1, .app = &app};
    fake_start(&n->fk, fake_core(n->fk.id, voters, n_voters, 50), &o);
}

static void start(struct node *n, unsigned n_voters, unsigned confirm_ms)
{
    init(n, 1, confirm_ms);
    run(n, n_voters);
}

/* halt stops the driver; release frees what is left (once the drivers
 * linked to this one stopped too). */
static void halt(struct node *n)
{
    barrier_shutdown(n->b);
    fake_stop(&n->fk);
}

static void release(struct node *n)
{
    fake_free(&n->fk);
    barrier_free(n->b);
    applier_stop_quiet(n->a, &n->db, &n->log);
}

static void stop(struct node *n)
{
    halt(n);
    release(n);
}

static int wait_barrier(struct node *n, const struct ext_exec_probe *probe,
                        uint64_t *index, char *msg, size_t len)
{
    return barrier_wait(n->b, n->fk.d, n->a, probe, index, msg, len);
}

/* A probe that counts its calls (a barrier waits once it asked) and says
 * interrupted once told. */
struct probe {
    unsigned calls;
    bool interrupt;
};

static bool probe_fn(void *data)
{
    struct probe *p = data;
    __atomic_add_fetch(&p->calls, 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&p->interrupt, __ATOMIC_SEQ_CST);
}

static unsigned probe_calls(struct probe *p)
{
    return __atomic_load_n(&p->calls, __ATOMIC_SEQ_CST);
}

/* One barrier on a thread of its own. */
struct call {
    struct node *n;
    struct probe p;
    struct ext_exec_probe probe;
    int rc;
    uint64_t index;
    char msg[256];
    pthread_t th;
};

static void *call_main(void *arg)
{
    struct call *c = arg;
    c->rc = wait_barrier(c->n, &c->probe, &c->index, c->msg, sizeof c->msg);
    return NULL;
}

static void call_start(struct call *c, struct node *n)
{
    c->n = n;
    c->probe.interrupted = probe_fn;
    c->probe.data = &c->p;
    assert_int_equal(pthread_create(&c->th, NULL, call_main, c), 0);
}

/* The leader's barrier returns the commit index it confirmed (its NOOP's,
 * 1), applied here by then. */
static void test_leader(void **state)
{
    struct node n;
    uint64_t index = 0;
    char msg[256] = "";
    (void)state;

    start(&n, 1, 1000);
    FAKE_WAIT(&n.fk, n.fk.obs.role == RAFT_LEADER && n.fk.obs.commit >= 1);
    assert_int_equal(wait_barrier(&n, NULL, &index, msg, sizeof msg), 0);
    assert_int_equal(index, 1);
    assert_true(applier_applied(n.a) >= 1);
    stop(&n);
}

/* A follower asks its leader with READ_INDEX; the leader answers with the
 * index its round confirmed, which the follower applies before its
 * barrier returns. A server that does not lead answers NOTLEADER. */
static void test_follower_asks_leader(void **state)
{
    struct node x, y, *leader, *follower;
    struct raft_frame ask;
    uint64_t index = 0;
    char msg[256] = "";
    const struct fake_sent *s;
    (void)state;

    init(&x, 1, 2000);
    init(&y, 2, 2000);
    fake_link(&x.fk, &y.fk);
    run(&x, 2);
    run(&y, 2);
    FAKE_WAIT(&x.fk, x.fk.obs.leader != 0 && x.fk.obs.commit >= 1);
    fake_lock(&x.fk);
    leader = x.fk.obs.leader == 1 ? &x : &y;
    fake_unlock(&x.fk);
    follower = leader == &x ? &y : &x;
    FAKE_WAIT(&follower->fk, follower->fk.obs.leader == leader->fk.id);

    assert_int_equal(wait_barrier(follower, NULL, &index, msg, sizeof msg), 0);
    assert_true(index >= 1);
    assert_true(applier_applied(follower->a) >= index);
    FAKE_CHECK(&follower->fk,
               fake_n_sent(&follower->fk, RAFT_FRAME_READ_INDEX) == 1);
    FAKE_CHECK(
        &leader->fk,
        (s = fake_last_sent(&leader->fk, RAFT_FRAME_READ_INDEX_RESULT)) !=
                NULL &&
            s->f.to == follower->fk.id && s->f.read_index_result.status == 0 &&
            s->f.read_index_result.index == index);

    /* Asked although it follows: it says it does not lead. */
    memset(&ask, 0, sizeof ask);
    ask.type = RAFT_FRAME_READ_INDEX;
    ask.from = leader->fk.id;
    ask.to = follower->fk.id;
    ask.read_index.tag = 77;
    fake_inject(&follower->fk, &ask);
    FAKE_WAIT(&follower->fk,
              (s = fake_last_sent(&follower->fk,
                                  RAFT_FRAME_READ_INDEX_RESULT)) != NULL &&
                  s->f.read_index_result.tag == 77 &&
                  s->f.read_index_result.status == RAFT_NOTLEADER &&
                  s->f.to == leader->fk.id);
    halt(&x);
    halt(&y);
    release(&x);
    release(&y);
}

/* Without a leader a barrier fails once the election timeout passed;
 * an interrupted caller returns at once. */
static void test_no_leader_and_interrupted(void **state)
{
    struct node n;
    struct call c = {0};
    uint64_t index = 0;
    char msg[256] = "";
    (void)state;

    start(&n, 2, 200);
    assert_int_equal(wait_barrier(&n, NULL, &index, msg, sizeof msg),
                     RAFT_NOTLEADER);
    assert_string_equal(msg,
                        "raft_barrier: no leader (none reachable within "
                        "200 ms)");
    assert_int_equal(index, 0);
    stop(&n);

    start(&n, 2, 60000);
    call_start(&c, &n);
    EXT_WAIT(probe_calls(&c.p) > 0, "%u probe calls", probe_calls(&c.p));
    __atomic_store_n(&c.p.interrupt, true, __ATOMIC_SEQ_CST);
    assert_int_equal(pthread_join(c.th, NULL), 0);
    assert_int_equal(c.rc, RAFT_CANCELED);
    assert_string_equal(c.msg, "raft_barrier: interrupted");
    stop(&n);
}

/* Once every slot waits, one more barrier is busy at once; shutdown ends
 * every waiting barrier, and refuses later ones. */
static void test_busy_and_shutdown(void **state)
{
    struct node n;
    struct call *c = calloc(SLOTS, sizeof *c);
    uint64_t index = 0;
    char msg[256] = "";
    (void)state;

    assert_non_null(c);
    start(&n, 2, 60000);
    for (unsigned i = 0; i < SLOTS; i++) {
        call_start(&c[i], &n);
    }
    for (unsigned i = 0; i < SLOTS; i++) {
        EXT_WAIT(probe_calls(&c[i].p) > 0, "barrier %u never waited", i);
    }
    assert_int_equal(wait_barrier(&n, NULL, &index, msg, sizeof msg),
                     RAFT_BUSY);
    assert_string_equal(msg, "raft_barrier: busy: 256 barriers wait already");
    barrier_shutdown(n.b);
    for (unsigned i = 0; i < SLOTS; i++) {
        assert_int_equal(pthread_join(c[i].th, NULL), 0);
        assert_int_equal(c[i].rc, RAFT_SHUTDOWN);
        assert_string_equal(c[i].msg,
                            "raft_barrier: the node is shutting down");
    }
    assert_int_equal(wait_barrier(&n, NULL, &index, msg, sizeof msg),
                     RAFT_SHUTDOWN);
    assert_string_equal(msg, "raft_barrier: the node is shutting down");
    assert_int_equal(index, 0);
    free(c);
    stop(&n);
}

/* A replica diverged while its read index is not applied yet fails the
 * barrier at once: nothing applies until a repair. */
static void test_diverged_applier(void **state)
{
    struct node n;
    raft_index proposed = 0;
    uint64_t index = 0;
    char msg[256] = "", want[256];
    (void)state;

    start(&n, 1, 1000);
    FAKE_WAIT(&n.fk, n.fk.obs.role == RAFT_LEADER && n.fk.obs.commit >= 1);
    EXT_WAIT(applier_applied(n.a) >= 1, "applied %llu",
             (unsigned long long)applier_applied(n.a));
    applier_mark_diverged(n.a, "a commit this node did not make");
    assert_int_equal(fake_propose(&n.fk, "not applied", &proposed), 0);
    FAKE_WAIT(&n.fk, n.fk.obs.commit >= proposed);
    assert_int_equal(wait_barrier(&n, NULL, &index, msg, sizeof msg),
                     RAFT_DIVERGED);
    snprintf(want, sizeof want,
             "raft_barrier: diverged replica: this node applied 1 of read "
             "index %llu and applies nothing until repaired",
             (unsigned long long)proposed);
    assert_string_equal(msg, want);
    assert_int_equal(index, 0);
    stop(&n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leader),
        cmocka_unit_test(test_follower_asks_leader),
        cmocka_unit_test(test_no_leader_and_interrupted),
        cmocka_unit_test(test_busy_and_shutdown),
        cmocka_unit_test(test_diverged_applier),
    };
    return cmocka_run_group_tests_name("ext_barrier", tests, NULL, NULL);
}
