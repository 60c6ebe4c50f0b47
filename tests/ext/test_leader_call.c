/* Tests of ext/runtime/leader_call.c, one call to the leader and its
 * caller's wait: every way a wait ends (answered, expired before and
 * after the call left the node, interrupted, shut down), with a second
 * thread playing the owner's loop, and the loop's resend rule. The
 * threads wait on conditions, never on a fixed time: only the waits
 * that must expire have short deadlines. */

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ext/runtime/leader_call.h"

/* A deadline no test reaches. */
#define LONG_MS 60000

/* What the loop thread does to the call once it is linked. */
enum action {
    ACT_FINISH = 1,  /* send it, then answer it */
    ACT_SEND,        /* send it and say so; never answer */
    ACT_SHUTDOWN,    /* shut the owner down */
    ACT_EXPIRE,      /* end it as its deadline would */
    ACT_TAKE_FINISH, /* send, take, then answer */
    ACT_SET_READY,   /* set the flag a poll waits for */
};

/* The owner: its mutex, its table, the linked call, and what its loop
 * saw. */
struct owner {
    pthread_mutex_t mu;
    struct ext_leader_call_table t; /* its calls (mu) */
    pthread_cond_t moved;           /* the test's own: a field below changed */
    struct ext_leader_call *call;   /* linked while its caller waits (mu) */
    int action;                     /* enum action */
    bool acted;                     /* the loop did its action (mu) */
    bool ready;                     /* ACT_SET_READY's flag (mu) */
    unsigned n_probes;              /* probe calls */
    unsigned interrupt_at;          /* the probe says "interrupted" from
                                     this call on (0: never) */
    bool probe_unlocked;            /* every probe ran without mu held */
};

static void owner_init(struct owner *o, int action)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->moved, NULL);
    o->action = action;
    o->probe_unlocked = true;
}

static void owner_close(struct owner *o)
{
    pthread_cond_destroy(&o->moved);
    pthread_mutex_destroy(&o->mu);
}

/* The loop's policy in these tests. */
static const struct ext_leader_call_policy policy = {.retry_ms = 500,
                                                     .follow_leader = true};

/* server is the server @n on a wire not known: no gate applies. */
#define server(n) ((struct ext_leader_call_server){.id = (n)})

/* open_call opens @call in @o's table: request id @id (may be NULL),
 * expiring in @timeout_ms, asking its probe every @poll_ms. */
static void open_call(struct owner *o, struct ext_leader_call *call,
                      const uint64_t id[2], unsigned timeout_ms,
                      unsigned poll_ms)
{
    pthread_mutex_lock(&o->mu);
    assert_int_equal(
        leader_call_open(&o->t, call, call, id, timeout_ms, poll_ms), 0);
    pthread_mutex_unlock(&o->mu);
}

static void close_call(struct owner *o, struct ext_leader_call *call)
{
    pthread_mutex_lock(&o->mu);
    leader_call_close(&o->t, call);
    pthread_mutex_unlock(&o->mu);
}

/* send takes @o's due call to server @to at loop clock @now, as the loop
 * does; returns it. Caller holds o->mu. */
static struct ext_leader_call *send(struct owner *o, raft_id to, uint64_t now)
{
    return leader_call_take_due(&o->t, NULL, &policy, &server(to), now, NULL,
                                NULL, NULL);
}

/* link_call tells the loop that @call is linked (the caller's
 * submission). */
static void link_call(struct owner *o, struct ext_leader_call *call)
{
    pthread_mutex_lock(&o->mu);
    o->call = call;
    pthread_cond_broadcast(&o->moved);
    pthread_mutex_unlock(&o->mu);
}

/* loop_main plays the owner's loop: it waits for a linked call and does
 * o->action to it, under the owner's mutex. */
