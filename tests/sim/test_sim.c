/* The randomized simulation (tests/sim/sim.h) over many seeds, 3 and 5
 * nodes, and the determinism of the core: same inputs, byte-identical
 * outputs, with several clusters in one process.
 *
 * Environment:
 *   SIM_SEEDS=N     seeds per cluster size (default 1000)
 *   SIM_FIRST=S     first seed (default 1)
 *   SIM_STEPS=K     harness steps per run before the liveness phase (10000)
 *   SIM_SEED=S      run only seed S (with SIM_NODES, default 3): a replay
 *   SIM_CAMPAIGN=1  no cmocka: run every seed of both sizes, count and
 *                   list failures, print one summary line, exit 1 if any
 * A failing run prints a one-line replay command. */

#include "tests/sim/sim.h"

static unsigned sim_steps(void)
{
    return (unsigned)sim_env_u64("SIM_STEPS", 10000);
}

/* run_seeds runs SIM_SEEDS seeds from SIM_FIRST on @n nodes; each run
 * fails the test on its first broken check, with its replay command. */
static void run_seeds(unsigned n)
{
    uint64_t first = sim_env_u64("SIM_FIRST", 1);
    uint64_t count = sim_env_u64("SIM_SEEDS", 1000);
    uint64_t seed;

    for (seed = first; seed < first + count; seed++) {
        sim_run(n, seed, sim_steps(), NULL);
    }
}

static void test_sim_3(void **state)
{
    (void)state;
    run_seeds(3);
}

static void test_sim_5(void **state)
{
    (void)state;
    run_seeds(5);
}

/* The replay of one run (SIM_SEED set). */
static void test_replay(void **state)
{
    (void)state;
    sim_run((unsigned)sim_env_u64("SIM_NODES", 3), sim_env_u64("SIM_SEED", 1),
            sim_steps(), NULL);
}

/* Same seed, same outputs byte for byte (every hard state, entry, encoded
 * message and committed entry of every core is hashed in order); another
 * seed, other outputs. Several cores live in one process. */
static void test_deterministic(void **state)
{
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 10; seed++) {
        unsigned n = seed % 2 ? 3 : 5;
        uint64_t a = sim_run(n, seed, 1000, NULL);
        uint64_t b = sim_run(n, seed, 1000, NULL);
        uint64_t d = sim_run(n, seed + 1000, 1000, NULL);
        if (a != b || a == d) {
            print_error("seed %llu: hashes %016llx %016llx %016llx\n",
                        (unsigned long long)seed, (unsigned long long)a,
                        (unsigned long long)b, (unsigned long long)d);
        }
        assert_true(a == b);
        assert_true(a != d);
    }
}

/* step_both steps one cluster event in each of @a and @b, @k times. */
static void step_both(struct cluster *a, struct cluster *b, unsigned k)
{
    unsigned i;

    for (i = 0; i < k; i++) {
        cluster_step(a);
        cluster_step(b);
    }
}

/* Two clusters stepped alternately in one process produce the same
 * outputs as each run alone: no global state in the core. */
static void test_interleaved(void **state)
{
    struct cluster_config cfg;
    struct cluster *a;
    struct cluster *b;
    struct cluster *alone;
    uint64_t ha;
    uint64_t hb;
    unsigned i;

    (void)state;
    cluster_config_default(&cfg, 3, 77);
    cfg.drop_pct = 5;
    a = cluster_new(&cfg);
    alone = cluster_new(&cfg);
    cluster_config_default(&cfg, 5, 78);
    b = cluster_new(&cfg);
    for (i = 0; i < 20; i++) {
        step_both(a, b, 200);
        if (cluster_leader(a) != 0) {
            cluster_propose(a, cluster_leader(a), "x", 1);
        }
        if (cluster_leader(b) != 0) {
            cluster_propose(b, cluster_leader(b), "y", 1);
        }
    }
    for (i = 0; i < 20; i++) {
        unsigned j;
        for (j = 0; j < 200; j++) {
            cluster_step(alone);
        }
        if (cluster_leader(alone) != 0) {
            cluster_propose(alone, cluster_leader(alone), "x", 1);
        }
    }
    ha = cluster_trace_hash(a);
    hb = cluster_trace_hash(alone);
    assert_true(ha == hb);
    assert_true(cluster_committed_last(a) > 10);
    assert_true(cluster_trace_hash(b) != ha);
    cluster_free(a);
    cluster_free(b);
    cluster_free(alone);
}

/* run_one runs one seed, returning false when a check failed. */
static bool run_one(unsigned n, uint64_t seed, unsigned steps)
{
    jmp_buf env;

    if (setjmp(env) != 0) {
        return false;
    }
    sim_run(n, seed, steps, &env);
    return true;
}

/* campaign runs every seed of both sizes without cmocka, counting the
 * failures (their replay commands are printed as they happen). */
static int campaign(void)
{
    uint64_t first = sim_env_u64("SIM_FIRST", 1);
    uint64_t count = sim_env_u64("SIM_SEEDS", 1000);
    unsigned steps = sim_steps();
    unsigned long long runs = 0;
    unsigned long long failures = 0;
    static const unsigned sizes[2] = {3, 5};
    uint64_t seed;
    unsigned i;

    for (seed = first; seed < first + count; seed++) {
        for (i = 0; i < 2; i++) {
            runs++;
            if (!run_one(sizes[i], seed, steps)) {
                failures++;
            }
        }
    }
    printf(
        "sim campaign: seeds %llu..%llu, 3 and 5 nodes, %u steps: "
        "%llu runs, %llu failed\n",
        (unsigned long long)first, (unsigned long long)(first + count - 1),
        steps, runs, failures);
    return failures == 0 ? 0 : 1;
}

int main(void)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_interleaved),
        cmocka_unit_test(test_sim_3),
        cmocka_unit_test(test_sim_5),
    };
    const struct CMUnitTest replay[] = {
        cmocka_unit_test(test_replay),
    };

    if (getenv("SIM_CAMPAIGN") != NULL) {
        return campaign();
    }
    if (getenv("SIM_SEED") != NULL) {
        return cmocka_run_group_tests(replay, NULL, NULL);
    }
    return cmocka_run_group_tests(all, NULL, NULL);
}
