/* Membership in the core (thesis ch. 4): the configuration in force is the
 * latest in the log and falls back when truncated; learners never vote,
 * campaign or count; RAFT_EVENT_CHANGE and its rules (Ongaro's fix: no
 * change before the term's first commit, one pending change at a time)
 * and errors; the removed leader's step-down; a removed follower is
 * replicated to until its removal commits, then never campaigns (nor
 * after a restart); one removed while it was down learns it when it
 * campaigns again, from the log or from a snapshot (clusters via
 * tests/lib/cluster.h); a server without a configuration never votes; a
 * learner forgets a silent leader; snapshots carry
 * the configuration; leadership transfer
 * (TimeoutNow, its timeout); catch-up rounds. Node 1 is under test. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "raft/configuration.h"
#include "tests/lib/cluster.h"
#include "tests/raft/step.h"

/* conf_of fills @c with voters 1..@n_voters and learners after them up
 * to @n. */
static void conf_of(struct raft_configuration *c, unsigned n_voters, unsigned n)
{
    raft_id id;

    raft_configuration_init(c);
    for (id = 1; id <= n; id++) {
        assert_int_equal(
            raft_configuration_add(
                c, id, id <= n_voters ? RAFT_VOTER : RAFT_LEARNER, "host"),
            0);
    }
}

/* config_entry returns entry @index of @term holding @c (own buf). */
static struct raft_entry config_entry(const struct raft_configuration *c,
                                      raft_index index, raft_term term)
{
    struct raft_entry e = {term, index, RAFT_ENTRY_CONFIG, NULL};

    assert_int_equal(raft_configuration_encode_buf(c, &e.data), 0);
    return e;
}

/* new_node_at creates node @id whose log is entry 1 of term 1 holding @c
 * (a bootstrap), hard state term 1, @applied entries applied; classic
 * protocol. */
static struct raft *new_node_at(raft_id id, const struct raft_configuration *c,
                                raft_index applied)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {1, 0};
    struct raft_entry e = config_entry(c, 1, 1);
    struct raft *r = NULL;

    config3(&cfg, id, 1 << 20, 4, 7);
    cfg.voters = NULL;
    cfg.n_voters = 0;
    assert_int_equal(raft_new(&cfg, &hs, 1, &e, 1, applied, &r), 0);
    raft_buf_unref(e.data);
    return r;
}

/* new_node is new_node_at with nothing applied. */
static struct raft *new_node(raft_id id, const struct raft_configuration *c)
{
    return new_node_at(id, c, 0);
}

/* new_empty creates node @id with no configuration (empty log, no hard
 * state, nothing applied: a joining server); classic protocol. */
static struct raft *new_empty(raft_id id)
{
    struct raft_config cfg;
    struct raft *r = NULL;

    config3(&cfg, id, 1 << 20, 4, 7);
    cfg.voters = NULL;
    cfg.n_voters = 0;
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), 0);
    return r;
}

/* step_change steps a CHANGE of @kind for @id (@role for ADD). */
static int step_change(struct raft *r, uint8_t kind, raft_id id, uint8_t role,
                       const char *address, struct raft_update *u)
{
    struct raft_event e;

    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_CHANGE;
    e.change.kind = kind;
    e.change.id = id;
    e.change.role = role;
    e.change.address = address;
    return raft_step(r, &e, u);
}

/* step_transfer steps a TRANSFER to @id. */
static int step_transfer(struct raft *r, raft_id id, struct raft_update *u)
{
    struct raft_event e;

    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_TRANSFER;
    e.transfer.id = id;
    return raft_step(r, &e, u);
}

/* ack has @from acknowledge everything through @last, and the leader
 * persist it first. */
static void ack(struct raft *r, raft_id from, raft_index last,
                struct raft_update *u)
{
    if (raft_persisted_index(r) < raft_last_index(r)) {
        assert_int_equal(
            step_persisted(r, raft_last_index(r), raft_current_term(r), u), 0);
    }
    assert_int_equal(step_result(r, from, true, 0, last, 0, u), 0);
}

/* leader3 makes node 1 the leader of {1, 2, 3} (bootstrapped) with its
 * NOOP (index 2) committed. */
static struct raft *leader3(struct raft_update *u)
{
    struct raft_configuration c;
    struct raft *r;

    conf_of(&c, 3, 3);
    r = new_node(1, &c);
    make_leader(r, u);
    assert_int_equal(raft_last_index(r), 2);
    ack(r, 2, 2, u);
    assert_int_equal(raft_commit_index(r), 2);
    return r;
}

/* has_message tells whether @u holds a message of @type to @to. */
static bool has_message(const struct raft_update *u, uint8_t type, raft_id to)
{
    unsigned i;

    for (i = 0; i < u->n_messages; i++) {
        if (u->messages[i].type == type && u->messages[i].to == to) {
            return true;
        }
    }
    return false;
}

/* The bootstrap entry is the configuration in force; @voters is not
 * needed. A server outside it is valid, and an empty configuration too. */
static void test_bootstrap_in_force(void **state)
{
    struct raft_configuration c;
    struct raft *r;

    (void)state;
    conf_of(&c, 3, 3);
    r = new_node(1, &c);
    assert_int_equal(raft_configuration_index(r), 1);
    assert_true(raft_configuration_equal(raft_current_configuration(r), &c));
    assert_int_equal(raft_self_role(r), RAFT_VOTER);
    raft_close(r);
    r = new_node(9, &c);
    assert_int_equal(raft_self_role(r), 0);
    raft_close(r);

    r = new_empty(4);
    assert_int_equal(raft_current_configuration(r)->n, 0);
    raft_close(r);
}

/* A configuration entry that does not decode is refused: by raft_new
 * (RAFT_CORRUPT) and in an AppendEntries (RAFT_INVALID). */
static void test_bad_config_entry(void **state)
{
    struct raft_config cfg;
    struct raft_configuration c;
    struct raft_entry e = {1, 1, RAFT_ENTRY_CONFIG, NULL};
    struct raft_update u;
    struct raft *r = NULL;

    (void)state;
    config3(&cfg, 1, 1 << 20, 4, 7);
    e.data = raft_buf_copy("\x07", 1);
    assert_int_equal(raft_new(&cfg, NULL, 1, &e, 1, 0, &r), RAFT_CORRUPT);
    conf_of(&c, 3, 3);
    r = new_node(1, &c);
    e.index = 2;
    assert_int_equal(step_append(r, 2, 1, 1, 1, 0, &e, 1, &u), RAFT_INVALID);
    raft_buf_unref(e.data);
    raft_close(r);
}

/* Ongaro's fix: before an entry of its term commits, a new leader refuses
 * changes (RAFT_BUSY); after, it appends one; a second one is refused
 * while the first is not committed; a promotion waits until a majority of
 * the voters it makes is known to hold a configuration. */
