/* The staleness rule (staleness_rule.h). */

#include "staleness_rule.h"

#include <stdio.h>
#include <string.h>

#include "node_log.h"

/* The kinds of staleness (ext_staleness_memory.kind). */
enum {
    KIND_FRESH,
    KIND_NO_LEADER,
    KIND_NO_CONTACT,
    KIND_CATCHING_UP,
    KIND_APPLY_LAG,
    KIND_REMOVED,
    KIND_NEW_TERM,
    KIND_LEADER_NO_QUORUM,
    KIND_NO_ROUND_TRIP
};

/* current_ms is when, in @v's mono_ms, the leader's commit index as
 * heard (@v->leader_commit) is known to have been current: when the
 * leader last heard a quorum of voters before it sent it (a follower
 * cut off with a leader in a minority hears that leader until it steps
 * down, while the majority elects another and commits: the leader's
 * own quorum contact is what bounds its commit index, and it tells it
 * since wire version 6). */
static uint64_t current_ms(const struct ext_staleness_view *v)
{
    uint64_t ago = v->contact_ms + v->leader_quorum_ms;
    if (ago < v->contact_ms) {
        ago = UINT64_MAX; /* (overflow) */
    }
    return v->mono_ms > ago ? v->mono_ms - ago : 0;
}

/* word_removed writes the reason of a node removed by entry @at into
 * @out (@len bytes); it holds no number that grows, so it is the
 * notice's too. */
static void word_removed(raft_index at, char *out, size_t len)
{
    snprintf(out, len,
             "stale replica: removed from the cluster (configuration entry "
             "%llu committed): it receives no more entries; read on a "
             "member",
             (unsigned long long)at);
}

/* word_notice writes into @out the notice text of kind @kind (not fresh),
 * which holds no number that grows while the notice is read. */
static void word_notice(const struct ext_staleness_memory *mem, int kind,
                        bool leading, unsigned max_ms,
                        struct ext_staleness_verdict *out)
{
    char since[EXT_ISO_TIME_LEN];
    node_log_iso_time(mem->since_ms, since);
    if (kind == KIND_NO_LEADER) {
        snprintf(out->notice, sizeof out->notice,
                 "stale replica: no leader known since %s "
                 "(max_staleness_ms=%u)",
                 since, max_ms);
    } else if (kind == KIND_NO_CONTACT || kind == KIND_NO_ROUND_TRIP) {
        snprintf(out->notice, sizeof out->notice,
                 "stale replica: %s since %s (max_staleness_ms=%u)",
                 !leading                     ? "no round trip with its leader"
                 : kind == KIND_NO_ROUND_TRIP ? "no quorum known to follow it"
                                              : "no round trip with a quorum",
                 since, max_ms);
    } else if (kind == KIND_LEADER_NO_QUORUM) {
        snprintf(out->notice, sizeof out->notice,
                 "stale replica: its leader has heard no quorum since %s "
                 "(max_staleness_ms=%u)",
                 since, max_ms);
    } else if (kind == KIND_NEW_TERM) {
        snprintf(out->notice, sizeof out->notice,
                 "stale replica: no entry of the leader's term committed "
                 "here since %s (max_staleness_ms=%u)",
                 since, max_ms);
    } else if (kind == KIND_APPLY_LAG) {
        snprintf(out->notice, sizeof out->notice,
                 "stale replica: its applied state is the leader's of %s "
                 "(max_staleness_ms=%u)",
                 since, max_ms);
    } else {
        snprintf(out->notice, sizeof out->notice,
                 "stale replica: catching up after its start to the "
                 "leader's commit index %llu (max_staleness_ms=%u)",
                 (unsigned long long)mem->catch_up_to, max_ms);
    }
}

/* note_applied follows when this node's applied state was current
 * (mem->fresh_at): the leader's commit index as heard at this tick is
 * current as of current_ms; once applied, that time is the applied
 * state's. Indexes heard and not applied yet wait in a
 * small ring; when it is full the second oldest goes (the age is then
 * overstated, never understated), never the oldest: that one may be the
 * catch-up target (catch_up_to), and a node caught up must know its
 * applied state's time. (Dropping the oldest, a node that heard 16
 * commit indexes while it caught up called itself caught up and, its
 * state's time unknown, fresh: the simulation's seed 31014, 5 nodes.) */
