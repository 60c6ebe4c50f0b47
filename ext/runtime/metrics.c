/* raft_metrics()'s Prometheus text (metrics.h), written with stdio into a
 * memory stream (open_memstream). Names follow Prometheus's conventions:
 * raftsql_ first, base units (seconds, bytes), counters end in _total,
 * histograms carry cumulative buckets up to le="+Inf", _sum and _count. */

#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>

/* family writes the HELP and TYPE lines of metric @name (@type: gauge,
 * counter or histogram). HELP texts hold no backslash nor newline. */
static void family(FILE *f, const char *name, const char *type,
                   const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* gauge and counter write a family of one sample without labels. */
static void gauge(FILE *f, const char *name, const char *help, double v)
{
    family(f, name, "gauge", help);
    fprintf(f, "%s %.17g\n", name, v);
}

static void counter(FILE *f, const char *name, const char *help, uint64_t v)
{
    family(f, name, "counter", help);
    fprintf(f, "%s %llu\n", name, (unsigned long long)v);
}

/* histogram writes the family @name of @h: a bucket per bound, cumulative,
 * then +Inf, _sum and _count. */
static void histogram(FILE *f, const char *name, const char *help,
                      const struct raft_histogram *h)
{
    family(f, name, "histogram", help);
    for (unsigned i = 0; i < h->n_bounds; i++) {
        fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i],
                (unsigned long long)raft_histogram_cumulative(h, i));
    }
    fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name,
            (unsigned long long)h->count);
    fprintf(f, "%s_sum %.17g\n", name, h->sum);
    fprintf(f, "%s_count %llu\n", name, (unsigned long long)h->count);
}

/* by_reason writes counter family @name with one sample per reason
 * (label reason, named by @label_of) of @counts (@n). */
static void by_reason(FILE *f, const char *name, const char *help,
                      const uint64_t *counts, int n,
                      const char *(*label_of)(int))
{
    family(f, name, "counter", help);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s{reason=\"%s\"} %llu\n", name, label_of(i),
                (unsigned long long)counts[i]);
    }
}

/* peer_samples writes a sample of @name per peer the leader tracks in @v:
 * its lag behind the leader's last index (@lag) or its match index. */
static void peer_samples(FILE *f, const char *name,
                         const struct ext_status_view *v, bool lag)
{
    for (unsigned i = 0; i < v->n_peers; i++) {
        const struct ext_status_peer_view *p = &v->peers[i];
        raft_index value = p->match;
        if (!p->has_progress) {
            continue;
        }
        if (lag) {
            value = v->last > p->match ? v->last - p->match : 0;
        }
        fprintf(f, "%s{peer=\"%llu\"} %llu\n", name, (unsigned long long)p->id,
                (unsigned long long)value);
    }
}

/* node_state writes the node's place in the cluster: id, term, role,
 * leader, indexes and the lag per peer. */