static void *loop_main(void *arg)
{
    struct owner *o = arg;

    pthread_mutex_lock(&o->mu);
    while (o->call == NULL && o->action != ACT_SET_READY) {
        pthread_cond_wait(&o->moved, &o->mu);
    }
    switch (o->action) {
        case ACT_FINISH:
            assert_ptr_equal(send(o, 2, 1000), o->call);
            leader_call_finish(o->call);
            break;
        case ACT_SEND:
            assert_ptr_equal(send(o, 2, 1000), o->call);
            break;
        case ACT_SHUTDOWN:
            leader_call_shutdown(o->call);
            break;
        case ACT_EXPIRE:
            leader_call_expire(o->call);
            break;
        case ACT_TAKE_FINISH:
            assert_ptr_equal(send(o, 1, 1000), o->call);
            leader_call_taken(o->call);
            leader_call_finish(o->call);
            break;
        case ACT_SET_READY:
            o->ready = true;
            break;
        default:
            break;
    }
    o->acted = true;
    pthread_cond_broadcast(&o->moved);
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

/* wait_acted waits until the loop did its action. */
static void wait_acted(struct owner *o)
{
    pthread_mutex_lock(&o->mu);
    while (!o->acted) {
        pthread_cond_wait(&o->moved, &o->mu);
    }
    pthread_mutex_unlock(&o->mu);
}

static bool probe_fn(void *data)
{
    struct owner *o = data;
    /* The caller's probe runs SQL on its connection: never under the
     * owner's mutex (a default mutex: trylock fails while it is held,
     * by this thread or another). */
    if (pthread_mutex_trylock(&o->mu) == 0) {
        pthread_mutex_unlock(&o->mu);
    } else {
        o->probe_unlocked = false;
    }
    o->n_probes++;
    return o->interrupt_at != 0 && o->n_probes >= o->interrupt_at;
}

/* run_call makes a call expiring in @timeout_ms, starts the loop with
 * @o's action, links the call and waits with @probe; returns how the
 * wait ended, the call's state in *@state and left_node in *@left. */
static int run_call(struct owner *o, unsigned timeout_ms,
                    const struct ext_exec_probe *probe, int *state, bool *left)
{
    struct ext_leader_call call;
    pthread_t loop;
    int end;

    open_call(o, &call, NULL, timeout_ms, 5);
    assert_int_equal(call.state, EXT_CALL_QUEUED);
    assert_false(call.left_node);
    assert_int_equal(pthread_create(&loop, NULL, loop_main, o), 0);
    link_call(o, &call);
    pthread_mutex_lock(&o->mu);
    end = leader_call_wait(&call, &o->mu, probe);
    *state = call.state;
    *left = call.left_node;
    o->call = NULL;
    pthread_mutex_unlock(&o->mu);
    assert_int_equal(pthread_join(loop, NULL), 0);
    close_call(o, &call);
    return end;
}

/* A call answered before its deadline ends as answered, DONE, having
 * left the node. */
static void test_answered(void **state)
{
    struct owner o;
    struct ext_exec_probe probe = {.interrupted = probe_fn, .data = &o};
    int st;
    bool left;
    (void)state;

    owner_init(&o, ACT_FINISH);
    assert_int_equal(run_call(&o, LONG_MS, &probe, &st, &left),
                     EXT_CALL_ANSWERED);
    assert_int_equal(st, EXT_CALL_DONE);
    assert_true(left);
    assert_true(o.probe_unlocked);
    owner_close(&o);

    /* Without a probe, and through TAKEN (the leader is this node). */
    owner_init(&o, ACT_TAKE_FINISH);
    assert_int_equal(run_call(&o, LONG_MS, NULL, &st, &left),
                     EXT_CALL_ANSWERED);
    assert_int_equal(st, EXT_CALL_DONE);
    assert_true(left);
    assert_int_equal(o.n_probes, 0);
    owner_close(&o);
}

/* A call that never left the node expires as such: "not applied". */
static void test_expired_unsent(void **state)
{
    struct owner o;
    struct ext_leader_call call;
    struct ext_exec_probe probe = {.interrupted = probe_fn, .data = &o};
    (void)state;

    owner_init(&o, 0);
    open_call(&o, &call, NULL, 30, 5);
    pthread_mutex_lock(&o.mu);
    assert_int_equal(leader_call_wait(&call, &o.mu, &probe), EXT_CALL_EXPIRED);
    assert_int_equal(call.state, EXT_CALL_QUEUED);
    assert_false(call.left_node);
    pthread_mutex_unlock(&o.mu);
    assert_true(o.probe_unlocked);
    close_call(&o, &call);

    /* Without a probe: one wait to the deadline. */
    open_call(&o, &call, NULL, 30, 5);
    pthread_mutex_lock(&o.mu);
    assert_int_equal(leader_call_wait(&call, &o.mu, NULL), EXT_CALL_EXPIRED);
    pthread_mutex_unlock(&o.mu);
    close_call(&o, &call);
    owner_close(&o);
}

/* A call the loop sent and nobody answered expires as having left the
 * node: "outcome unknown". The caller waits for the send first, so the
 * deadline can only come after it. */
static void test_expired_sent(void **state)
{
    struct owner o;
    struct ext_leader_call call;
    struct ext_exec_probe probe = {.interrupted = probe_fn, .data = &o};
    pthread_t loop;
    (void)state;

    owner_init(&o, ACT_SEND);
    open_call(&o, &call, NULL, 50, 5);
    assert_int_equal(pthread_create(&loop, NULL, loop_main, &o), 0);
    link_call(&o, &call);
    wait_acted(&o);
    pthread_mutex_lock(&o.mu);
    assert_int_equal(leader_call_wait(&call, &o.mu, &probe), EXT_CALL_EXPIRED);
    assert_int_equal(call.state, EXT_CALL_SENT);
    assert_true(call.left_node);
    assert_int_equal(call.attempts, 1);
    assert_int_equal(call.sent_to, 2);
    o.call = NULL;
    pthread_mutex_unlock(&o.mu);
    assert_int_equal(pthread_join(loop, NULL), 0);
    close_call(&o, &call);
    owner_close(&o);
}

/* The owner can end a wait as its deadline would (a lost answer made
 * deterministic). */
static void test_expired_by_owner(void **state)
{
    struct owner o;
    int st;
    bool left;
    (void)state;

    owner_init(&o, ACT_EXPIRE);
    assert_int_equal(run_call(&o, LONG_MS, NULL, &st, &left), EXT_CALL_EXPIRED);
    assert_int_equal(st, EXT_CALL_QUEUED);
    assert_false(left);
    owner_close(&o);
}

/* The probe ends the wait within a slice, asked outside the owner's
 * mutex, whether or not the call left the node; the state tells which. */
static void test_interrupted(void **state)
{
    struct owner o;
    struct ext_leader_call call;
    struct ext_exec_probe probe = {.interrupted = probe_fn, .data = &o};
    (void)state;

    owner_init(&o, 0);
    o.interrupt_at = 3;
    open_call(&o, &call, NULL, LONG_MS, 1);
    pthread_mutex_lock(&o.mu);
    assert_int_equal(leader_call_wait(&call, &o.mu, &probe),
                     EXT_CALL_INTERRUPTED);
    assert_false(call.left_node);
    pthread_mutex_unlock(&o.mu);
    assert_int_equal(o.n_probes, 3);
    assert_true(o.probe_unlocked);
    close_call(&o, &call);
    owner_close(&o);

    owner_init(&o, 0);
    o.interrupt_at = 1;
    open_call(&o, &call, NULL, LONG_MS, 1);
    pthread_mutex_lock(&o.mu);
    assert_ptr_equal(send(&o, 2, 0), &call);
    assert_int_equal(leader_call_wait(&call, &o.mu, &probe),
                     EXT_CALL_INTERRUPTED);
    assert_int_equal(call.state, EXT_CALL_SENT);
    assert_true(call.left_node);
    pthread_mutex_unlock(&o.mu);
    assert_true(o.probe_unlocked);
    close_call(&o, &call);
    owner_close(&o);
}

/* The owner shutting down ends the wait, whatever the deadline. */
static void test_shutdown(void **state)
{
    struct owner o;
    struct ext_exec_probe probe = {.interrupted = probe_fn, .data = &o};
    int st;
    bool left;
    (void)state;

    owner_init(&o, ACT_SHUTDOWN);
    assert_int_equal(run_call(&o, LONG_MS, &probe, &st, &left),
                     EXT_CALL_SHUTDOWN);
    assert_int_equal(st, EXT_CALL_QUEUED);
    owner_close(&o);

    owner_init(&o, ACT_SHUTDOWN);
    assert_int_equal(run_call(&o, LONG_MS, NULL, &st, &left),
                     EXT_CALL_SHUTDOWN);
    owner_close(&o);
}

/* A deadline moves later, never earlier; a call that expired at once
 * waits on for its answer once extended. */
static void test_extend(void **state)
{
    struct owner o;
    struct ext_leader_call call;
    struct timespec was;
    pthread_t loop;
    (void)state;

    owner_init(&o, ACT_FINISH);
    open_call(&o, &call, NULL, 0, 5);
    was = call.deadline;
    leader_call_extend(&call, LONG_MS);
    assert_true(call.deadline.tv_sec > was.tv_sec);
    was = call.deadline;
    leader_call_extend(&call, 0);
    assert_true(call.deadline.tv_sec == was.tv_sec &&
                call.deadline.tv_nsec == was.tv_nsec);
    assert_int_equal(pthread_create(&loop, NULL, loop_main, &o), 0);
    link_call(&o, &call);
    pthread_mutex_lock(&o.mu);
    assert_int_equal(leader_call_wait(&call, &o.mu, NULL), EXT_CALL_ANSWERED);
    o.call = NULL;
    pthread_mutex_unlock(&o.mu);
    assert_int_equal(pthread_join(loop, NULL), 0);
    close_call(&o, &call);
    owner_close(&o);
}

/* due says whether the call of table @t is due to go to @to at @now
 * under @p, taking it (SENT to @to at @now) when it is. */
static bool due(struct ext_leader_call_table *t,
                const struct ext_leader_call_policy *p, raft_id to,
                uint64_t now)
{
    return leader_call_take_due(t, NULL, p, &server(to), now, NULL, NULL,
                                NULL) != NULL;
}

/* The resend rule: a QUEUED call is due; a SENT one when the leader
 * changed (if the policy follows it) or once overdue; never otherwise,
 * nor once TAKEN or DONE. Taking a due call marks it SENT: every probe
 * of a due one below is a send, taken back (leader_call_unsend) but for
 * the sends the test means. */
static void test_due(void **state)
{
    struct ext_leader_call_table t = {0};
    struct ext_leader_call call;
    struct ext_leader_call_policy follow = {.retry_ms = 500,
                                            .follow_leader = true};
    struct ext_leader_call_policy stay = {.retry_ms = 1000,
                                          .follow_leader = false};
    (void)state;

    assert_int_equal(leader_call_open(&t, &call, &call, NULL, LONG_MS, 0), 0);
    assert_true(due(&t, &follow, 2, 0));
    leader_call_unsend(&call);
    assert_true(due(&t, &stay, 2, 0));
    leader_call_unsend(&call);

    assert_true(due(&t, &follow, 2, 1000)); /* sent to 2 at 1000 */
    assert_int_equal(call.state, EXT_CALL_SENT);
    assert_int_equal(call.sent_to, 2);
    assert_int_equal(call.attempts, 3);
    /* Same leader, not overdue: not due. */
    assert_false(due(&t, &follow, 2, 1000));
    assert_false(due(&t, &follow, 2, 1499));
    assert_false(due(&t, &stay, 2, 1999));
    /* Another leader, but the policy stays: not due either. */
    assert_false(due(&t, &stay, 3, 1001));
    /* Overdue: due (and sent again at that time: the clock restarts). */
    assert_true(due(&t, &stay, 2, 2000));
    assert_false(due(&t, &stay, 2, 2999));
    assert_true(due(&t, &follow, 2, 2500));
    /* Another leader: due at once when the policy follows it. */
    assert_true(due(&t, &follow, 3, 2501));
    assert_int_equal(call.sent_to, 3);

    /* A frame still being written restarts the clock. */
    assert_false(due(&t, &follow, 3, 3000));
    leader_call_restart_clock(&call, 2900);
    assert_false(due(&t, &follow, 3, 3399));
    assert_true(due(&t, &follow, 3, 3400));

    /* Taken: never due, whoever leads and however long. */
    leader_call_taken(&call);
    assert_false(due(&t, &follow, 4, 100000));
    assert_false(due(&t, &stay, 4, 100000));

    /* Back to QUEUED (its entry replaced): due, still left the node. */
    leader_call_requeue(&call);
    assert_int_equal(call.state, EXT_CALL_QUEUED);
    assert_true(call.left_node);
    assert_true(due(&t, &follow, 4, 0));

    leader_call_finish(&call);
    assert_int_equal(call.state, EXT_CALL_DONE);
    assert_false(due(&t, &follow, 4, 100000));
    leader_call_close(&t, &call);
}

/* hold_odd holds back the calls whose item is an odd number, counting
 * what it is asked. */
static bool hold_odd(void *item, void *data)
{
    unsigned *asked = data;
    (*asked)++;
    return (*(const unsigned *)item & 1) != 0;
}

/* The walk takes every due call newest first, from after the one given,
 * skipping those the owner holds back (asked of QUEUED and SENT calls
 * only) and those not due. */
static void test_take_due(void **state)
{
    struct ext_leader_call_table t = {0};
    struct ext_leader_call calls[4];
    unsigned items[4] = {0, 1, 2, 4};
    unsigned asked = 0;
    unsigned *got;
    (void)state;

    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(
            leader_call_open(&t, &calls[i], &items[i], NULL, LONG_MS, 0), 0);
    }
    leader_call_taken(&calls[3]); /* never due */
    /* Newest first: 4 (taken: not asked), 2, 1 (held), 0. */
    got = leader_call_take_due(&t, NULL, &policy, &server(2), 0, hold_odd,
                               &asked, NULL);
    assert_ptr_equal(got, &items[2]);
    assert_int_equal(calls[2].state, EXT_CALL_SENT);
    got = leader_call_take_due(&t, &calls[2], &policy, &server(2), 0, hold_odd,
                               &asked, NULL);
    assert_ptr_equal(got, &items[0]);
    assert_null(leader_call_take_due(&t, &calls[0], &policy, &server(2), 0,
                                     hold_odd, &asked, NULL));
    assert_int_equal(asked, 3);
    assert_int_equal(calls[1].state, EXT_CALL_QUEUED);
    /* Without the hold, the one held back is due; the two sent, not
     * overdue, are not. */
    assert_ptr_equal(leader_call_take_due(&t, NULL, &policy, &server(2), 1,
                                          NULL, NULL, NULL),
                     &items[1]);
    assert_null(leader_call_take_due(&t, &calls[1], &policy, &server(2), 1,
                                     NULL, NULL, NULL));
    for (unsigned i = 0; i < 4; i++) {
        leader_call_close(&t, &calls[i]);
    }
}