static void note_applied(struct ext_staleness_memory *mem,
                         const struct ext_staleness_view *v)
{
    uint64_t heard = current_ms(v);
    unsigned k = 0;

    if (v->applied >= v->leader_commit) {
        mem->fresh_known = true;
        if (heard > mem->fresh_at) {
            mem->fresh_at = heard;
        }
        mem->n_pend = 0;
        return;
    }
    if (mem->n_pend == 0 ||
        v->leader_commit > mem->pend_commit[mem->n_pend - 1]) {
        if (mem->n_pend == 16) {
            memmove(mem->pend_commit + 1, mem->pend_commit + 2,
                    14 * sizeof *mem->pend_commit);
            memmove(mem->pend_at + 1, mem->pend_at + 2,
                    14 * sizeof *mem->pend_at);
            mem->n_pend = 15;
        }
        mem->pend_commit[mem->n_pend] = v->leader_commit;
        mem->pend_at[mem->n_pend] = heard;
        mem->n_pend++;
    }
    while (k < mem->n_pend && mem->pend_commit[k] <= v->applied) {
        mem->fresh_known = true;
        if (mem->pend_at[k] > mem->fresh_at) {
            mem->fresh_at = mem->pend_at[k];
        }
        k++;
    }
    if (k > 0) {
        memmove(mem->pend_commit, mem->pend_commit + k,
                (mem->n_pend - k) * sizeof *mem->pend_commit);
        memmove(mem->pend_at, mem->pend_at + k,
                (mem->n_pend - k) * sizeof *mem->pend_at);
        mem->n_pend -= k;
    }
}

