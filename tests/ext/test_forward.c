/* Tests of ext/runtime/forward.c, the leader's side of forwarding, against a
 * fake node: what is held, what is proposed in one batch, what is refused at
 * once, and what each follower is answered. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ext/runtime/forward.h"
#include "tests/ext/helpers.h"

/* The fake node: records what forwarding asks of it. */
struct fake {
    bool leader;                /* can_propose's answer */
    int propose_rc;             /* propose's result */
    unsigned n_proposals;       /* propose calls */
    unsigned last_batch;        /* payloads in the last call */
    struct raft_frame sent[16]; /* FORWARD_RESULTs, in order */
    unsigned n_sent;
    unsigned n_wakes;  /* wake calls */
    int admit_rc;      /* admit_format3's answer */
    unsigned n_admits; /* admit_format3 calls */
};

static bool fake_can_propose(void *data)
{
    return ((struct fake *)data)->leader;
}

static int fake_propose(void *data, struct raft_buf *const *payloads,
                        unsigned n, raft_index *out_index, raft_term *out_term)
{
    struct fake *f = data;
    (void)payloads;
    f->n_proposals++;
    f->last_batch = n;
    if (f->propose_rc == 0) {
        *out_index = 100;
        *out_term = 7;
    }
    return f->propose_rc;
}

static int fake_send(void *data, const struct raft_frame *m)
{
    struct fake *f = data;
    assert_true(f->n_sent < 16);
    f->sent[f->n_sent++] = *m;
    return 0;
}

static void fake_wake(void *data)
{
    ((struct fake *)data)->n_wakes++;
}

static int fake_admit_format3(void *data)
{
    struct fake *f = data;
    f->n_admits++;
    return f->admit_rc;
}

static struct ext_forward *new_forward(struct fake *f)
{
    struct ext_forward_ops ops = {
        .data = f,
        .can_propose = fake_can_propose,
        .propose = fake_propose,
        .send = fake_send,
        .wake = fake_wake,
        .admit_format3 = fake_admit_format3,
    };
    struct ext_forward *fw = NULL;
    assert_int_equal(forward_new(1, 1024, &ops, &fw), 0);
    return fw;
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
    struct fake f = {.leader = true};
    struct ext_forward *fw = new_forward(&f);
    struct raft_buf *a = request_buf(2, 1, "SELECT 1");
    struct raft_buf *b = request_buf(3, 1, "SELECT 2");
    struct raft_frame ma = request(2, 1, a), mb = request(3, 1, b);
    (void)state;

    forward_on_request(fw, &ma);
    forward_on_request(fw, &mb);
    /* A copy of a held request (the follower sent it again before this
     * wake) is dropped: the held one is answered. */
    forward_on_request(fw, &ma);
    assert_int_equal(forward_n_held(fw), 2);
    assert_int_equal(f.n_wakes, 1); /* the first held request wakes */
    assert_int_equal(f.n_sent, 0);
    assert_int_equal(f.n_proposals, 0);

    forward_propose_held(fw);
    assert_int_equal(f.n_proposals, 1);
    assert_int_equal(f.last_batch, 2);
    assert_int_equal(forward_n_held(fw), 0);
    assert_int_equal(f.n_sent, 2);
    assert_int_equal(f.sent[0].type, RAFT_FRAME_FORWARD_RESULT);
    assert_int_equal(f.sent[0].to, 2);
    assert_int_equal(f.sent[0].forward_result.status, 0);
    assert_int_equal(f.sent[0].forward_result.index, 100);
    assert_int_equal(f.sent[0].forward_result.term, 7);
    assert_int_equal(f.sent[1].to, 3);
    assert_int_equal(f.sent[1].forward_result.request_id[0], 3);
    assert_int_equal(f.sent[1].forward_result.index, 101);

    /* Nothing held: nothing proposed. */
    forward_propose_held(fw);
    assert_int_equal(f.n_proposals, 1);

    /* A copy after the proposal (the answer crossed it, or was lost) gets
     * the first answer at once, and is not proposed again. */
    forward_on_request(fw, &ma);
    assert_int_equal(forward_n_held(fw), 0);
    assert_int_equal(f.n_sent, 3);
    assert_int_equal(f.sent[2].to, 2);
    assert_int_equal(f.sent[2].forward_result.request_id[1], 1);
    assert_int_equal(f.sent[2].forward_result.status, 0);
    assert_int_equal(f.sent[2].forward_result.index, 100);
    assert_int_equal(f.sent[2].forward_result.term, 7);
    forward_propose_held(fw);
    assert_int_equal(f.n_proposals, 1);
    forward_free(fw);
    raft_buf_unref(a);
    raft_buf_unref(b);
}

/* A follower's request is refused at once, alone, when this node cannot
 * propose, when it is too big, or when it is malformed; good requests
 * held with a malformed one are still proposed. */
