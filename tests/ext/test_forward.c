/* Tests of ext/runtime/forward.c, the leader's side of forwarding, on a
 * real driver (tests/uv/fake.h: an in-memory store and transport) running
 * a one-voter core that leads, or a core of two voters whose peer never
 * answers (no leader). Followers are played by the frames handed to
 * forward_on_request on the driver's loop thread; their answers are the
 * FORWARD_RESULT frames the driver sent. What is checked: what is held,
 * what is proposed in one batch (one append of the store), what is
 * refused at once, and what each follower is answered. */

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ext/runtime/forward.h"
#include "tests/ext/helpers.h"
#include "tests/uv/fake.h"

/* The node: a driver, its proposer and forwarding. */
struct node {
    struct fake fk;
    struct ext_propose p;
    struct ext_forward *fw;
    int admit_rc;      /* admit_format3's answer (set off the loop
                          between calls) */
    unsigned n_admits; /* admit_format3 calls (loop) */
    unsigned n_wakes;  /* wake callbacks (atomic) */
};

static void app_wake(void *data)
{
    struct node *n = data;
    __atomic_add_fetch(&n->n_wakes, 1, __ATOMIC_SEQ_CST);
}

static unsigned wakes(struct node *n)
{
    return __atomic_load_n(&n->n_wakes, __ATOMIC_SEQ_CST);
}

static int admit_format3(void *data)
{
    struct node *n = data;
    n->n_admits++;
    return n->admit_rc;
}

/* start starts node 1 with @n_voters voters (1: it leads; 2: the other
 * never answers, so nobody leads); a leader is started once its no-op
 * is persisted and committed, so that the store is idle. */
static void start(struct node *n, unsigned n_voters)
{
    static const raft_id voters[2] = {1, 2};
    struct raft_uv_node_callbacks app = {.data = n, .wake = app_wake};
    struct fake_opts o = {
        .peers = &voters[1], .n_peers = n_voters - 1, .app = &app};
    struct ext_forward_ops ops = {.data = n, .admit_format3 = admit_format3};

    memset(n, 0, sizeof *n);
    propose_init(&n->p, 7, 0);
    assert_int_equal(forward_new(1, 1024, &n->p, &ops, &n->fw), 0);
    fake_init(&n->fk, 1);
    fake_start(&n->fk, fake_core(1, voters, n_voters, 50), &o);
    if (n_voters == 1) {
        FAKE_WAIT(&n->fk, n->fk.obs.role == RAFT_LEADER && n->fk.obs.last > 0 &&
                              n->fk.obs.persisted == n->fk.obs.last &&
                              n->fk.obs.commit == n->fk.obs.last);
    }
}

/* stop stops the driver, then frees forwarding with what it still holds
 * (ASan checks the references). */
static void stop(struct node *n)
{
    fake_free(&n->fk);
    forward_free(n->fw);
}

/* One call of forwarding on the loop thread, and what the loop saw after
 * it. */
struct op {
    struct node *n;
    const struct raft_frame *m; /* NULL: forward_propose_held */
    unsigned n_held;            /* forward_n_held after the call */
    raft_index last;            /* the core's last index after it */
    raft_term term;             /* and its current term */
};

static void op_run(struct fake *f, void *arg)
{
    struct op *o = arg;
    const struct raft *core = raft_uv_node_core(f->d);
    if (o->m != NULL) {
        forward_on_request(o->n->fw, f->d, o->m);
    } else {
        forward_propose_held(o->n->fw, f->d);
    }
    o->n_held = forward_n_held(o->n->fw);
    o->last = raft_last_index(core);
    o->term = raft_current_term(core);
}

/* on_request hands @m to forward_on_request on the loop thread (@m NULL:
 * calls forward_propose_held) and returns what the loop saw after it. */
static struct op on_request(struct node *n, const struct raft_frame *m)
{
    struct op o = {.n = n, .m = m};
    fake_on_loop(&n->fk, op_run, &o);
    return o;
}

static struct op propose_held(struct node *n)
{
    return on_request(n, NULL);
}

/* n_results counts the FORWARD_RESULT frames the driver sent. */
static unsigned n_results(struct node *n)
{
    unsigned k;
    fake_lock(&n->fk);
    k = fake_n_sent(&n->fk, RAFT_FRAME_FORWARD_RESULT);
    fake_unlock(&n->fk);
    return k;
}