static void test_change_rules(void **state)
{
    struct raft_configuration c;
    struct raft_update u;
    struct raft *r;

    (void)state;
    conf_of(&c, 3, 3);
    r = new_node(1, &c);
    assert_int_equal(step_change(r, RAFT_CHANGE_ADD, 4, RAFT_LEARNER, "x", &u),
                     RAFT_NOTLEADER);
    make_leader(r, &u);
    assert_int_equal(step_change(r, RAFT_CHANGE_ADD, 4, RAFT_LEARNER, "x", &u),
                     RAFT_BUSY);
    ack(r, 2, 2, &u);
    assert_int_equal(step_change(r, RAFT_CHANGE_ADD, 4, RAFT_LEARNER, "x", &u),
                     0);
    assert_int_equal(u.proposed_index, 3);
    assert_true(u.configuration_changed);
    assert_int_equal(u.n_entries, 1);
    assert_int_equal(u.entries[0].type, RAFT_ENTRY_CONFIG);
    assert_int_equal(raft_configuration_index(r), 3);
    assert_int_equal(raft_configuration_role(raft_current_configuration(r), 4),
                     RAFT_LEARNER);
    /* The new server is sent the log at once. */
    assert_true(has_message(&u, RAFT_MSG_APPEND_ENTRIES, 4));
    assert_int_equal(step_change(r, RAFT_CHANGE_PROMOTE, 4, 0, NULL, &u),
                     RAFT_BUSY);
    ack(r, 2, 3, &u);
    assert_int_equal(raft_commit_index(r), 3);
    /* Only 1 and 2 of the four voters it would make are known to hold a
     * configuration (3 and 4 acknowledged nothing in this term): a
     * majority could not be elected, refused until 4 answers. */
    assert_int_equal(step_change(r, RAFT_CHANGE_PROMOTE, 4, 0, NULL, &u),
                     RAFT_BUSY);
    ack(r, 4, 3, &u);
    assert_int_equal(step_change(r, RAFT_CHANGE_PROMOTE, 4, 0, NULL, &u), 0);
    assert_int_equal(raft_configuration_role(raft_current_configuration(r), 4),
                     RAFT_VOTER);
    raft_close(r);
}

/* Every refusal of CHANGE has its code. */
static void test_change_errors(void **state)
{
    struct raft_update u;
    struct raft *r = leader3(&u);
    char longaddr[RAFT_ADDRESS_MAX + 2];

    (void)state;
    memset(longaddr, 'a', sizeof longaddr - 1);
    longaddr[sizeof longaddr - 1] = '\0';
    assert_int_equal(step_change(r, RAFT_CHANGE_ADD, 2, RAFT_VOTER, "", &u),
                     RAFT_INVALID);
    assert_int_equal(step_change(r, RAFT_CHANGE_ADD, 0, RAFT_VOTER, "", &u),
                     RAFT_INVALID);
    assert_int_equal(step_change(r, RAFT_CHANGE_ADD, 5, 9, "", &u),
                     RAFT_INVALID);
    assert_int_equal(
        step_change(r, RAFT_CHANGE_ADD, 5, RAFT_VOTER, longaddr, &u),
        RAFT_INVALID);
    assert_int_equal(step_change(r, 77, 2, 0, NULL, &u), RAFT_INVALID);
    assert_int_equal(step_change(r, RAFT_CHANGE_REMOVE, 9, 0, NULL, &u),
                     RAFT_NOTFOUND);
    assert_int_equal(step_change(r, RAFT_CHANGE_PROMOTE, 9, 0, NULL, &u),
                     RAFT_NOTFOUND);
    assert_int_equal(step_change(r, RAFT_CHANGE_DEMOTE, 9, 0, NULL, &u),
                     RAFT_NOTFOUND);
    assert_int_equal(step_change(r, RAFT_CHANGE_UPDATE_ADDRESS, 9, 0, "a", &u),
                     RAFT_NOTFOUND);
    assert_int_equal(step_change(r, RAFT_CHANGE_PROMOTE, 2, 0, NULL, &u),
                     RAFT_INVALID);
    assert_int_equal(
        step_change(r, RAFT_CHANGE_UPDATE_ADDRESS, 2, 0, longaddr, &u),
        RAFT_INVALID);
    assert_int_equal(raft_last_index(r), 2);
    /* Demote 2, then 3: 2 is a learner (cannot be demoted again), and 1
     * is the last voter (cannot be removed nor demoted). Demoting 2 while
     * 3 acknowledged nothing would leave {1, 3} with one voter known to
     * hold a configuration: refused until 3 answers. */
    assert_int_equal(step_change(r, RAFT_CHANGE_DEMOTE, 2, 0, NULL, &u),
                     RAFT_BUSY);
    ack(r, 3, 2, &u);
    assert_int_equal(step_change(r, RAFT_CHANGE_DEMOTE, 2, 0, NULL, &u), 0);
    ack(r, 3, 3, &u);
    assert_int_equal(step_change(r, RAFT_CHANGE_DEMOTE, 2, 0, NULL, &u),
                     RAFT_INVALID);
    assert_int_equal(step_change(r, RAFT_CHANGE_REMOVE, 3, 0, NULL, &u), 0);
    assert_int_equal(step_persisted(r, 4, raft_current_term(r), &u), 0);
    assert_int_equal(raft_commit_index(r), 4); /* 1 alone is a majority */
    assert_int_equal(step_change(r, RAFT_CHANGE_REMOVE, 1, 0, NULL, &u),
                     RAFT_INVALID);
    assert_int_equal(step_change(r, RAFT_CHANGE_DEMOTE, 1, 0, NULL, &u),
                     RAFT_INVALID);
    assert_int_equal(
        step_change(r, RAFT_CHANGE_UPDATE_ADDRESS, 2, 0, "new:1", &u), 0);
    assert_string_equal(raft_current_configuration(r)->servers[1].address,
                        "new:1");
    raft_close(r);
}

/* A learner's acknowledgement never counts toward a commit; a voter's
 * does. A learner is never asked for a vote. */