static void test_refused_alone(void **state)
{
    struct fake f = {.leader = false};
    struct ext_forward *fw = new_forward(&f);
    struct raft_buf *good = request_buf(2, 1, "SELECT 1");
    struct raft_buf *garbage = raft_buf_copy("not a request", 13);
    struct raft_buf *big = raft_buf_new(1024 + 4096 + 1);
    struct raft_frame m;
    (void)state;

    m = request(2, 1, good);
    forward_on_request(fw, &m);
    assert_int_equal(f.n_sent, 1);
    assert_int_equal(f.sent[0].forward_result.status, RAFT_NOTLEADER);
    assert_int_equal(forward_n_held(fw), 0);

    f.leader = true;
    memset(big->data, 0, big->len);
    m = request(2, 2, big);
    forward_on_request(fw, &m);
    assert_int_equal(f.sent[1].forward_result.status, RAFT_TOOBIG);
    m = request(2, 3, garbage);
    forward_on_request(fw, &m);
    assert_int_equal(f.sent[2].forward_result.status, RAFT_CORRUPT);
    assert_int_equal(f.sent[2].forward_result.request_id[1], 3);
    m = request(2, 4, NULL);
    forward_on_request(fw, &m);
    assert_int_equal(f.sent[3].forward_result.status, RAFT_TOOBIG);
    assert_int_equal(forward_n_held(fw), 0);

    m = request(2, 5, good);
    forward_on_request(fw, &m);
    forward_propose_held(fw);
    assert_int_equal(f.n_proposals, 1);
    assert_int_equal(f.sent[4].forward_result.status, 0);
    assert_int_equal(f.sent[4].forward_result.request_id[1], 5);
    forward_free(fw);
    raft_buf_unref(good);
    raft_buf_unref(garbage);
    raft_buf_unref(big);
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
    struct fake f = {.leader = true, .admit_rc = RAFT_FORMAT};
    struct ext_forward *fw = new_forward(&f);
    struct raft_buf *plain = request_buf(2, 1, "SELECT 1");
    struct raft_buf *rows = format3_buf(2, 2);
    struct raft_frame m;
    (void)state;

    assert_int_equal(sql_request_version(plain->data, plain->len), 2);
    assert_int_equal(sql_request_version(rows->data, rows->len), 3);
    assert_int_equal(sql_request_version("RQ", 2), 0);
    m = request(2, 1, plain);
    forward_on_request(fw, &m);
    assert_int_equal(f.n_admits, 0);
    assert_int_equal(forward_n_held(fw), 1);
    m = request(2, 2, rows);
    forward_on_request(fw, &m);
    assert_int_equal(f.n_admits, 1);
    assert_int_equal(f.n_sent, 1);
    assert_int_equal(f.sent[0].forward_result.status, RAFT_FORMAT);
    assert_int_equal(f.sent[0].forward_result.request_id[1], 2);
    f.admit_rc = RAFT_NOCONN;
    m = request(2, 3, rows);
    forward_on_request(fw, &m);
    assert_int_equal(f.sent[1].forward_result.status, RAFT_NOCONN);
    assert_int_equal(forward_n_held(fw), 1);
    f.admit_rc = 0;
    m = request(2, 4, rows);
    forward_on_request(fw, &m);
    assert_int_equal(forward_n_held(fw), 2);
    forward_propose_held(fw);
    assert_int_equal(f.last_batch, 2);
    assert_int_equal(f.sent[3].forward_result.status, 0);
    forward_free(fw);
    raft_buf_unref(plain);
    raft_buf_unref(rows);
}

/* A failed proposal, or a leadership lost while requests were held,
 * answers every held request with the error (the followers retry). */
static void test_failed_proposal_answers_all(void **state)
{
    struct fake f = {.leader = true, .propose_rc = RAFT_IOERR};
    struct ext_forward *fw = new_forward(&f);
    struct raft_buf *a = request_buf(2, 1, "SELECT 1");
    struct raft_buf *b = request_buf(2, 2, "SELECT 2");
    struct raft_frame m = request(2, 1, a), m2 = request(2, 2, b);
    (void)state;

    forward_on_request(fw, &m);
    forward_on_request(fw, &m2);
    forward_propose_held(fw);
    assert_int_equal(f.n_sent, 2);
    assert_int_equal(f.sent[0].forward_result.status, RAFT_IOERR);
    assert_int_equal(f.sent[1].forward_result.status, RAFT_IOERR);
    assert_int_equal(f.sent[1].forward_result.index, 0);

    forward_on_request(fw, &m);
    f.leader = false;
    forward_propose_held(fw);
    assert_int_equal(f.n_proposals, 1); /* not proposed again */
    assert_int_equal(f.sent[2].forward_result.status, RAFT_NOTLEADER);

    /* Held requests are dropped by forward_free (ASan checks the
     * references). */
    f.leader = true;
    forward_on_request(fw, &m);
    forward_free(fw);
    raft_buf_unref(a);
    raft_buf_unref(b);
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
