/* Tests of ext/runtime/status.c, raft_status()'s copy of the core and its
 * JSON, through status.h: the fields a fresh follower shows (null where
 * nothing is known), what the other parts of the node add (values versus
 * null), the configuration and this server's place in it (a member, a
 * removed server, a joining one), the lines of a change, and, on a real
 * driver (tests/uv/fake.h), a leader's figures, a full log's words and a
 * failed log write. */

#include <jansson.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "raft/configuration.h"
#include "ext/runtime/status.h"
#include "tests/ext/helpers.h"
#include "tests/uv/fake.h"

/* core returns a fresh core of server 1 with configuration @conf (NULL:
 * voters 1, 2, 3 without addresses). */
static struct raft *core(const struct raft_configuration *conf)
{
    static const raft_id voters[3] = {1, 2, 3};
    struct raft_config cfg;
    struct raft *r = NULL;
    fake_config(&cfg, 1, voters, 3, 1000);
    cfg.configuration = conf;
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), 0);
    return r;
}

/* extra_init fills @x as a node with nothing to report does. */
static void extra_init(struct ext_status_extra *x)
{
    memset(x, 0, sizeof *x);
    x->applying = true;
    x->apply_error = "";
    x->last_error = "";
    x->cluster_id = "";
    x->tls = "off";
    x->tls_cert_expires = "";
    snprintf(x->checksum.why, sizeof x->checksum.why, "checksum=off");
}

/* render returns the JSON of @s with @x, parsed (json_decref it). */
static json_t *render(struct ext_status *s, const struct ext_status_extra *x)
{
    char *text = status_json(s, x);
    json_error_t err;
    json_t *o;
    assert_non_null(text);
    o = json_loads(text, 0, &err);
    if (o == NULL) {
        fail_msg("not JSON (%s): %s", err.text, text);
    }
    free(text);
    return o;
}

/* get returns field @path of @o ("a.b": field b of object a), failing
 * when it is missing. */
static json_t *get(json_t *o, const char *path)
{
    char key[64];
    const char *dot = strchr(path, '.');
    json_t *v;
    snprintf(key, sizeof key, "%.*s",
             (int)(dot ? (size_t)(dot - path) : strlen(path)), path);
    v = json_object_get(o, key);
    if (v == NULL) {
        fail_msg("no field '%s'", path);
    }
    return dot ? get(v, dot + 1) : v;
}

static void is_null(json_t *o, const char *path)
{
    if (!json_is_null(get(o, path))) {
        char *t = json_dumps(get(o, path), JSON_ENCODE_ANY);
        fail_msg("%s is %s, not null", path, t);
    }
}

static void is_int(json_t *o, const char *path, json_int_t want)
{
    json_t *v = get(o, path);
    if (!json_is_integer(v) || json_integer_value(v) != want) {
        char *t = json_dumps(v, JSON_ENCODE_ANY);
        fail_msg("%s is %s, not %lld", path, t, (long long)want);
    }
}

static void is_str(json_t *o, const char *path, const char *want)
{
    json_t *v = get(o, path);
    if (!json_is_string(v) || strcmp(json_string_value(v), want) != 0) {
        char *t = json_dumps(v, JSON_ENCODE_ANY);
        fail_msg("%s is %s, not \"%s\"", path, t, want);
    }
}

static void is_bool(json_t *o, const char *path, bool want)
{
    json_t *v = get(o, path);
    if (!json_is_boolean(v) || json_is_true(v) != want) {
        fail_msg("%s is not %s", path, want ? "true" : "false");
    }
}

/* A fresh follower that knows no leader: its figures, null for what is
 * not known or not happening, its peers from the configuration (a dial=
 * override shown beside its address), and this server a voter. */