/* The wire gate: a call that needs wire version 3 goes to a server on
 * wire 3 or later; to one on wire 2 it is refused, returned QUEUED and
 * not sent (left_node as it was); to one whose version is not known it
 * goes unless the policy waits for it, then it is held back QUEUED. A
 * call that needs no version goes to any. Without @out_refused a refused
 * call is held back. */
static void test_wire_gate(void **state)
{
    struct ext_leader_call_table t = {0};
    struct ext_leader_call needs, any;
    struct ext_leader_call_policy waits = {
        .retry_ms = 500, .follow_leader = true, .wait_for_wire = true};
    const struct ext_leader_call_server old = {.id = 2, .wire = 2};
    const struct ext_leader_call_server unknown = {.id = 2, .wire = 0};
    const struct ext_leader_call_server fresh = {.id = 3, .wire = 3};
    bool refused = true;
    (void)state;

    assert_int_equal(leader_call_open(&t, &any, &any, NULL, LONG_MS, 0), 0);
    assert_int_equal(leader_call_open(&t, &needs, &needs, NULL, LONG_MS, 0), 0);
    leader_call_need_wire(&needs, 3);

    /* An old server: the call that needs 3 is refused, the other sent. */
    assert_ptr_equal(
        leader_call_take_due(&t, NULL, &policy, &old, 0, NULL, NULL, &refused),
        &needs);
    assert_true(refused);
    assert_int_equal(needs.state, EXT_CALL_QUEUED);
    assert_false(needs.left_node);
    assert_int_equal(needs.attempts, 0);
    assert_ptr_equal(leader_call_take_due(&t, &needs, &policy, &old, 0, NULL,
                                          NULL, &refused),
                     &any);
    assert_false(refused);
    assert_int_equal(any.state, EXT_CALL_SENT);
    assert_null(
        leader_call_take_due(&t, &any, &policy, &old, 0, NULL, NULL, &refused));

    /* Without out_refused, refused is held back: nothing taken. */
    assert_null(
        leader_call_take_due(&t, NULL, &policy, &old, 0, NULL, NULL, NULL));
    assert_int_equal(needs.state, EXT_CALL_QUEUED);

    /* Not known: held back when the policy waits, else sent. */
    assert_null(leader_call_take_due(&t, NULL, &waits, &unknown, 0, NULL, NULL,
                                     &refused));
    assert_int_equal(needs.state, EXT_CALL_QUEUED);
    assert_ptr_equal(leader_call_take_due(&t, NULL, &policy, &unknown, 0, NULL,
                                          NULL, &refused),
                     &needs);
    assert_false(refused);
    assert_int_equal(needs.state, EXT_CALL_SENT);
    assert_int_equal(needs.sent_to, 2);

    /* Sent, then due again at a new leader on the old wire (policy
     * follows): refused, back to QUEUED, still left the node. */
    assert_ptr_equal(leader_call_take_due(
                         &t, NULL, &policy,
                         &(struct ext_leader_call_server){.id = 4, .wire = 2},
                         0, NULL, NULL, &refused),
                     &needs);
    assert_true(refused);
    assert_int_equal(needs.state, EXT_CALL_QUEUED);
    assert_true(needs.left_node);
    assert_int_equal(needs.attempts, 1);

    /* A server on the new wire: sent. */
    assert_ptr_equal(
        leader_call_take_due(&t, NULL, &waits, &fresh, 0, NULL, NULL, &refused),
        &needs);
    assert_false(refused);
    assert_int_equal(needs.state, EXT_CALL_SENT);
    assert_int_equal(needs.sent_to, 3);
    assert_int_equal(needs.attempts, 2);

    /* This node's own core (no frame): any call goes. */
    leader_call_unsend(&needs);
    assert_ptr_equal(
        leader_call_take_due(&t, NULL, &waits,
                             &(struct ext_leader_call_server){
                                 .id = 1, .wire = EXT_LEADER_CALL_WIRE_ANY},
                             0, NULL, NULL, &refused),
        &needs);
    assert_false(refused);

    leader_call_close(&t, &needs);
    leader_call_close(&t, &any);
}