static void node_state(FILE *f, const struct ext_status_view *v,
                       const struct ext_status_extra *x)
{
    static const struct {
        int role;
        const char *name;
    } roles[] = {{RAFT_FOLLOWER, "follower"},
                 {RAFT_CANDIDATE, "candidate"},
                 {RAFT_LEADER, "leader"}};

    gauge(f, "raftsql_node_id", "This node's server id.", (double)v->id);
    gauge(f, "raftsql_term", "The current Raft term.", (double)v->term);
    family(f, "raftsql_role", "gauge",
           "1 for this node's role (follower, candidate, leader), 0 for "
           "the others.");
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        fprintf(f, "raftsql_role{role=\"%s\"} %d\n", roles[i].name,
                v->role == roles[i].role);
    }
    gauge(f, "raftsql_leader_id",
          "The leader's server id, 0 when none is known.", (double)v->leader);
    gauge(f, "raftsql_commit_index", "The commit index.", (double)v->commit);
    gauge(f, "raftsql_applied_index", "The last index applied to the database.",
          (double)x->applied);
    gauge(f, "raftsql_durable_index",
          "The applied index that the database file holds (checkpointed).",
          (double)x->durable);
    gauge(f, "raftsql_log_first_index", "The first index in the log.",
          (double)v->first);
    gauge(f, "raftsql_log_last_index", "The last index in the log.",
          (double)v->last);
    gauge(f, "raftsql_log_persisted_index",
          "The last log index made durable (fsync'd).", (double)v->persisted);
    gauge(f, "raftsql_apply_lag_entries",
          "Committed entries not applied here yet (commit - applied).",
          (double)(v->commit > x->applied ? v->commit - x->applied : 0));
    gauge(f, "raftsql_leader_lag_entries",
          "Entries the leader committed, as last heard, that this node has "
          "not applied.",
          (double)x->staleness.lag_entries);
    gauge(f, "raftsql_stale",
          "1 while reads of replicated tables are refused as stale "
          "(max_staleness_ms).",
          x->staleness.stale);
    gauge(f, "raftsql_removed",
          "1 once this node was removed from the cluster.", v->removed);
    family(f, "raftsql_peer_connected", "gauge",
           "1 while the connection to the peer is up.");
    for (unsigned i = 0; i < v->n_peers; i++) {
        fprintf(f, "raftsql_peer_connected{peer=\"%llu\"} %d\n",
                (unsigned long long)v->peers[i].id, v->peers[i].connected);
    }
    family(f, "raftsql_peer_lag_entries", "gauge",
           "The leader's last log index minus the peer's match index (on "
           "the leader only).");
    peer_samples(f, "raftsql_peer_lag_entries", v, true);
    family(f, "raftsql_peer_match_index", "gauge",
           "The peer's match index, as the leader sees it (on the leader "
           "only).");
    peer_samples(f, "raftsql_peer_match_index", v, false);
}

/* log_and_apply writes the log's and the applier's figures. */
static void log_and_apply(FILE *f, const struct ext_status_view *v,
                          const struct ext_status_extra *x)
{
    const struct raft_uv_node_stats *s = &v->stats;

    counter(f, "raftsql_log_entries_appended_total",
            "Entries written to this node's log.", s->n_entries_written);
    counter(f, "raftsql_log_bytes_appended_total",
            "Payload bytes of the entries written to this node's log.",
            s->n_bytes_written);
    counter(f, "raftsql_log_writes_total",
            "Log writes: one LMDB write transaction and one fsync each.",
            s->n_writes);
    histogram(f, "raftsql_log_fsync_seconds",
              "Time of each log write: its LMDB write transaction and its "
              "fsync.",
              &s->write_seconds);
    histogram(f, "raftsql_log_write_batch_entries",
              "Entries per log write (group commit).", &s->write_entries);
    counter(f, "raftsql_log_compactions_total", "Log compactions done.",
            s->n_compactions);
    gauge(f, "raftsql_log_full",
          "1 while the log refuses writes for lack of room.", v->log_full);
    gauge(f, "raftsql_log_failed",
          "1 once a log write failed: the node neither writes, votes nor "
          "acknowledges until restarted.",
          v->failed);
    counter(f, "raftsql_append_messages_sent_total",
            "AppendEntries messages sent with entries (leader).",
            s->n_appends_sent);
    counter(f, "raftsql_append_entries_sent_total",
            "Entries in those AppendEntries messages.", s->n_entries_sent);
    gauge(f, "raftsql_loop_max_tick_seconds",
          "The longest time between two ticks of the loop thread since "
          "start.",
          (double)s->loop_max_tick_ms / 1e3);
    histogram(f, "raftsql_apply_seconds",
              "Time of each batch applied to the database (one SQLite "
              "transaction).",
              &x->apply.apply_seconds);
    histogram(f, "raftsql_apply_batch_entries", "Entries per batch applied.",
              &x->apply.batch_entries);
    gauge(f, "raftsql_apply_failing",
          "1 while applying fails and is retried (raft_status() "
          "apply_error).",
          !x->applying);
    gauge(f, "raftsql_requests_queued", "Requests in the submission queue.",
          (double)x->queue);
    gauge(f, "raftsql_requests_waiting", "Callers waiting for their write.",
          (double)x->waiters);
}