static void test_fresh_follower(void **state)
{
    struct ext_config cfg;
    struct ext_status *s;
    struct ext_status_extra x;
    struct raft *r = core(NULL);
    json_t *o, *peers;
    (void)state;

    memset(&cfg, 0, sizeof cfg);
    cfg.id = 1;
    cfg.n_dials = 1;
    cfg.dials[0].id = 3;
    snprintf(cfg.dials[0].address, sizeof cfg.dials[0].address, "10.0.0.3:9");
    assert_int_equal(status_new(&cfg, "sqlite-build-1", &s), 0);
    /* The first refresh is a change (from nothing), the next none. */
    assert_true(status_refresh(s, r, NULL, NULL));
    assert_false(status_refresh(s, r, NULL, NULL));
    extra_init(&x);
    o = render(s, &x);
    is_int(o, "id", 1);
    is_null(o, "cluster_id");
    is_str(o, "build_id", "sqlite-build-1");
    is_str(o, "tls", "off");
    is_null(o, "tls_cert_expires");
    is_str(o, "role", "follower");
    is_int(o, "term", 0);
    is_null(o, "leader");
    is_int(o, "commit", 0);
    is_int(o, "applied", 0);
    is_int(o, "lag", 0);
    is_bool(o, "catching_up", false);
    is_null(o, "leader_contact_ms");
    is_int(o, "lag_entries", 0);
    is_null(o, "lag_ms");
    is_bool(o, "stale", false);
    is_null(o, "stale_reason");
    is_bool(o, "applying", true);
    is_null(o, "apply_error");
    is_null(o, "diverged");
    is_int(o, "repairs", 0);
    is_null(o, "log_failed");
    is_bool(o, "log_full", false);
    is_null(o, "log_full_reason");
    is_null(o, "snapshot_transfer");
    is_null(o, "load");
    is_null(o, "last_error");
    is_null(o, "last_error_age_ms");
    is_bool(o, "checksum.on", false);
    is_str(o, "checksum.why", "checksum=off");
    is_null(o, "checksum.value");
    is_null(o, "checksum.mismatch");
    is_str(o, "member", "voter");
    is_null(o, "member_why");
    is_bool(o, "removed", false);
    is_int(o, "configuration.index", 0);
    is_bool(o, "configuration.forced", false);
    assert_int_equal(json_array_size(get(o, "configuration.members")), 3);
    assert_int_equal(json_array_size(get(o, "warnings")), 0);
    peers = get(o, "peers");
    assert_int_equal(json_array_size(peers), 2);
    is_int(json_array_get(peers, 0), "id", 2);
    is_str(json_array_get(peers, 0), "role", "voter");
    is_null(json_array_get(peers, 0), "dial");
    is_bool(json_array_get(peers, 0), "connected", false);
    is_null(json_array_get(peers, 0), "build_id");
    is_int(json_array_get(peers, 1), "id", 3);
    is_str(json_array_get(peers, 1), "dial", "10.0.0.3:9");
    /* A follower has no progress of its peers. */
    assert_null(json_object_get(json_array_get(peers, 0), "match"));
    assert_false(status_removed(s, r, &(raft_index){0}));
    assert_int_equal(status_role(s), RAFT_FOLLOWER);
    assert_int_equal(status_leader(s), 0);
    json_decref(o);
    status_free(s);
    raft_close(r);
}

/* What the other parts add shows as values where they report something:
 * the cluster id, TLS, the applier's failure, the divergence and where
 * its repair stands, the replica checksum and its mismatch, a load, the
 * staleness verdict, the last error. */