/* A send that did not happen is taken back: QUEUED, and left_node as
 * before it; a resend after an earlier send keeps left_node. */
static void test_unsend(void **state)
{
    struct ext_leader_call_table t = {0};
    struct ext_leader_call call;
    (void)state;

    assert_int_equal(leader_call_open(&t, &call, &call, NULL, LONG_MS, 0), 0);
    assert_true(due(&t, &policy, 2, 0));
    leader_call_unsend(&call);
    assert_int_equal(call.state, EXT_CALL_QUEUED);
    assert_false(call.left_node);

    assert_true(due(&t, &policy, 2, 0));
    leader_call_requeue(&call);
    assert_true(due(&t, &policy, 3, 10));
    leader_call_unsend(&call);
    assert_int_equal(call.state, EXT_CALL_QUEUED);
    assert_true(call.left_node);
    leader_call_close(&t, &call);
}

/* poll_for runs leader_call_poll with a deadline @ms from now. */
static int poll_for(unsigned ms, unsigned poll_ms,
                    const struct ext_exec_probe *probe,
                    bool (*ready)(void *data), void *data)
{
    struct timespec deadline = leader_call_deadline(ms);
    return leader_call_poll(&deadline, poll_ms, probe, ready, data);
}

/* The table finds the item of each linked call by its request id,
 * walks them newest first and forgets a closed one. */