/* result returns the @i-th FORWARD_RESULT the driver sent (its bufs are
 * the fake's: none for this type). */
static struct raft_frame result(struct node *n, unsigned i)
{
    struct raft_frame r = {0};
    unsigned k = 0;
    fake_lock(&n->fk);
    for (unsigned j = 0; j < n->fk.n_sent; j++) {
        if (n->fk.sent[j].f.type == RAFT_FRAME_FORWARD_RESULT && k++ == i) {
            r = n->fk.sent[j].f;
            break;
        }
    }
    fake_unlock(&n->fk);
    assert_int_equal(r.type, RAFT_FRAME_FORWARD_RESULT);
    return r;
}

/* batch_of returns how many entries the store's append that starts at
 * @first wrote (0: none such). Call with the fake's mutex held. */
static unsigned batch_of(const struct fake *f, raft_index first)
{
    for (unsigned i = 0; i < f->n_calls; i++) {
        if (f->calls[i].op == FAKE_APPEND && f->calls[i].first == first) {
            return f->calls[i].n;
        }
    }
    return 0;
}

/* settle returns once a wake asked for before it has run (a wake sent
 * while the loop handles the first barrier runs before the second). */
static void settle(struct node *n)
{
    fake_barrier(&n->fk);
    fake_barrier(&n->fk);
}

/* v1_buf returns request (@origin, @seq) of @sql in format version 1
 * (written before the work budget; decoded, never stamped), in a new
 * raft_buf owned by the caller. */
static struct raft_buf *v1_buf(uint64_t origin, uint64_t seq, const char *sql)
{
    struct raft_buf *v2 = request_buf(origin, seq, sql);
    struct raft_buf *v1 = raft_buf_new(v2->len - 8);

    assert_non_null(v1);
    /* Version 1 is version 2 without the 8 bytes of max_steps (40..47). */
    memcpy(v1->data, v2->data, 40);
    memcpy(v1->data + 40, v2->data + 48, v2->len - 48);
    v1->data[2] = 1;
    assert_int_equal(sql_request_version(v1->data, v1->len), 1);
    raft_buf_unref(v2);
    return v1;
}

/* request builds a FORWARD frame from @from with request id (@from, @seq)
 * and payload @data (the caller keeps its reference). */
static struct raft_frame request(raft_id from, uint64_t seq,
                                 struct raft_buf *data)
{
    struct raft_frame m = {.type = RAFT_FRAME_FORWARD};
    m.from = from;
    m.to = 1;
    m.forward.request_id[0] = from;
    m.forward.request_id[1] = seq;
    m.forward.data = data;
    return m;
}

/* Requests are held until forward_propose_held, proposed as one batch, and
 * each sender is answered with its own index, once, however many copies
 * it sent. */
static void test_held_then_one_batch(void **state)
{
    struct node n;
    struct raft_buf *a = request_buf(2, 1, "SELECT 1");
    struct raft_buf *b = request_buf(3, 1, "SELECT 2");
    struct raft_frame ma = request(2, 1, a), mb = request(3, 1, b), r;
    struct op o;
    raft_index base;
    raft_term term;
    unsigned w0;
    (void)state;

    start(&n, 1);
    w0 = wakes(&n);
    o = on_request(&n, &ma);
    base = o.last;
    term = o.term;
    assert_int_equal(o.n_held, 1);
    /* The first held request wakes the loop. */
    EXT_WAIT(wakes(&n) == w0 + 1, "%u wakes", wakes(&n) - w0);
    assert_int_equal(on_request(&n, &mb).n_held, 2);
    /* A copy of a held request (the follower sent it again before this
     * wake) is dropped: the held one is answered. */
    o = on_request(&n, &ma);
    assert_int_equal(o.n_held, 2);
    settle(&n);
    assert_int_equal(wakes(&n), w0 + 1); /* only the first one woke */
    assert_int_equal(n_results(&n), 0);
    assert_int_equal(o.last, base); /* nothing proposed */

    o = propose_held(&n);
    assert_int_equal(o.n_held, 0);
    assert_int_equal(o.last, base + 2);
    assert_int_equal(n_results(&n), 2);
    r = result(&n, 0);
    assert_int_equal(r.to, 2);
    assert_int_equal(r.from, 1);
    assert_int_equal(r.forward_result.request_id[0], 2);
    assert_int_equal(r.forward_result.status, 0);
    assert_int_equal(r.forward_result.index, base + 1);
    assert_int_equal(r.forward_result.term, term);
    r = result(&n, 1);
    assert_int_equal(r.to, 3);
    assert_int_equal(r.forward_result.request_id[0], 3);
    assert_int_equal(r.forward_result.index, base + 2);
    /* One batch: one append of both entries. */
    FAKE_WAIT(&n.fk, batch_of(&n.fk, base + 1) != 0);
    FAKE_CHECK(&n.fk, batch_of(&n.fk, base + 1) == 2);

    /* Nothing held: nothing proposed. */
    assert_int_equal(propose_held(&n).last, base + 2);

    /* A copy after the proposal (the answer crossed it, or was lost) gets
     * the first answer at once, and is not proposed again. */
    o = on_request(&n, &ma);
    assert_int_equal(o.n_held, 0);
    assert_int_equal(n_results(&n), 3);
    r = result(&n, 2);
    assert_int_equal(r.to, 2);
    assert_int_equal(r.forward_result.request_id[1], 1);
    assert_int_equal(r.forward_result.status, 0);
    assert_int_equal(r.forward_result.index, base + 1);
    assert_int_equal(r.forward_result.term, term);
    assert_int_equal(propose_held(&n).last, base + 2);
    stop(&n);
    raft_buf_unref(a);
    raft_buf_unref(b);
}