static void test_extra_values(void **state)
{
    struct ext_config cfg;
    struct ext_status *s;
    struct ext_status_extra x;
    struct raft *r = core(NULL);
    json_t *o;
    (void)state;

    memset(&cfg, 0, sizeof cfg);
    cfg.id = 1;
    assert_int_equal(status_new(&cfg, "b", &s), 0);
    status_refresh(s, r, NULL, NULL);
    extra_init(&x);
    x.queue = 3;
    x.waiters = 4;
    x.applied = 0;
    x.durable = 0;
    x.applying = false;
    x.apply_error = "disk I/O error";
    x.last_error = "append: I/O error";
    x.last_error_age_ms = 1500;
    x.cluster_id = "00112233445566778899aabbccddeeff";
    x.tls = "certificates";
    x.tls_cert_expires = "2030-01-01T00:00:00Z";
    x.checksum.on = true;
    x.checksum.why[0] = '\0';
    x.checksum.index = 12;
    x.checksum.value = 0xabcdef;
    x.checksum.mismatch = true;
    x.checksum.server = 2;
    x.checksum.first = 10;
    x.checksum.ours = 1;
    x.checksum.theirs = 2;
    x.checksum.last_same = 9;
    x.diverged = true;
    x.divergence.since_ms = 0;
    x.divergence.at_index = 11;
    snprintf(x.divergence.reason, sizeof x.divergence.reason, "foreign");
    snprintf(x.repair, sizeof x.repair, "asked server 2 for a snapshot");
    x.repairs = 2;
    x.has_load = true;
    snprintf(x.load.path, sizeof x.load.path, "dump.sql");
    x.load.state = EXT_LOAD_FAILED;
    x.load.chunks_done = 1;
    x.load.n_chunks = 2;
    snprintf(x.load.error, sizeof x.load.error, "line 3: syntax error");
    x.staleness.stale = true;
    x.staleness.leader_known = true;
    x.staleness.lag_ms = 700;
    x.staleness.lag_entries = 5;
    snprintf(x.staleness.reason, sizeof x.staleness.reason,
             "stale replica: 5 entries behind");
    o = render(s, &x);
    is_int(o, "queue", 3);
    is_int(o, "waiters", 4);
    is_bool(o, "applying", false);
    is_str(o, "apply_error", "disk I/O error");
    is_str(o, "last_error", "append: I/O error");
    is_int(o, "last_error_age_ms", 1500);
    is_str(o, "cluster_id", "00112233445566778899aabbccddeeff");
    is_str(o, "tls", "certificates");
    is_str(o, "tls_cert_expires", "2030-01-01T00:00:00Z");
    is_bool(o, "checksum.on", true);
    is_int(o, "checksum.index", 12);
    is_str(o, "checksum.value", "0000000000abcdef");
    is_int(o, "checksum.mismatch.server", 2);
    is_int(o, "checksum.mismatch.index", 10);
    is_str(o, "checksum.mismatch.ours", "0000000000000001");
    is_str(o, "checksum.mismatch.theirs", "0000000000000002");
    is_int(o, "checksum.mismatch.equal_at", 9);
    is_str(o, "diverged.since", "1970-01-01T00:00:00.000Z");
    is_str(o, "diverged.reason", "foreign");
    is_int(o, "diverged.at_index", 11);
    is_str(o, "diverged.repair", "asked server 2 for a snapshot");
    is_int(o, "repairs", 2);
    is_str(o, "load.path", "dump.sql");
    is_str(o, "load.state", "failed");
    is_int(o, "load.chunks_done", 1);
    is_int(o, "load.chunks", 2);
    is_str(o, "load.error", "line 3: syntax error");
    is_bool(o, "stale", true);
    is_str(o, "stale_reason", "stale replica: 5 entries behind");
    is_int(o, "lag_entries", 5);
    is_int(o, "lag_ms", 700);
    json_decref(o);

    x.load.state = EXT_LOAD_RUNNING;
    x.load.error[0] = '\0';
    o = render(s, &x);
    is_str(o, "load.state", "running");
    is_null(o, "load.error");
    json_decref(o);
    status_free(s);
    raft_close(r);
}

/* A server the configuration in force leaves out is removed (that
 * configuration being the compacted prefix's, it is committed), unless
 * it started joining; an advertised address other than its own in the
 * configuration is a warning naming both. */