static void test_table(void **state)
{
    struct ext_leader_call_table t = {0};
    struct ext_leader_call calls[3];
    const uint64_t ids[3][2] = {{1, 10}, {1, 11}, {2, 10}};
    const uint64_t none[2] = {1, 12};
    int items[3];
    int *item;
    (void)state;

    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(
            leader_call_open(&t, &calls[i], &items[i], ids[i], LONG_MS, 0), 0);
    }
    assert_int_equal(leader_call_count(&t), 3);
    for (unsigned i = 0; i < 3; i++) {
        assert_ptr_equal(leader_call_find(&t, ids[i]), &items[i]);
        assert_int_equal(calls[i].id[0], ids[i][0]);
        assert_int_equal(calls[i].id[1], ids[i][1]);
    }
    assert_null(leader_call_find(&t, none));

    leader_call_close(&t, &calls[1]);
    assert_int_equal(leader_call_count(&t), 2);
    assert_null(leader_call_find(&t, ids[1]));
    item = leader_call_next(&t, NULL);
    assert_ptr_equal(item, &items[2]);
    item = leader_call_next(&t, &calls[2]);
    assert_ptr_equal(item, &items[0]);
    assert_null(leader_call_next(&t, &calls[0]));

    leader_call_close(&t, &calls[2]);
    leader_call_close(&t, &calls[0]);
    assert_int_equal(leader_call_count(&t), 0);
    assert_null(leader_call_next(&t, NULL));
}