/* A follower's request is refused at once, alone, when this node cannot
 * propose, when it is too big, or when it is malformed; good requests
 * held with a malformed one are still proposed. */
static void test_refused_alone(void **state)
{
    struct node n;
    struct raft_buf *good = request_buf(2, 1, "SELECT 1");
    struct raft_buf *garbage = raft_buf_copy("not a request", 13);
    struct raft_buf *big = raft_buf_new(1024 + 4096 + 1);
    struct raft_frame m, r;
    raft_index base;
    (void)state;

    /* No leader (the other voter never answers). */
    start(&n, 2);
    m = request(2, 1, good);
    assert_int_equal(on_request(&n, &m).n_held, 0);
    assert_int_equal(n_results(&n), 1);
    assert_int_equal(result(&n, 0).forward_result.status, RAFT_NOTLEADER);
    stop(&n);

    start(&n, 1);
    memset(big->data, 0, big->len);
    m = request(2, 2, big);
    base = on_request(&n, &m).last;
    assert_int_equal(result(&n, 0).forward_result.status, RAFT_TOOBIG);
    m = request(2, 3, garbage);
    on_request(&n, &m);
    r = result(&n, 1);
    assert_int_equal(r.forward_result.status, RAFT_CORRUPT);
    assert_int_equal(r.forward_result.request_id[1], 3);
    m = request(2, 4, NULL);
    assert_int_equal(on_request(&n, &m).n_held, 0);
    assert_int_equal(result(&n, 2).forward_result.status, RAFT_TOOBIG);

    m = request(2, 5, good);
    on_request(&n, &m);
    assert_int_equal(propose_held(&n).last, base + 1);
    r = result(&n, 3);
    assert_int_equal(r.forward_result.status, 0);
    assert_int_equal(r.forward_result.request_id[1], 5);
    assert_int_equal(r.forward_result.index, base + 1);
    assert_int_equal(n_results(&n), 4);

    /* Held requests are dropped by forward_free (ASan checks the
     * references). */
    m = request(2, 6, good);
    assert_int_equal(on_request(&n, &m).n_held, 1);
    stop(&n);
    raft_buf_unref(good);
    raft_buf_unref(garbage);
    raft_buf_unref(big);
}

/* A failed proposal, or a leadership lost (here: the log failed) while
 * requests were held, answers every held request with the error (the
 * followers retry). */