static void test_membership(void **state)
{
    struct ext_config cfg;
    struct ext_status *s;
    struct ext_status_extra x;
    struct raft_configuration conf;
    struct raft *r;
    raft_index at = 99;
    json_t *o;
    char w[1024];
    (void)state;

    raft_configuration_init(&conf);
    assert_int_equal(
        raft_configuration_add(&conf, 2, RAFT_VOTER, "127.0.0.1:7002"), 0);
    assert_int_equal(
        raft_configuration_add(&conf, 3, RAFT_LEARNER, "127.0.0.1:7003"), 0);
    r = core(&conf);
    memset(&cfg, 0, sizeof cfg);
    cfg.id = 1;
    extra_init(&x);

    assert_int_equal(status_new(&cfg, "b", &s), 0);
    /* status_removed reads the core, before a refresh publishes it: the
     * node tells its callers first (node.c on_stepped). */
    assert_true(status_removed(s, r, &at));
    assert_int_equal(at, 0);
    o = render(s, &x);
    is_bool(o, "removed", false);
    json_decref(o);
    at = 99;
    status_refresh(s, r, NULL, NULL);
    assert_true(status_removed(s, r, &at));
    assert_int_equal(at, 0);
    o = render(s, &x);
    is_str(o, "member", "not a member");
    is_str(o, "member_why",
           "removed from the cluster at index 0: it no longer campaigns");
    is_bool(o, "removed", true);
    is_str(json_array_get(get(o, "peers"), 1), "role", "learner");
    is_str(json_array_get(get(o, "peers"), 1), "address", "127.0.0.1:7003");
    is_str(json_array_get(get(o, "configuration.members"), 1), "role",
           "learner");
    json_decref(o);
    status_free(s);

    assert_int_equal(status_new(&cfg, "b", &s), 0);
    status_set_boot(s, true, true, "127.0.0.1:7001");
    status_refresh(s, r, NULL, NULL);
    assert_false(status_removed(s, r, &at));
    o = render(s, &x);
    is_str(o, "member", "not a member");
    is_str(o, "member_why",
           "joining: not in the configuration yet (index "
           "0); it never campaigns until added");
    is_bool(o, "removed", false);
    is_bool(o, "configuration.forced", true);
    json_decref(o);
    status_free(s);

    /* Server 2 advertising another address than its own. */
    assert_false(
        status_describe_listen(2, "127.0.0.1:7002", &conf, w, sizeof w));
    assert_true(status_describe_listen(2, "10.0.0.2:7002", &conf, w, sizeof w));
    assert_non_null(strstr(w,
                           "the advertised address 10.0.0.2:7002 "
                           "(advertise=, else listen=) differs from this "
                           "server's address 127.0.0.1:7002"));
    assert_non_null(strstr(w, "raft_update(2, '10.0.0.2:7002')"));
    assert_false(
        status_describe_listen(9, "10.0.0.2:7002", &conf, w, sizeof w));
    raft_close(r);
}

/* The log lines of a change of role, term or leader. */
static void test_describe(void **state)
{
    struct ext_status_change c = {0};
    char buf[160];
    (void)state;

    c.role = RAFT_LEADER;
    c.term = 3;
    status_describe_change(&c, buf, sizeof buf);
    assert_string_equal(buf, "became leader of term 3");
    c.old_role = RAFT_LEADER;
    c.role = RAFT_FOLLOWER;
    c.leader = 2;
    c.term = 4;
    status_describe_change(&c, buf, sizeof buf);
    assert_string_equal(buf, "stepped down: follows leader 2 in term 4");
    c.old_role = RAFT_FOLLOWER;
    c.role = RAFT_CANDIDATE;
    c.term = 5;
    status_describe_change(&c, buf, sizeof buf);
    assert_string_equal(buf, "started an election for term 5");
    c.role = RAFT_FOLLOWER;
    c.leader = 0;
    c.term = 6;
    status_describe_change(&c, buf, sizeof buf);
    assert_string_equal(buf, "term 6, no leader known");
    status_describe_removal(true, 7, buf, sizeof buf);
    assert_string_equal(buf,
                        "removed from the cluster at index 7: it no longer "
                        "campaigns");
}

/* A status refreshed on a real driver's loop. */
struct live {
    struct fake fk;
    struct ext_status *s;
    struct ext_status_change change;
    bool changed;
};