static bool ready_fn(void *data)
{
    struct owner *o = data;
    bool r;
    pthread_mutex_lock(&o->mu);
    r = o->ready;
    pthread_mutex_unlock(&o->mu);
    return r;
}

/* A wait on a predicate: answered once it holds, else expired or
 * interrupted. */
static void test_poll(void **state)
{
    struct owner o;
    struct ext_exec_probe probe = {.interrupted = probe_fn, .data = &o};
    pthread_t loop;
    (void)state;

    owner_init(&o, ACT_SET_READY);
    assert_int_equal(pthread_create(&loop, NULL, loop_main, &o), 0);
    assert_int_equal(poll_for(LONG_MS, 1, &probe, ready_fn, &o),
                     EXT_CALL_ANSWERED);
    assert_int_equal(pthread_join(loop, NULL), 0);
    owner_close(&o);

    owner_init(&o, 0);
    assert_int_equal(poll_for(20, 1, &probe, ready_fn, &o), EXT_CALL_EXPIRED);
    assert_int_equal(poll_for(20, 1, NULL, ready_fn, &o), EXT_CALL_EXPIRED);
    o.interrupt_at = o.n_probes + 2;
    assert_int_equal(poll_for(LONG_MS, 1, &probe, ready_fn, &o),
                     EXT_CALL_INTERRUPTED);
    owner_close(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answered),
        cmocka_unit_test(test_expired_unsent),
        cmocka_unit_test(test_expired_sent),
        cmocka_unit_test(test_expired_by_owner),
        cmocka_unit_test(test_interrupted),
        cmocka_unit_test(test_shutdown),
        cmocka_unit_test(test_extend),
        cmocka_unit_test(test_due),
        cmocka_unit_test(test_take_due),
        cmocka_unit_test(test_wire_gate),
        cmocka_unit_test(test_unsend),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_poll),
    };
    return cmocka_run_group_tests_name("ext_leader_call", tests, NULL, NULL);
}