static void test_failed_proposal_answers_all(void **state)
{
    struct node n;
    struct raft_buf *a = request_buf(2, 1, "SELECT 1");
    struct raft_buf *old = v1_buf(2, 2, "SELECT 2");
    struct raft_frame m = request(2, 1, a), m2 = request(2, 2, old), r;
    raft_index base, ignored;
    struct op o;
    (void)state;

    start(&n, 1);
    /* A request of format 1 is well formed but cannot be stamped: the
     * batch it is held in fails as a whole. */
    base = on_request(&n, &m).last;
    assert_int_equal(on_request(&n, &m2).n_held, 2);
    o = propose_held(&n);
    assert_int_equal(o.n_held, 0);
    assert_int_equal(o.last, base); /* nothing appended */
    assert_int_equal(n_results(&n), 2);
    assert_int_equal(result(&n, 0).forward_result.status, RAFT_FORMAT);
    r = result(&n, 1);
    assert_int_equal(r.forward_result.status, RAFT_FORMAT);
    assert_int_equal(r.forward_result.index, 0);

    /* Not remembered as proposed: held again, then the log fails. */
    assert_int_equal(on_request(&n, &m).n_held, 1);
    fake_fail(&n.fk, FAKE_APPEND, RAFT_IOERR, UINT_MAX);
    assert_int_equal(fake_propose(&n.fk, "x", &ignored), 0);
    FAKE_WAIT(&n.fk, n.fk.obs.failed);
    o = propose_held(&n);
    assert_int_equal(o.last, base + 1); /* not proposed again */
    r = result(&n, 2);
    assert_int_equal(r.forward_result.status, RAFT_NOTLEADER);
    assert_int_equal(r.forward_result.request_id[1], 1);
    stop(&n);
    raft_buf_unref(a);
    raft_buf_unref(old);
}

/* format3_buf returns request (@origin, @seq) of format 3 (rows wanted),
 * unstamped, in a new raft_buf owned by the caller. */
static struct raft_buf *format3_buf(uint64_t origin, uint64_t seq)
{
    const uint64_t id[2] = {origin, seq};
    struct sql_request_opts opts = {.flags = SQL_REQUEST_WANT_ROWS};
    size_t len = 0;
    struct raft_buf *r;

    assert_int_equal(sql_request_size_opts("SELECT 1", 8, NULL, 0, &opts,
                                           1 << 20, &len, NULL, 0),
                     0);
    r = raft_buf_new(len);
    assert_non_null(r);
    assert_int_equal(sql_request_encode_opts(id, "SELECT 1", 8, NULL, 0, &opts,
                                             r->data, len),
                     0);
    return r;
}

/* A request of format 3 is refused at once, alone, with what
 * admit_format3 answers (a member cannot apply it, or may not); requests
 * of format 2 never ask it. */
static void test_format3_admitted(void **state)
{
    struct node n;
    struct raft_buf *plain = request_buf(2, 1, "SELECT 1");
    struct raft_buf *rows = format3_buf(2, 2);
    struct raft_frame m;
    raft_index base;
    (void)state;

    start(&n, 1);
    n.admit_rc = RAFT_FORMAT;
    assert_int_equal(sql_request_version(plain->data, plain->len), 2);
    assert_int_equal(sql_request_version(rows->data, rows->len), 3);
    assert_int_equal(sql_request_version("RQ", 2), 0);
    m = request(2, 1, plain);
    base = on_request(&n, &m).last;
    assert_int_equal(n.n_admits, 0);
    m = request(2, 2, rows);
    assert_int_equal(on_request(&n, &m).n_held, 1);
    assert_int_equal(n.n_admits, 1);
    assert_int_equal(n_results(&n), 1);
    assert_int_equal(result(&n, 0).forward_result.status, RAFT_FORMAT);
    assert_int_equal(result(&n, 0).forward_result.request_id[1], 2);
    n.admit_rc = RAFT_NOCONN;
    m = request(2, 3, rows);
    assert_int_equal(on_request(&n, &m).n_held, 1);
    assert_int_equal(result(&n, 1).forward_result.status, RAFT_NOCONN);
    n.admit_rc = 0;
    m = request(2, 4, rows);
    assert_int_equal(on_request(&n, &m).n_held, 2);
    assert_int_equal(propose_held(&n).last, base + 2);
    FAKE_WAIT(&n.fk, batch_of(&n.fk, base + 1) != 0);
    FAKE_CHECK(&n.fk, batch_of(&n.fk, base + 1) == 2);
    assert_int_equal(result(&n, 3).forward_result.status, 0);
    stop(&n);
    raft_buf_unref(plain);
    raft_buf_unref(rows);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_held_then_one_batch),
        cmocka_unit_test(test_refused_alone),
        cmocka_unit_test(test_failed_proposal_answers_all),
        cmocka_unit_test(test_format3_admitted),
    };
    return cmocka_run_group_tests_name("ext_forward", tests, NULL, NULL);
}