static void test_learner_not_counted(void **state)
{
    struct raft_configuration c;
    struct raft_update u;
    struct raft *r;
    uint64_t t;

    (void)state;
    conf_of(&c, 2, 3); /* voters 1 and 2, learner 3 */
    r = new_node(1, &c);
    for (t = 0; raft_role(r) != RAFT_CANDIDATE; t++) {
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_true(has_message(&u, RAFT_MSG_REQUEST_VOTE, 2));
    assert_false(has_message(&u, RAFT_MSG_REQUEST_VOTE, 3));
    /* A learner's vote does not count. */
    assert_int_equal(
        step_vote_result(r, 3, raft_current_term(r), true, false, &u), 0);
    assert_int_equal(raft_role(r), RAFT_CANDIDATE);
    assert_int_equal(
        step_vote_result(r, 2, raft_current_term(r), true, false, &u), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    ack(r, 3, 2, &u);
    assert_int_equal(raft_commit_index(r), 0);
    ack(r, 2, 2, &u);
    assert_int_equal(raft_commit_index(r), 2);
    raft_close(r);
}

/* A learner, a removed server and a joining one never campaign, once
 * their configuration is committed. */
static void test_non_voters_never_campaign(void **state)
{
    struct raft_configuration c;
    struct raft_update u;
    struct raft *r[3];
    uint64_t t;
    unsigned i;

    (void)state;
    conf_of(&c, 2, 3);
    r[0] = new_node_at(3, &c, 1); /* learner */
    r[1] = new_node_at(4, &c, 1); /* not a member */
    raft_configuration_init(&c);
    r[2] = new_node(5, &c); /* empty configuration */
    for (i = 0; i < 3; i++) {
        for (t = 0; t < 5000; t += 10) {
            assert_int_equal(step_tick(r[i], t, &u), 0);
            assert_int_equal(u.n_messages, 0);
        }
        assert_int_equal(raft_role(r[i]), RAFT_FOLLOWER);
        assert_int_equal(raft_current_term(r[i]), 1);
        raft_close(r[i]);
    }
}

/* A server demoted by an entry that is not committed yet still
 * campaigns (the voters of that configuration may need it to win, to
 * commit it), asks the voters only and does not count its own vote. */
static void test_demoted_uncommitted_campaigns(void **state)
{
    struct raft_configuration c;
    struct raft_configuration demoted;
    struct raft_entry e;
    struct raft_update u;
    struct raft *r;
    uint64_t t;

    (void)state;
    conf_of(&c, 2, 2);
    conf_of(&demoted, 2, 2);
    demoted.servers[0].role = RAFT_LEARNER; /* node 1 */
    r = new_node_at(1, &c, 1);
    e = config_entry(&demoted, 2, 1);
    assert_int_equal(step_append(r, 2, 1, 1, 1, 1, &e, 1, &u), 0);
    assert_int_equal(raft_self_role(r), RAFT_LEARNER);
    for (t = 0; raft_role(r) != RAFT_CANDIDATE && t < 5000; t++) {
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_int_equal(raft_role(r), RAFT_CANDIDATE);
    assert_int_equal(u.n_messages, 1);
    assert_int_equal(u.messages[0].to, 2);
    /* Its own vote does not count: node 2's makes it leader of {2}. */
    assert_int_equal(
        step_vote_result(r, 2, raft_current_term(r), true, false, &u), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    assert_int_equal(step_persisted(r, 3, raft_current_term(r), &u), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    /* Node 2 holds the NOOP: the demotion commits, node 1 steps down. */
    assert_int_equal(step_result(r, 2, true, 0, 3, 0, &u), 0);
    assert_int_equal(raft_commit_index(r), 3);
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    raft_buf_unref(e.data);
    raft_close(r);
}

/* A follower uses a configuration entry as soon as it is appended; when
 * a new leader's log truncates it, the previous one is in force again. */
static void test_truncated_config_falls_back(void **state)
{
    struct raft_configuration c3;
    struct raft_configuration c4;
    struct raft_entry e;
    struct raft_entry noop = {3, 2, RAFT_ENTRY_NOOP, NULL};
    struct raft_update u;
    struct raft *r;

    (void)state;
    conf_of(&c3, 3, 3);
    conf_of(&c4, 3, 4);
    r = new_node(1, &c3);
    e = config_entry(&c4, 2, 2);
    assert_int_equal(step_append(r, 2, 2, 1, 1, 0, &e, 1, &u), 0);
    assert_true(u.configuration_changed);
    assert_int_equal(raft_configuration_index(r), 2);
    assert_true(raft_configuration_equal(raft_current_configuration(r), &c4));
    /* Leader 3 of term 3 holds another entry 2. */
    assert_int_equal(step_append(r, 3, 3, 1, 1, 0, &noop, 1, &u), 0);
    assert_true(u.configuration_changed);
    assert_int_equal(raft_configuration_index(r), 1);
    assert_true(raft_configuration_equal(raft_current_configuration(r), &c3));
    raft_buf_unref(e.data);
    raft_close(r);
}

/* granted returns the grant of the single RequestVote answer of @u (a
 * pre-vote's when @pre_vote); fails if there is none. */
static bool granted(const struct raft_update *u, bool pre_vote)
{
    assert_int_equal(u->n_messages, 1);
    assert_int_equal(u->messages[0].type, RAFT_MSG_REQUEST_VOTE_RESULT);
    assert_int_equal(u->messages[0].request_vote_result.pre_vote, pre_vote);
    return u->messages[0].request_vote_result.vote_granted;
}

/* A server without a configuration (empty log, nothing applied, no
 * bootstrap: it joins, or it is a voter whose state was wiped) grants no
 * vote and no pre-vote, however up to date the candidate; once a leader
 * replicated a configuration to it, it votes, also when it is no voter of
 * it (thesis §4.2.3). */
static void test_no_configuration_no_vote(void **state)
{
    struct raft_configuration c;
    struct raft_entry e;
    struct raft_update u;
    struct raft *r = new_empty(1);

    (void)state;
    assert_int_equal(step_request_vote(r, 2, 2, 0, 0, true, &u), 0);
    assert_false(granted(&u, true));
    assert_int_equal(step_request_vote(r, 2, 2, 7, 1, false, &u), 0);
    assert_false(granted(&u, false));
    assert_int_equal(raft_current_term(r), 2); /* the term rule holds */
    assert_false(u.hard_state_changed && u.hard_state.vote != 0);

    /* Leader 3 of term 3 sends the configuration {1, 2, 3} (1 a learner)
     * and node 2 asks in term 4 with a log as long: granted. */
    conf_of(&c, 3, 3);
    c.servers[0].role = RAFT_LEARNER;
    e = config_entry(&c, 1, 3);
    assert_int_equal(step_append(r, 3, 3, 0, 0, 0, &e, 1, &u), 0);
    raft_buf_unref(e.data);
    assert_int_equal(raft_current_configuration(r)->n, 3);
    assert_int_equal(step_request_vote(r, 2, 4, 1, 3, true, &u), 0);
    assert_true(granted(&u, true));
    assert_int_equal(step_request_vote(r, 2, 4, 1, 3, false, &u), 0);
    assert_true(granted(&u, false));
    assert_int_equal(u.hard_state.vote, 2);
    raft_close(r);
}

/* A follower takes AppendEntries from a leader that is not in its
 * configuration (it is how a joining server learns it). */
static void test_unknown_leader_accepted(void **state)
{
    struct raft_configuration c;
    struct raft_entry e;
    struct raft_event ev;
    struct raft_update u;
    struct raft *r = NULL;

    (void)state;
    r = new_empty(4);
    conf_of(&c, 3, 4);
    e = config_entry(&c, 1, 1);
    init_receive(&ev, RAFT_MSG_APPEND_ENTRIES, 1);
    ev.receive.to = 4;
    ev.receive.append_entries.term = 2;
    ev.receive.append_entries.entries = &e;
    ev.receive.append_entries.n_entries = 1;
    assert_int_equal(raft_step(r, &ev, &u), 0);
    assert_true(u.configuration_changed);
    assert_int_equal(raft_self_role(r), RAFT_LEARNER);
    assert_int_equal(raft_leader_id(r), 1);
    raft_buf_unref(e.data);
    raft_close(r);
}

/* Thesis §4.2.2: a leader that removes itself keeps leading without
 * counting itself until the entry commits, then steps down and never
 * campaigns again. */
static void test_removed_leader_steps_down(void **state)
{
    struct raft_update u;
    struct raft *r = leader3(&u);
    uint64_t t;

    (void)state;
    ack(r, 3, 2, &u); /* {2, 3} hold a configuration (can_elect) */
    assert_int_equal(step_change(r, RAFT_CHANGE_REMOVE, 1, 0, NULL, &u), 0);
    assert_int_equal(raft_self_role(r), 0);
    ack(r, 2, 3, &u);
    /* Its own copy does not count: {2, 3} need both. */
    assert_int_equal(raft_commit_index(r), 2);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    ack(r, 3, 3, &u);
    assert_int_equal(raft_commit_index(r), 3);
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    /* It told the others the commit before stepping down, and handed
     * over to an up-to-date voter (the first of 2 and 3). */
    assert_true(has_message(&u, RAFT_MSG_APPEND_ENTRIES, 2));
    assert_true(has_message(&u, RAFT_MSG_TIMEOUT_NOW, 2));
    for (t = 1000; t < 6000; t += 10) {
        assert_int_equal(step_tick(r, t, &u), 0);
        assert_int_equal(u.n_messages, 0);
    }
    raft_close(r);
}

/* has_message_to tells whether @u holds any message to @to. */
static bool has_message_to(const struct raft_update *u, raft_id to)
{
    unsigned i;

    for (i = 0; i < u->n_messages; i++) {
        if (u->messages[i].to == to) {
            return true;
        }
    }
    return false;
}

/* Thesis §4.2.2: the leader keeps replicating to the follower it removes,
 * which counts for nothing, until the entry is committed and an election
 * timeout more: the follower receives the entry and learns that it
 * committed. Then the leader stops, and tells its driver
 * (configuration_changed, raft_leaving). */
static void test_removed_follower_replicated(void **state)
{
    struct raft_update u;
    struct raft *r = leader3(&u);
    const struct raft_append_entries *ae;
    bool heartbeats = false;
    uint64_t t;

    (void)state;
    ack(r, 3, 2, &u);
    assert_int_equal(step_change(r, RAFT_CHANGE_REMOVE, 3, 0, NULL, &u), 0);
    ae = append_to(&u, 3, 0);
    assert_non_null(ae);
    assert_int_equal(ae->n_entries, 1);
    assert_int_equal(ae->entries[0].type, RAFT_ENTRY_CONFIG);
    assert_int_equal(raft_leaving(r)->n, 1);
    assert_int_equal(raft_leaving(r)->servers[0].id, 3);
    /* Its copy counts for nothing: {1, 2} commit. */
    ack(r, 3, 3, &u);
    assert_int_equal(raft_commit_index(r), 2);
    ack(r, 2, 3, &u);
    assert_int_equal(raft_commit_index(r), 3);
    ae = append_to(&u, 3, 0);
    assert_non_null(ae);
    assert_int_equal(ae->prev_log_index, 3);
    assert_int_equal(ae->leader_commit, 3);
    for (t = 1000; raft_leaving(r)->n > 0; t += 10) {
        assert_true(t < 1200);
        assert_int_equal(step_tick(r, t, &u), 0);
        heartbeats = heartbeats || append_to(&u, 3, 0) != NULL;
    }
    assert_true(heartbeats);
    assert_true(t > 1100);
    assert_true(u.configuration_changed);
    heartbeats = false;
    for (; t < 2000; t += 10) {
        assert_int_equal(step_tick(r, t, &u), 0);
        assert_false(has_message_to(&u, 3));
        heartbeats = heartbeats || append_to(&u, 2, 0) != NULL;
    }
    assert_true(heartbeats);
    assert_int_equal(raft_progress(r, 3, NULL), RAFT_NOTFOUND);
    raft_close(r);
}

/* removal_log fills @e with a log of {1, 2, 3} whose entry 3 (of term 2,
 * after a NOOP) removes @id; release_log frees it. */
static void removal_log(raft_id id, struct raft_entry e[3])
{
    struct raft_configuration c, without;

    conf_of(&c, 3, 3);
    without = c;
    assert_int_equal(raft_configuration_remove(&without, id), 0);
    e[0] = config_entry(&c, 1, 1);
    e[1] = (struct raft_entry){2, 2, RAFT_ENTRY_NOOP, NULL};
    e[2] = config_entry(&without, 3, 2);
}

static void release_log(struct raft_entry e[3])
{
    raft_buf_unref(e[0].data);
    raft_buf_unref(e[2].data);
}

/* new_node_log creates node 1 from the log @e of removal_log, hard state
 * term 2, @applied entries applied; pre-vote and check-quorum on when
 * @pre_vote. */
static struct raft *new_node_log(const struct raft_entry e[3],
                                 raft_index applied, bool pre_vote)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {2, 0};
    struct raft *r = NULL;

    config3(&cfg, 1, 1 << 20, 4, 7);
    cfg.voters = NULL;
    cfg.n_voters = 0;
    cfg.disable_pre_vote = !pre_vote;
    cfg.disable_check_quorum = !pre_vote;
    assert_int_equal(raft_new(&cfg, &hs, 1, e, 3, applied, &r), 0);
    return r;
}

/* A new leader replicates to the server an uncommitted configuration of
 * its log removes (until it commits, and an election timeout more). */
static void test_new_leader_replicates_to_removed(void **state)
{
    struct raft_entry e[3];
    struct raft_update u;
    struct raft *r;

    (void)state;
    removal_log(3, e);
    r = new_node_log(e, 1, false);
    make_leader(r, &u);
    assert_int_equal(raft_leaving(r)->n, 1);
    assert_true(u.configuration_changed);
    assert_non_null(append_to(&u, 3, 0));
    release_log(e);
    raft_close(r);
}

/* The removed follower's side: once it holds the configuration without
 * it and knows it committed, it never campaigns, and forgets a leader
 * that sent nothing for an election timeout; restarted from that log, it
 * still never campaigns (pre-vote on or off). */
static void test_removed_follower_stops(void **state)
{
    struct raft_configuration c;
    struct raft_entry e[3];
    struct raft_update u;
    struct raft *r;
    uint64_t t;
    int pre_vote;

    (void)state;
    conf_of(&c, 3, 3);
    removal_log(1, e);
    r = new_node(1, &c);
    assert_int_equal(step_tick(r, 0, &u), 0);
    assert_int_equal(step_append_seq(r, 2, 2, 1, 1, 2, &e[1], 2, 1, &u), 0);
    assert_int_equal(step_persisted(r, 3, 2, &u), 0);
    assert_int_equal(raft_self_role(r), 0);
    assert_int_equal(raft_commit_index(r), 2);
    assert_int_equal(step_append_seq(r, 2, 2, 3, 2, 3, NULL, 0, 2, &u), 0);
    assert_int_equal(raft_commit_index(r), 3);
    assert_int_equal(raft_leader_id(r), 2);
    for (t = 10; t < 5000; t += 10) {
        assert_int_equal(step_tick(r, t, &u), 0);
        assert_int_equal(u.n_messages, 0);
        assert_int_equal(raft_role(r), RAFT_FOLLOWER);
        if (t >= 200) {
            /* No AppendEntries for 2 T: no leader known. */
            assert_int_equal(raft_leader_id(r), 0);
        }
    }
    assert_true(raft_leader_contact(r) == UINT64_MAX);
    raft_close(r);

    for (pre_vote = 0; pre_vote < 2; pre_vote++) {
        r = new_node_log(e, 3, pre_vote == 1);
        assert_int_equal(raft_self_role(r), 0);
        assert_int_equal(raft_configuration_index(r), 3);
        for (t = 0; t < 5000; t += 10) {
            assert_int_equal(step_tick(r, t, &u), 0);
            assert_int_equal(u.n_messages, 0);
            assert_false(u.hard_state_changed);
        }
        assert_int_equal(raft_current_term(r), 2);
        raft_close(r);
    }
    release_log(e);
}

/* What knows_removed watches: server @id's core. */
static bool knows_removed(struct cluster *c, void *arg)
{
    struct raft *r = cluster_raft(c, *(raft_id *)arg);

    return r != NULL && raft_self_role(r) == 0 &&
           raft_commit_index(r) >= raft_configuration_index(r);
}

/* leaving_empty tells whether the leader replicates to no removed
 * server any more. */
static bool leaving_empty(struct cluster *c, void *arg)
{
    raft_id leader = cluster_leader(c);

    (void)arg;
    return leader != 0 && raft_leaving(cluster_raft(c, leader))->n == 0;
}

/* removed_while_down removes a follower of three founders while it is
 * down, waits until the leader stops replicating to it (and, with
 * @compact, until the leader compacted the removal away), then restarts
 * it: it campaigns from its old log, and the leader, which hears its
 * pre-vote, replicates to it again (thesis §4.2.3: its pre-votes disrupt
 * nobody, the leader and its term stay) until it holds its removal
 * committed, within a few election timeouts; then it never campaigns
 * and the leader forgets it again, though entries keep coming. */
static void removed_while_down(uint64_t seed, bool compact)
{
    struct cluster_config cfg;
    struct cluster *c;
    raft_id leader, down;
    raft_term term;
    raft_index removal;
    uint64_t start;
    unsigned k;

    cluster_config_default(&cfg, 3, seed);
    cfg.n_founders = 3;
    if (compact) {
        cfg.compact_every = 8;
    }
    c = cluster_new(&cfg);
    assert_true(cluster_run_until(c, 2000, leaving_empty, NULL));
    leader = cluster_leader(c);
    down = leader == 3 ? 2 : 3;
    assert_int_equal(cluster_propose(c, leader, "first", 5), 0);
    cluster_run(c, 100);
    cluster_crash(c, down);
    assert_int_equal(
        cluster_change(c, leader, RAFT_CHANGE_REMOVE, down, 0, NULL), 0);
    removal = raft_last_index(cluster_raft(c, leader));
    for (k = 0; k < 40; k++) {
        assert_int_equal(cluster_propose(c, leader, "gap", 3), 0);
        cluster_run(c, 10);
    }
    assert_true(cluster_run_until(c, 2000, leaving_empty, NULL));
    assert_int_equal(cluster_leader(c), leader);
    assert_true(raft_commit_index(cluster_raft(c, leader)) >= removal);
    if (compact) {
        assert_true(cluster_durable_first(c, leader) > removal);
    }
    term = raft_current_term(cluster_raft(c, leader));
    cluster_restart(c, down);
    assert_int_equal(raft_self_role(cluster_raft(c, down)), RAFT_VOTER);
    start = cluster_now(c);
    if (!cluster_run_until(c, 5 * cfg.election_timeout, knows_removed, &down)) {
        struct raft *r = cluster_raft(c, down);
        cluster_fail(c,
                     "server %llu (compact %d) does not know it was removed "
                     "%llu ms after its restart: role %d, term %llu, self "
                     "role %u, configuration index %llu, commit %llu, last "
                     "%llu, leader %llu",
                     (unsigned long long)down, compact,
                     (unsigned long long)(cluster_now(c) - start), raft_role(r),
                     (unsigned long long)raft_current_term(r),
                     raft_self_role(r),
                     (unsigned long long)raft_configuration_index(r),
                     (unsigned long long)raft_commit_index(r),
                     (unsigned long long)raft_last_index(r),
                     (unsigned long long)raft_leader_id(r));
    }
    if (compact) {
        assert_true(cluster_stats(c).n_installs >= 1);
        assert_int_equal(raft_configuration_index(cluster_raft(c, down)), 0);
    }
    /* It disrupted nobody, and campaigns no more; the leader forgets it
     * again, within two election timeouts, though every entry written
     * meanwhile reaches it. */
    assert_int_equal(cluster_leader(c), leader);
    assert_int_equal(raft_current_term(cluster_raft(c, leader)), term);
    for (k = 0; !leaving_empty(c, NULL); k++) {
        if (k == 2 * cfg.election_timeout / 10) {
            cluster_fail(c,
                         "the leader still replicates to server %llu "
                         "%u ms after it knew it was removed",
                         (unsigned long long)down, k * 10);
        }
        assert_int_equal(cluster_propose(c, leader, "more", 4), 0);
        cluster_run(c, 10);
    }
    cluster_run(c, 20 * cfg.election_timeout);
    assert_int_equal(raft_role(cluster_raft(c, down)), RAFT_FOLLOWER);
    assert_int_equal(cluster_leader(c), leader);
    assert_int_equal(raft_current_term(cluster_raft(c, leader)), term);
    assert_int_equal(raft_current_term(cluster_raft(c, down)), term);
    assert_int_equal(raft_leaving(cluster_raft(c, leader))->n, 0);
    assert_true(knows_removed(c, &down));
    cluster_free(c);
}

/* A server removed while it was down learns it at its next start: from
 * the log that holds its removal, or from a snapshot taken after it
 * (whose configuration leaves it out), for several seeds. */
static void test_removed_while_down_learns_it(void **state)
{
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 20; seed++) {
        removed_while_down(seed, false);
        removed_while_down(seed, true);
    }
}

/* A learner forgets a leader that sent nothing for an election timeout
 * (as a voter does on campaigning), and follows it again once it
 * does. */
static void test_learner_forgets_silent_leader(void **state)
{
    struct raft_configuration c;
    struct raft_update u;
    struct raft *r;
    uint64_t t;

    (void)state;
    conf_of(&c, 2, 3);
    assert_int_equal(raft_configuration_remove(&c, 1), 0);
    assert_int_equal(raft_configuration_add(&c, 1, RAFT_LEARNER, "host"), 0);
    r = new_node_at(1, &c, 1);
    assert_int_equal(step_tick(r, 0, &u), 0);
    assert_int_equal(step_append_seq(r, 2, 1, 1, 1, 1, NULL, 0, 1, &u), 0);
    assert_int_equal(raft_leader_id(r), 2);
    /* The randomized timeout is in [T, 2T). */
    for (t = 10; t < 100; t += 10) {
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_int_equal(raft_leader_id(r), 2);
    for (; t <= 200; t += 10) {
        assert_int_equal(step_tick(r, t, &u), 0);
        assert_int_equal(u.n_messages, 0);
    }
    assert_int_equal(raft_leader_id(r), 0);
    assert_int_equal(step_append_seq(r, 2, 1, 1, 1, 1, NULL, 0, 2, &u), 0);
    assert_int_equal(raft_leader_id(r), 2);
    raft_close(r);
}

/* The auto_promote mark of a learner lives in the configuration entry
 * (thesis §4.2.1 catch-up, made to survive a leader change): a server
 * that received it from one leader has it once it leads itself, and its
 * PROMOTE clears it; ADD marks only learners. */
static void test_auto_promote_replicated(void **state)
{
    struct raft_configuration c, with4, d;
    struct raft_entry e[2];
    struct raft_event ev;
    struct raft_update u;
    struct raft *r;
    const struct raft_configuration *now;
    uint64_t t;

    (void)state;
    conf_of(&c, 3, 3);
    with4 = c;
    assert_int_equal(raft_configuration_add(&with4, 4, RAFT_LEARNER, "h"), 0);
    with4.servers[3].auto_promote = true;
    e[0] = (struct raft_entry){2, 2, RAFT_ENTRY_NOOP, NULL};
    e[1] = config_entry(&with4, 3, 2);
    r = new_node(1, &c);
    assert_int_equal(step_tick(r, 0, &u), 0);
    assert_int_equal(step_append_seq(r, 2, 2, 1, 1, 3, e, 2, 1, &u), 0);
    assert_int_equal(step_persisted(r, 3, 2, &u), 0);
    assert_int_equal(raft_commit_index(r), 3);
    /* Leader 2 goes silent: node 1 leads term 3. */
    for (t = 10; raft_role(r) != RAFT_CANDIDATE; t += 10) {
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_int_equal(step_vote_result(r, 2, 3, true, false, &u), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    now = raft_current_configuration(r);
    assert_int_equal(now->servers[3].id, 4);
    assert_true(now->servers[3].auto_promote);
    ack(r, 2, 4, &u);
    ack(r, 4, 4, &u);
    assert_int_equal(raft_commit_index(r), 4);
    assert_int_equal(step_change(r, RAFT_CHANGE_PROMOTE, 4, 0, NULL, &u), 0);
    now = raft_current_configuration(r);
    assert_int_equal(now->servers[3].role, RAFT_VOTER);
    assert_false(now->servers[3].auto_promote);
    assert_int_equal(u.n_entries, 1);
    assert_int_equal(
        raft_configuration_decode(u.entries[0].data->data,
                                  u.entries[0].data->len, &d, NULL, 0),
        0);
    assert_true(raft_configuration_equal(&d, now));
    raft_buf_unref(e[1].data);
    raft_close(r);

    r = leader3(&u);
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_EVENT_CHANGE;
    ev.change.kind = RAFT_CHANGE_ADD;
    ev.change.id = 4;
    ev.change.role = RAFT_VOTER;
    ev.change.auto_promote = true;
    assert_int_equal(raft_step(r, &ev, &u), RAFT_INVALID);
    ev.change.role = RAFT_LEARNER;
    assert_int_equal(raft_step(r, &ev, &u), 0);
    now = raft_current_configuration(r);
    assert_true(now->servers[3].auto_promote);
    raft_close(r);
}

/* Snapshots carry the configuration: an install resets the log to the
 * snapshot's, a compaction keeps the one in force, raft_restore takes the
 * snapshot's for the compacted prefix; an invalid one is refused by
 * both. */
static void test_snapshot_configuration(void **state)
{
    struct raft_configuration c3;
    struct raft_configuration c5;
    struct raft_configuration bad;
    struct raft_config cfg;
    struct raft_hard_state hs = {4, 0};
    struct raft_event e;
    struct raft_update u;
    struct raft *r;

    (void)state;
    conf_of(&c3, 3, 3);
    conf_of(&c5, 3, 5);
    r = new_node(1, &c3);
    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_SNAPSHOT_INSTALLED;
    e.snapshot.leader = 2;
    e.snapshot.term = 4;
    e.snapshot.index = 10;
    e.snapshot.last_term = 3;
    bad = c5;
    bad.servers[1].id = 1; /* a duplicate id */
    e.snapshot.configuration = &bad;
    assert_int_equal(raft_step(r, &e, &u), RAFT_INVALID);
    e.snapshot.configuration = &c5;
    assert_int_equal(raft_step(r, &e, &u), 0);
    assert_true(u.configuration_changed);
    assert_int_equal(raft_configuration_index(r), 0);
    assert_true(raft_configuration_equal(raft_current_configuration(r), &c5));
    raft_close(r);

    /* Compaction through the bootstrap entry keeps its configuration. */
    r = leader3(&u);
    assert_int_equal(step_change(r, RAFT_CHANGE_ADD, 4, RAFT_LEARNER, "", &u),
                     0);
    ack(r, 2, 3, &u);
    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_COMPACT;
    e.compact.index = 2;
    assert_int_equal(raft_step(r, &e, &u), 0);
    assert_int_equal(raft_configuration_index(r), 3);
    e.compact.index = 3;
    assert_int_equal(raft_step(r, &e, &u), 0);
    assert_int_equal(raft_configuration_index(r), 0);
    assert_int_equal(raft_current_configuration(r)->n, 4);
    raft_close(r);

    config3(&cfg, 1, 1 << 20, 4, 7);
    cfg.configuration = &bad;
    assert_int_equal(raft_restore(&cfg, &hs, 10, 3, NULL, 0, 10, &r),
                     RAFT_INVALID);
    cfg.configuration = &c5;
    assert_int_equal(raft_restore(&cfg, &hs, 10, 3, NULL, 0, 10, &r), 0);
    assert_true(raft_configuration_equal(raft_current_configuration(r), &c5));
    raft_close(r);
}

/* Leadership transfer: proposals and changes are refused meanwhile; the
 * up-to-date target gets TimeoutNow; after an election timeout without
 * a new leader the transfer is abandoned. Each refusal of TRANSFER. */
static void test_transfer(void **state)
{
    struct raft_update u;
    struct raft *r = leader3(&u);
    uint64_t t;

    (void)state;
    assert_int_equal(step_transfer(r, 1, &u), RAFT_INVALID);
    assert_int_equal(step_transfer(r, 9, &u), RAFT_NOTFOUND);
    /* Node 3 is behind: it is brought up to date first. */
    assert_int_equal(step_transfer(r, 3, &u), 0);
    assert_int_equal(raft_transferee(r), 3);
    assert_false(has_message(&u, RAFT_MSG_TIMEOUT_NOW, 3));
    assert_int_equal(step_transfer(r, 2, &u), RAFT_BUSY);
    assert_int_equal(step_propose(r, 1, 4, 'a', 0, &u), RAFT_BUSY);
    assert_int_equal(step_change(r, RAFT_CHANGE_ADD, 4, RAFT_LEARNER, "", &u),
                     RAFT_BUSY);
    ack(r, 3, 2, &u);
    assert_true(has_message(&u, RAFT_MSG_TIMEOUT_NOW, 3));
    assert_int_equal(u.messages[u.n_messages - 1].timeout_now.term,
                     raft_current_term(r));
    /* No election follows: abandoned after an election timeout. */
    for (t = 1000; raft_transferee(r) != 0 && t < 1200; t += 5) {
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_int_equal(raft_transferee(r), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    assert_int_equal(step_propose(r, 1, 4, 'a', 0, &u), 0);
    /* 0: the most caught-up voter (2 and 3 match 2: the first). */
    ack(r, 2, 3, &u);
    assert_int_equal(step_transfer(r, 0, &u), 0);
    assert_int_equal(raft_transferee(r), 2);
    assert_true(has_message(&u, RAFT_MSG_TIMEOUT_NOW, 2));
    /* A higher term ends it. */
    assert_int_equal(
        step_append(r, 2, raft_current_term(r) + 1, 0, 0, 0, NULL, 0, &u), 0);
    assert_int_equal(raft_transferee(r), 0);
    raft_close(r);
}

/* A transfer to any voter (TRANSFER to 0) picks one this leader reaches:
 * one that answered within the last election timeout before a more (or
 * as) caught-up one that did not, never one whose connection broke
 * (refused when no other is left); when the picked voter's connection
 * breaks, the transfer moves to the next one reached, or is abandoned at
 * once. A named transferee is waited for across a broken connection.
 * (Before, a leader stopped right after a follower picked the stopped
 * one on a tie, and the cluster waited an election timeout.) */
static void test_transfer_picks_a_reached_voter(void **state)
{
    struct raft_update u;
    struct raft *r = leader3(&u);
    uint64_t t;

    (void)state;
    ack(r, 3, 2, &u); /* 2 and 3 both match 2 */
    /* For two election timeouts only 3 answers. */
    for (t = 1000; t < 1200; t += 20) {
        assert_int_equal(step_tick(r, t, &u), 0);
        ack(r, 3, 2, &u);
    }
    assert_int_equal(step_transfer(r, 0, &u), 0);
    assert_int_equal(raft_transferee(r), 3);
    assert_true(has_message(&u, RAFT_MSG_TIMEOUT_NOW, 3));
    /* 3's connection breaks: the transfer moves on to 2. */
    assert_int_equal(step_unreachable(r, RAFT_EVENT_UNREACHABLE, 3, &u), 0);
    assert_int_equal(raft_transferee(r), 2);
    assert_true(has_message(&u, RAFT_MSG_TIMEOUT_NOW, 2));
    /* 2's too: abandoned at once, the leader serves again. */
    assert_int_equal(step_unreachable(r, RAFT_EVENT_UNREACHABLE, 2, &u), 0);
    assert_int_equal(raft_transferee(r), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    assert_int_equal(step_propose(r, 1, 4, 'a', 0, &u), 0);
    /* No voter reached: refused, but a named one is taken and waited for
     * until the election timeout. */
    assert_int_equal(step_transfer(r, 0, &u), RAFT_NOTFOUND);
    assert_int_equal(step_transfer(r, 2, &u), 0);
    assert_int_equal(step_unreachable(r, RAFT_EVENT_UNREACHABLE, 2, &u), 0);
    assert_int_equal(step_tick(r, 1250, &u), 0);
    assert_int_equal(raft_transferee(r), 2);
    for (t = 1250; raft_transferee(r) != 0 && t < 1400; t += 5) {
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_int_equal(raft_transferee(r), 0);
    /* A voter heard from again is reached again. */
    ack(r, 2, 3, &u);
    assert_int_equal(step_transfer(r, 0, &u), 0);
    assert_int_equal(raft_transferee(r), 2);
    assert_true(has_message(&u, RAFT_MSG_TIMEOUT_NOW, 2));
    raft_close(r);
}

/* leader3_answered is leader3 whose followers 2 and 3 both answer (match
 * 2) at each heartbeat (20 ms) from time 1000 to @until. */
static struct raft *leader3_answered(uint64_t until, struct raft_update *u)
{
    struct raft *r = leader3(u);
    uint64_t t;

    ack(r, 3, 2, u);
    for (t = 1000; t <= until; t += 20) {
        assert_int_equal(step_tick(r, t, u), 0);
        ack(r, 2, 2, u);
        ack(r, 3, 2, u);
    }
    return r;
}

/* A picked transferee (TRANSFER to 0) that falls silent for two heartbeat
 * intervals (a paused process: its connection stays up) gives way to a
 * voter that answers; a named one does not. (Before, a follower paused a
 * moment before the transfer could be picked on a tie and the transfer
 * waited an election timeout.) */
static void test_transfer_moves_off_a_silent_voter(void **state)
{
    struct raft_update u;
    struct raft *r = leader3_answered(1040, &u);
    uint64_t t;

    (void)state;
    assert_int_equal(step_propose(r, 1, 4, 'a', 0, &u), 0);
    ack(r, 3, 3, &u);
    /* Both answered lately: the more caught up goes first. */
    assert_int_equal(step_transfer(r, 0, &u), 0);
    assert_int_equal(raft_transferee(r), 3);
    raft_close(r);

    r = leader3_answered(1040, &u);
    assert_int_equal(step_transfer(r, 0, &u), 0);
    assert_int_equal(raft_transferee(r), 2); /* a tie: the lowest slot */
    /* 2 falls silent; 3 answers each heartbeat. */
    for (t = 1060; t < 1140; t += 20) {
        assert_int_equal(step_tick(r, t, &u), 0);
        if (raft_transferee(r) != 2) {
            break; /* the tick moved it: u holds its messages */
        }
        ack(r, 3, 2, &u);
    }
    assert_int_equal(raft_transferee(r), 3);
    assert_true(t <= 1100);
    assert_true(has_message(&u, RAFT_MSG_TIMEOUT_NOW, 3));
    raft_close(r);

    /* Named, it is waited for. */
    r = leader3_answered(1000, &u);
    assert_int_equal(step_transfer(r, 2, &u), 0);
    for (t = 1020; t < 1080; t += 20) {
        assert_int_equal(step_tick(r, t, &u), 0);
        ack(r, 3, 2, &u);
    }
    assert_int_equal(raft_transferee(r), 2);
    raft_close(r);
}

/* TimeoutNow starts an election at once, without pre-vote, whose
 * RequestVote overrides the voters' leader stickiness; a learner and a
 * server that declines ignore it. */
static void test_timeout_now(void **state)
{
    struct raft_configuration c;
    struct raft_config cfg;
    struct raft_event e;
    struct raft_update u;
    struct raft *r;
    unsigned i;

    (void)state;
    conf_of(&c, 3, 4);
    r = new_node(1, &c);
    assert_int_equal(step_tick(r, 0, &u), 0);
    assert_int_equal(step_append(r, 2, 1, 1, 1, 1, NULL, 0, &u), 0);
    init_receive(&e, RAFT_MSG_TIMEOUT_NOW, 2);
    e.receive.timeout_now.term = 1;
    assert_int_equal(raft_step(r, &e, &u), 0);
    assert_int_equal(raft_role(r), RAFT_CANDIDATE);
    assert_int_equal(raft_current_term(r), 2);
    for (i = 0; i < u.n_messages; i++) {
        assert_int_equal(u.messages[i].type, RAFT_MSG_REQUEST_VOTE);
        assert_true(u.messages[i].request_vote.disrupt);
        assert_false(u.messages[i].request_vote.pre_vote);
        assert_true(u.messages[i].to == 2 || u.messages[i].to == 3);
    }
    assert_int_equal(u.n_messages, 2);
    raft_close(r);

    /* A server that declines (DECLINE) ignores it; taken again once the
     * decline is off. */
    r = new_node(1, &c);
    assert_int_equal(step_tick(r, 0, &u), 0);
    assert_int_equal(step_append(r, 2, 1, 1, 1, 1, NULL, 0, &u), 0);
    for (i = 0; i < 2; i++) {
        bool on = i == 0;
        memset(&e, 0, sizeof e);
        e.type = RAFT_EVENT_DECLINE;
        e.decline.on = on;
        assert_int_equal(raft_step(r, &e, &u), 0);
        assert_true(raft_declining(r) == on);
        init_receive(&e, RAFT_MSG_TIMEOUT_NOW, 2);
        e.receive.timeout_now.term = 1;
        assert_int_equal(raft_step(r, &e, &u), 0);
        assert_int_equal(raft_role(r), on ? RAFT_FOLLOWER : RAFT_CANDIDATE);
        assert_int_equal(raft_current_term(r), on ? 1 : 2);
    }
    raft_close(r);

    /* A voter in its leader's lease grants a disrupting RequestVote. */
    config3(&cfg, 1, 1 << 20, 4, 7);
    cfg.disable_check_quorum = false;
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), 0);
    assert_int_equal(step_tick(r, 0, &u), 0);
    assert_int_equal(step_append(r, 2, 1, 0, 0, 0, NULL, 0, &u), 0);
    assert_int_equal(step_request_vote(r, 3, 2, 0, 0, false, &u), 0);
    assert_int_equal(u.n_messages, 0); /* sticky */
    init_receive(&e, RAFT_MSG_REQUEST_VOTE, 3);
    e.receive.request_vote.term = 2;
    e.receive.request_vote.disrupt = true;
    assert_int_equal(raft_step(r, &e, &u), 0);
    assert_int_equal(u.n_messages, 1);
    assert_true(u.messages[0].request_vote_result.vote_granted);
    raft_close(r);

    /* A learner ignores TimeoutNow. */
    r = new_node(4, &c);
    init_receive(&e, RAFT_MSG_TIMEOUT_NOW, 2);
    e.receive.to = 4;
    e.receive.timeout_now.term = 1;
    assert_int_equal(raft_step(r, &e, &u), 0);
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    assert_int_equal(raft_current_term(r), 1);
    raft_close(r);
}

/* raft_progress covers learners: role, last contact, catch-up rounds. */
static void test_progress_rounds(void **state)
{
    struct raft_update u;
    struct raft *r = leader3(&u);
    struct raft_progress_info pi;
    uint64_t now;

    (void)state;
    assert_int_equal(step_change(r, RAFT_CHANGE_ADD, 4, RAFT_LEARNER, "", &u),
                     0);
    assert_int_equal(raft_progress(r, 4, &pi), 0);
    assert_int_equal(pi.role, RAFT_LEARNER);
    assert_false(pi.caught_up);
    assert_true(pi.last_contact == UINT64_MAX);
    now = 300;
    assert_int_equal(step_tick(r, now, &u), 0);
    ack(r, 4, 3, &u);
    assert_int_equal(raft_progress(r, 4, &pi), 0);
    assert_int_equal(pi.match_index, 3);
    assert_int_equal(pi.last_contact, 0);
    /* The first round lasted since the learner was added (at time
     * 'now' of the change): long, but ended; the next ends at once. */
    assert_int_equal(step_propose(r, 1, 4, 'a', 0, &u), 0);
    ack(r, 4, 4, &u);
    assert_int_equal(raft_progress(r, 4, &pi), 0);
    assert_true(pi.caught_up);
    assert_int_equal(step_tick(r, now + 50, &u), 0);
    assert_int_equal(raft_progress(r, 4, &pi), 0);
    assert_int_equal(pi.last_contact, 50);
    assert_int_equal(raft_progress(r, 9, &pi), RAFT_NOTFOUND);
    raft_close(r);
}

/* The only voter elects itself in one step, before its new term is
 * durable: it sends nothing of the term (to its learner) until an entry
 * of the term is persisted, with the hard state (driver rule 2). */
static void test_single_voter_waits_for_its_term(void **state)
{
    struct raft_configuration c;
    struct raft_update u;
    struct raft *r;
    uint64_t t;

    (void)state;
    conf_of(&c, 1, 2);
    r = new_node_at(1, &c, 1);
    for (t = 0; raft_role(r) != RAFT_LEADER; t++) {
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_true(u.hard_state_changed);
    assert_int_equal(u.n_messages, 0);
    for (t += 1; t < 1000; t += 5) {
        assert_int_equal(step_tick(r, t, &u), 0);
        assert_int_equal(u.n_messages, 0);
    }
    assert_int_equal(step_persisted(r, 2, raft_current_term(r), &u), 0);
    assert_non_null(append_to(&u, 2, 0));
    assert_int_equal(raft_commit_index(r), 2);
    raft_close(r);
}

/* A server removed and added again in one term gets AppendEntries whose
 * seqs continue after those it got before (its answers to the earlier
 * ones stay stale, raft/progress.h). */
static void test_readded_seqs_continue(void **state)
{
    struct raft_update u;
    struct raft *r = leader3(&u);
    const struct raft_append_entries *ae;
    uint64_t before;

    (void)state;
    ack(r, 3, 2, &u);
    assert_int_equal(step_propose(r, 1, 4, 'a', 0, &u), 0);
    ae = append_to(&u, 3, 0);
    assert_non_null(ae);
    before = ae->seq;
    assert_int_equal(step_change(r, RAFT_CHANGE_REMOVE, 3, 0, NULL, &u), 0);
    ack(r, 2, 4, &u);
    assert_int_equal(raft_commit_index(r), 4);
    assert_int_equal(step_change(r, RAFT_CHANGE_ADD, 3, RAFT_VOTER, "", &u), 0);
    ae = append_to(&u, 3, 0);
    assert_non_null(ae);
    assert_true(ae->seq > before);
    raft_close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bootstrap_in_force),
        cmocka_unit_test(test_bad_config_entry),
        cmocka_unit_test(test_change_rules),
        cmocka_unit_test(test_change_errors),
        cmocka_unit_test(test_learner_not_counted),
        cmocka_unit_test(test_non_voters_never_campaign),
        cmocka_unit_test(test_demoted_uncommitted_campaigns),
        cmocka_unit_test(test_truncated_config_falls_back),
        cmocka_unit_test(test_unknown_leader_accepted),
        cmocka_unit_test(test_no_configuration_no_vote),
        cmocka_unit_test(test_removed_leader_steps_down),
        cmocka_unit_test(test_removed_follower_replicated),
        cmocka_unit_test(test_new_leader_replicates_to_removed),
        cmocka_unit_test(test_removed_follower_stops),
        cmocka_unit_test(test_removed_while_down_learns_it),
        cmocka_unit_test(test_learner_forgets_silent_leader),
        cmocka_unit_test(test_auto_promote_replicated),
        cmocka_unit_test(test_snapshot_configuration),
        cmocka_unit_test(test_transfer),
        cmocka_unit_test(test_transfer_picks_a_reached_voter),
        cmocka_unit_test(test_transfer_moves_off_a_silent_voter),
        cmocka_unit_test(test_timeout_now),
        cmocka_unit_test(test_progress_rounds),
        cmocka_unit_test(test_single_voter_waits_for_its_term),
        cmocka_unit_test(test_readded_seqs_continue),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