void staleness_judge(struct ext_staleness_memory *mem, unsigned max_ms,
                     const struct ext_staleness_view *v,
                     struct ext_staleness_verdict *out)
{
    int kind = KIND_FRESH;
    memset(out, 0, sizeof *out);
    out->leader_known = v->contact_ms != UINT64_MAX;
    out->lag_ms = out->leader_known ? v->contact_ms : 0;
    out->lag_entries =
        v->leader_commit > v->applied ? v->leader_commit - v->applied : 0;
    /* The leader's commit index counts only once an entry of its term
     * is committed (raft_commit_current): before, it may lag what an
     * earlier leader committed, and a state that reached it is not
     * known to have been current when it was heard. */
    bool current = out->leader_known && v->commit_current;
    if (current && !mem->contacted) {
        mem->contacted = true;
        mem->catch_up_to = v->leader_commit;
    }
    if (mem->contacted && !mem->caught_up && v->applied >= mem->catch_up_to) {
        mem->caught_up = true;
    }
    if (current) {
        note_applied(mem, v);
    }
    if (v->removed) {
        kind = KIND_REMOVED;
        word_removed(v->removed_at, out->reason, sizeof out->reason);
    } else if (max_ms == 0) {
        mem->kind = KIND_FRESH;
        return;
    } else if (!out->leader_known && v->leader_seen) {
        /* A leader is known, but no time its commit index was current
         * at: its first AppendEntries echo no answer of ours yet. */
        kind = KIND_NO_ROUND_TRIP;
        snprintf(out->reason, sizeof out->reason,
                 "stale replica: %s yet (max_staleness_ms=%u)",
                 v->leading ? "no quorum known to follow it"
                            : "no round trip with its leader completed",
                 max_ms);
    } else if (!out->leader_known) {
        kind = KIND_NO_LEADER;
        snprintf(out->reason, sizeof out->reason,
                 "stale replica: no leader known (max_staleness_ms=%u)",
                 max_ms);
    } else if (v->contact_ms > max_ms) {
        kind = KIND_NO_CONTACT;
        snprintf(out->reason, sizeof out->reason,
                 "stale replica: %s for %llu ms (max_staleness_ms=%u)",
                 v->leading ? "no round trip with a quorum"
                            : "no round trip with its leader",
                 (unsigned long long)v->contact_ms, max_ms);
    } else if (v->contact_ms + v->leader_quorum_ms > max_ms) {
        /* The two ages add up past the bound: the larger part is named,
         * this node's own silence (a follower cut off alone: its
         * leader's last quorum contact as recent as ever) or its
         * leader's lost quorum. */
        bool silent = v->contact_ms >= v->leader_quorum_ms;
        uint64_t first = silent ? v->contact_ms : v->leader_quorum_ms;
        uint64_t second = silent ? v->leader_quorum_ms : v->contact_ms;
        kind = silent ? KIND_NO_CONTACT : KIND_LEADER_NO_QUORUM;
        snprintf(out->reason, sizeof out->reason,
                 silent ? "stale replica: no round trip with its leader for "
                          "%llu ms, which "
                          "its leader's last quorum contact, %llu ms before "
                          "it sent, takes past max_staleness_ms=%u"
                        : "stale replica: its leader had heard no quorum for "
                          "%llu ms when it last sent, %llu ms ago "
                          "(max_staleness_ms=%u)",
                 (unsigned long long)first, (unsigned long long)second, max_ms);
    } else if (!v->commit_current) {
        kind = KIND_NEW_TERM;
        snprintf(out->reason, sizeof out->reason,
                 "stale replica: no entry of the leader's term committed "
                 "here yet (commit index %llu heard; a new leader's may lag "
                 "an earlier leader's; max_staleness_ms=%u)",
                 (unsigned long long)v->leader_commit, max_ms);
    } else if (!mem->caught_up || !mem->fresh_known) {
        /* (Caught up, its applied state's time is known: note_applied
         * keeps the target in its ring. Both, to be safe.) */
        kind = KIND_CATCHING_UP;
        snprintf(out->reason, sizeof out->reason,
                 "stale replica: catching up after its start: applied "
                 "%llu of the leader's commit index %llu "
                 "(max_staleness_ms=%u)",
                 (unsigned long long)v->applied,
                 (unsigned long long)mem->catch_up_to, max_ms);
    } else if (mem->fresh_known && v->mono_ms > mem->fresh_at + max_ms) {
        kind = KIND_APPLY_LAG;
        snprintf(out->reason, sizeof out->reason,
                 "stale replica: its applied state is %llu ms old "
                 "(applied %llu of the leader's commit index %llu; "
                 "max_staleness_ms=%u)",
                 (unsigned long long)(v->mono_ms - mem->fresh_at),
                 (unsigned long long)v->applied,
                 (unsigned long long)v->leader_commit, max_ms);
    }
    out->stale = kind != KIND_FRESH;
    if (!out->stale && max_ms > 0) {
        uint64_t heard = current_ms(v);
        out->fresh_until =
            (mem->fresh_known && mem->fresh_at < heard ? mem->fresh_at
                                                       : heard) +
            max_ms;
    }
    if (kind != mem->kind) {
        /* The time of the last contact; a leader lost after it keeps
         * that time ("no leader known since" it was last heard). */
        if (kind == KIND_NO_CONTACT) {
            mem->since_ms =
                v->wall_ms > v->contact_ms ? v->wall_ms - v->contact_ms : 0;
        } else if (kind == KIND_LEADER_NO_QUORUM) {
            uint64_t ago = v->mono_ms - current_ms(v);
            mem->since_ms = v->wall_ms > ago ? v->wall_ms - ago : 0;
        } else if (kind == KIND_APPLY_LAG) {
            uint64_t age = v->mono_ms - mem->fresh_at;
            mem->since_ms = v->wall_ms > age ? v->wall_ms - age : 0;
        } else if (kind != KIND_NO_LEADER || mem->kind != KIND_NO_CONTACT) {
            mem->since_ms = v->wall_ms;
        }
        mem->kind = kind;
    }
    if (kind == KIND_REMOVED) {
        word_removed(v->removed_at, out->notice, sizeof out->notice);
    } else if (out->stale) {
        word_notice(mem, kind, v->leading, max_ms, out);
    }
}