static void refresh_on_loop(struct fake *f, void *arg)
{
    struct live *l = arg;
    l->changed =
        status_refresh(l->s, raft_uv_node_core(f->d), f->d, &l->change);
    status_note_failure(l->s, f->d);
}

static json_t *live_json(struct live *l, raft_index applied)
{
    struct ext_status_extra x;
    fake_on_loop(&l->fk, refresh_on_loop, l);
    extra_init(&x);
    x.applied = applied;
    return render(l->s, &x);
}

/* A leader's figures: term, leader, the lag behind its commit index; a
 * refresh reports the change to leader once; a full log shows with the
 * store's words (log_full_reason) and reads full for the callers once
 * it stalled; a failed write shows as log_failed. */
static void test_leader_log_full_and_failed(void **state)
{
    static const raft_id voters[1] = {1};
    struct live l;
    struct ext_config cfg;
    struct fake_opts opts = {0};
    raft_index proposed;
    char why[256];
    json_t *o;
    (void)state;

    memset(&l, 0, sizeof l);
    memset(&cfg, 0, sizeof cfg);
    cfg.id = 1;
    assert_int_equal(status_new(&cfg, "b", &l.s), 0);
    fake_init(&l.fk, 1);
    fake_start(&l.fk, fake_core(1, voters, 1, 50), &opts);
    FAKE_WAIT(&l.fk, l.fk.obs.role == RAFT_LEADER && l.fk.obs.commit >= 1);
    o = live_json(&l, 0);
    assert_true(l.changed);
    assert_int_equal(l.change.role, RAFT_LEADER);
    assert_int_equal(l.change.leader, 1);
    is_str(o, "role", "leader");
    is_int(o, "leader", 1);
    assert_true(json_integer_value(get(o, "term")) >= 1);
    is_int(o, "commit", 1);
    is_int(o, "lag", 1);
    is_bool(o, "catching_up", true);
    assert_int_equal(json_array_size(get(o, "peers")), 0);
    json_decref(o);
    o = live_json(&l, 1);
    assert_false(l.changed);
    is_int(o, "lag", 0);
    is_bool(o, "catching_up", false);
    assert_true(json_integer_value(get(o, "log_writes")) >= 1);
    json_decref(o);

    fake_fail(&l.fk, FAKE_APPEND, RAFT_NOSPACE, UINT_MAX);
    fake_fail_text(&l.fk, FAKE_APPEND, "append: log full: MDB_MAP_FULL");
    assert_int_equal(fake_propose(&l.fk, "x", &proposed), 0);
    FAKE_WAIT(&l.fk, l.fk.obs.log_full);
    o = live_json(&l, 1);
    is_bool(o, "log_full", true);
    is_str(o, "log_full_reason", "append: log full: MDB_MAP_FULL");
    json_decref(o);
    for (int i = 0; i < EXT_WAIT_MS && !status_log_full(l.s, why, sizeof why);
         i++) {
        fake_on_loop(&l.fk, refresh_on_loop, &l);
        usleep(1000);
    }
    assert_true(status_log_full(l.s, why, sizeof why));
    assert_string_equal(why, "append: log full: MDB_MAP_FULL");

    fake_fail(&l.fk, FAKE_APPEND, RAFT_IOERR, UINT_MAX);
    fake_fail_text(&l.fk, FAKE_APPEND, "append: mdb_txn_commit: I/O error");
    FAKE_WAIT(&l.fk, l.fk.obs.failed);
    o = live_json(&l, 1);
    assert_true(status_failure(l.s, why, sizeof why));
    is_str(o, "log_failed", why);
    assert_non_null(strstr(why, "I/O error"));
    json_decref(o);
    fake_free(&l.fk);
    status_free(l.s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh_follower),
        cmocka_unit_test(test_extra_values),
        cmocka_unit_test(test_membership),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_leader_log_full_and_failed),
    };
    return cmocka_run_group_tests_name("ext_status", tests, NULL, NULL);
}
