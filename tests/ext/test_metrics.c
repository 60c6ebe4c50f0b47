/* Tests of ext/runtime/metrics.c, raft_metrics()'s Prometheus text, from
 * a status view and extra made by hand: HELP and TYPE before each
 * family's samples, the figures given, labels per role, peer and reason,
 * histograms with cumulative buckets, +Inf, _sum and _count, and a peer
 * without progress (a follower's view) left out of the leader's
 * families. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ext/runtime/metrics.h"

/* has_line fails unless @text holds the line @line. */
static void has_line(const char *text, const char *line)
{
    size_t len = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++) {
        if ((p == text || p[-1] == '\n') && p[len] == '\n') {
            return;
        }
    }
    fail_msg("no line '%s' in:\n%s", line, text);
}

/* lacks fails when @text holds @what. */
static void lacks(const char *text, const char *what)
{
    if (strstr(text, what) != NULL) {
        fail_msg("'%s' found in:\n%s", what, text);
    }
}

/* The figures given come out under their names, with HELP and TYPE. */
static void test_figures(void **state)
{
    struct ext_status_view v;
    struct ext_status_extra x;
    char *text;

    (void)state;
    memset(&v, 0, sizeof v);
    memset(&x, 0, sizeof x);
    v.id = 2;
    v.role = RAFT_LEADER;
    v.term = 7;
    v.commit = 40;
    v.last = 42;
    v.n_peers = 2;
    v.peers[0] = (struct ext_status_peer_view){1, true, true, 30};
    v.peers[1] = (struct ext_status_peer_view){3, false, false, 0};
    v.stats.n_entries_written = 41;
    v.stats.n_bytes_written = 4100;
    raft_histogram_init(&v.stats.write_seconds, raft_histogram_seconds,
                        raft_histogram_n_seconds);
    raft_histogram_init(&v.stats.write_entries, raft_histogram_sizes,
                        raft_histogram_n_sizes);
    raft_histogram_observe(&v.stats.write_seconds, 0.002);
    raft_histogram_observe(&v.stats.write_seconds, 0.02);
    raft_histogram_init(&x.apply.apply_seconds, raft_histogram_seconds,
                        raft_histogram_n_seconds);
    raft_histogram_init(&x.apply.batch_entries, raft_histogram_sizes,
                        raft_histogram_n_sizes);
    raft_histogram_init(&x.lease.hold_seconds, raft_histogram_seconds,
                        raft_histogram_n_seconds);
    x.applied = 38;
    x.applying = true;
    x.diverged = true;
    x.requests.refused[EXT_REFUSED_BUSY] = 3;
    x.requests.timed_out[EXT_TIMEOUT_UNANSWERED] = 2;
    x.requests.forwarded[EXT_FORWARD_AGAIN] = 5;
    x.lease.n_holds = 4;

    text = metrics_text(&v, &x);
    assert_non_null(text);
    has_line(text, "# HELP raftsql_term The current Raft term.");
    has_line(text, "# TYPE raftsql_term gauge");
    has_line(text, "raftsql_term 7");
    has_line(text, "raftsql_node_id 2");
    has_line(text, "raftsql_role{role=\"leader\"} 1");
    has_line(text, "raftsql_role{role=\"follower\"} 0");
    has_line(text, "raftsql_apply_lag_entries 2");
    has_line(text, "raftsql_peer_lag_entries{peer=\"1\"} 12");
    has_line(text, "raftsql_peer_match_index{peer=\"1\"} 30");
    has_line(text, "raftsql_peer_connected{peer=\"3\"} 0");
    lacks(text, "raftsql_peer_lag_entries{peer=\"3\"}");
    has_line(text, "# TYPE raftsql_log_entries_appended_total counter");
    has_line(text, "raftsql_log_entries_appended_total 41");
    has_line(text, "raftsql_log_bytes_appended_total 4100");
    has_line(text, "raftsql_diverged 1");
    has_line(text, "raftsql_apply_failing 0");
    has_line(text, "raftsql_requests_refused_total{reason=\"busy\"} 3");
    has_line(text, "raftsql_requests_refused_total{reason=\"too_big\"} 0");
    has_line(text, "raftsql_requests_timed_out_total{reason=\"unanswered\"} 2");
    has_line(text, "raftsql_requests_forwarded_total{reason=\"again\"} 5");
    has_line(text, "raftsql_lease_holds_total 4");
    has_line(text, "# TYPE raftsql_log_fsync_seconds histogram");
    has_line(text, "raftsql_log_fsync_seconds_bucket{le=\"0.001\"} 0");
    has_line(text, "raftsql_log_fsync_seconds_bucket{le=\"0.0025\"} 1");
    has_line(text, "raftsql_log_fsync_seconds_bucket{le=\"0.025\"} 2");
    has_line(text, "raftsql_log_fsync_seconds_bucket{le=\"+Inf\"} 2");
    has_line(text, "raftsql_log_fsync_seconds_count 2");
    has_line(text, "raftsql_lease_hold_seconds_bucket{le=\"+Inf\"} 0");
    assert_int_equal(text[strlen(text) - 1], '\n');
    free(text);
}

/* Every sample line follows the HELP and TYPE lines of its family. */
static void test_families_first(void **state)
{
    struct ext_status_view v;
    struct ext_status_extra x;
    char family[128] = "";
    char *text, *line, *save = NULL;

    (void)state;
    memset(&v, 0, sizeof v);
    memset(&x, 0, sizeof x);
    text = metrics_text(&v, &x);
    assert_non_null(text);
    for (line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        size_t len = strlen(family);
        if (strncmp(line, "# TYPE ", 7) == 0) {
            snprintf(family, sizeof family, "%.*s", (int)strcspn(line + 7, " "),
                     line + 7);
            continue;
        }
        if (line[0] == '#') {
            continue;
        }
        if (len == 0 || strncmp(line, family, len) != 0) {
            fail_msg("sample '%s' outside its family (last TYPE: %s)", line,
                     family);
        }
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_figures),
        cmocka_unit_test(test_families_first),
    };
    return cmocka_run_group_tests_name("ext_metrics", tests, NULL, NULL);
}