/* snapshots_and_checks writes the snapshots sent and installed, the
 * divergence and the replica checksum. */
static void snapshots_and_checks(FILE *f, const struct ext_status_view *v,
                                 const struct ext_status_extra *x)
{
    const struct raft_uv_node_stats *s = &v->stats;

    counter(f, "raftsql_snapshots_sent_total",
            "Snapshots fully sent to a follower (leader).",
            s->n_snapshots_sent);
    counter(f, "raftsql_snapshot_sent_bytes_total",
            "Bytes of the snapshots fully sent.", s->n_snapshot_bytes_sent);
    counter(f, "raftsql_snapshots_installed_total",
            "Snapshots received and installed.", s->n_snapshots_installed);
    counter(f, "raftsql_snapshot_installed_bytes_total",
            "Bytes of the snapshots installed.", s->n_snapshot_bytes_installed);
    gauge(f, "raftsql_diverged",
          "1 while the replica is diverged (a foreign commit was seen, not "
          "yet repaired).",
          x->diverged);
    counter(f, "raftsql_repairs_total",
            "Divergences repaired (by a snapshot install) since start.",
            x->repairs);
    gauge(f, "raftsql_checksum_enabled",
          "1 while the running replica checksum is maintained.",
          x->checksum.on);
    gauge(f, "raftsql_checksum_index",
          "The applied index of the latest replica checksum.",
          (double)x->checksum.index);
    gauge(f, "raftsql_checksum_mismatch",
          "1 when a peer's checksum differed from this node's at an "
          "index.",
          x->checksum.mismatch);
}

/* requests_and_lease writes the refused, timed-out and forwarded
 * requests, and the write lease of plain SQL writes. */
static void requests_and_lease(FILE *f, const struct ext_status_extra *x)
{
    const struct ext_lease_view *l = &x->lease;

    by_reason(f, "raftsql_requests_refused_total",
              "Writes refused, by reason: they did not apply and never "
              "will.",
              x->requests.refused, EXT_REFUSED_N, request_counts_refusal_name);
    by_reason(f, "raftsql_requests_timed_out_total",
              "Writes whose wait ended at exec_timeout_ms, by reason.",
              x->requests.timed_out, EXT_TIMEOUT_N,
              request_counts_timeout_name);
    by_reason(f, "raftsql_requests_forwarded_total",
              "Requests this node forwarded to the leader, by reason "
              "(first send, or again).",
              x->requests.forwarded, EXT_FORWARD_N,
              request_counts_forward_name);
    counter(f, "raftsql_lease_holds_total",
            "Write leases granted to plain SQL writers of this node.",
            l->n_holds);
    counter(f, "raftsql_lease_waits_total",
            "Plain SQL writers of this node that found the write lease out "
            "and waited.",
            l->n_waits);
    counter(f, "raftsql_lease_busy_total",
            "Plain SQL writers of this node that gave up waiting for the "
            "write lease (SQLITE_BUSY).",
            l->n_busy);
    histogram(f, "raftsql_lease_hold_seconds",
              "Time from each grant of the write lease to a writer of this "
              "node to its release.",
              &l->hold_seconds);
    gauge(f, "raftsql_lease_in_force",
          "1 while a write lease is in force (as this node knows).",
          l->in_force);
    gauge(f, "raftsql_lease_queued_writers",
          "Writers of this node waiting for the write lease.",
          (double)l->queued);
}

char *metrics_text(const struct ext_status_view *v,
                   const struct ext_status_extra *x)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    if (f == NULL) {
        return NULL;
    }
    node_state(f, v, x);
    log_and_apply(f, v, x);
    snapshots_and_checks(f, v, x);
    requests_and_lease(f, x);
    if (ferror(f)) {
        fclose(f);
        free(text);
        return NULL;
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
