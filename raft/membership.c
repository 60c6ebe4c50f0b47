/* Membership (thesis ch. 4, one server at a time, §4.1): the configuration
 * in force is the latest RAFT_ENTRY_CONFIG entry of the log, committed or
 * not, else the compacted prefix's (base); truncating a configuration
 * entry falls back to the one before. The per-server arrays of struct raft
 * follow the configuration's slots. The leader's CHANGE, quorums over the
 * voters only (learners never count), and the removed leader's step-down
 * (§4.2.2). */

#include <string.h>

#include "configuration.h"
#include "raft_internal.h"

bool raft_is_voter(const struct raft *r, unsigned slot)
{
    return slot < r->conf.n && r->conf.servers[slot].role == RAFT_VOTER;
}

/* decode_entry decodes configuration entry @e into @out. */
static int decode_entry(const struct raft_entry *e,
                        struct raft_configuration *out)
{
    if (e->data == NULL) {
        return RAFT_CORRUPT;
    }
    return raft_configuration_decode(e->data->data, e->data->len, out, NULL,
                                     0) == 0
               ? 0
               : RAFT_CORRUPT;
}

int membership_check_entries(const struct raft_entry *entries, unsigned n)
{
    struct raft_configuration c;
    unsigned i;

    for (i = 0; i < n; i++) {
        if (entries[i].type == RAFT_ENTRY_CONFIG &&
            decode_entry(&entries[i], &c) != 0) {
            return RAFT_INVALID;
        }
    }
    return 0;
}

unsigned raft_n_slots(const struct raft *r)
{
    return r->conf.n + r->leaving.servers.n;
}

raft_id raft_slot_id(const struct raft *r, unsigned slot)
{
    return slot < r->conf.n ? r->conf.servers[slot].id
                            : r->leaving.servers.servers[slot - r->conf.n].id;
}

unsigned raft_track_of(const struct raft *r, raft_id id)
{
    unsigned slot = raft_slot_of(r, id);
    int k;

    if (slot != RAFT_MAX_SERVERS) {
        return slot;
    }
    k = raft_configuration_find(&r->leaving.servers, id);
    return k < 0 ? RAFT_MAX_SERVERS : r->conf.n + (unsigned)k;
}

/* keep_leaving adds server @s, removed by entry @index, to @out when it
 * is not this server, not a member of @next and there is a slot for it;
 * @from (may be NULL) is its entry in r->leaving so far, at @i. */
static void keep_leaving(const struct raft *r,
                         const struct raft_configuration *next,
                         const struct raft_server *s, raft_index index,
                         const struct raft_leaving *from, unsigned i,
                         struct raft_leaving *out)
{
    unsigned k = out->servers.n;

    if (s->id == r->id || raft_configuration_find(next, s->id) >= 0 ||
        next->n + k >= RAFT_MAX_SERVERS ||
        raft_configuration_add(&out->servers, s->id, s->role, s->address) !=
            0) {
        return;
    }
    out->index[k] = index;
    out->committed[k] = from != NULL && from->committed[i];
    out->committed_at[k] = from != NULL ? from->committed_at[i] : 0;
    out->holds[k] = from != NULL && from->holds[i];
}

/* collect_leaving lists in @out the servers a leader replicates to, beside
 * the members, once @next (held by entry @index) is in force: the members
 * it removes when @index is not committed, then the leaving servers it
 * does not hold, as far as slots are left. */
static void collect_leaving(const struct raft *r,
                            const struct raft_configuration *next,
                            raft_index index, struct raft_leaving *out)
{
    unsigned i;

    memset(out, 0, sizeof *out);
    if (r->role != RAFT_LEADER) {
        return;
    }
    for (i = 0; index > r->commit && i < r->conf.n; i++) {
        keep_leaving(r, next, &r->conf.servers[i], index, NULL, 0, out);
    }
    for (i = 0; i < r->leaving.servers.n; i++) {
        keep_leaving(r, next, &r->leaving.servers.servers[i],
                     r->leaving.index[i], &r->leaving, i, out);
    }
}

/* progress_continuation writes to *@max_seq and *@max_epoch (which hold
 * their floors) the highest seq and epoch any progress slot reached. A
 * server tracked anew (added, or removed and recalled) in the term it
 * was tracked before must never see seqs or epochs of its earlier
 * progress again (progress.h): its new progress continues after every
 * other's. */
static void progress_continuation(const struct raft *r, uint64_t *max_seq,
                                  uint64_t *max_epoch)
{
    unsigned k;

    for (k = 0; k < RAFT_MAX_SERVERS; k++) {
        if (r->progress[k].next_seq > *max_seq) {
            *max_seq = r->progress[k].next_seq;
        }
        if (r->progress[k].epoch > *max_epoch) {
            *max_epoch = r->progress[k].epoch;
        }
    }
}

/* progress_fresh starts @p anew for a server tracked anew, with seqs from
 * @seq and epochs after @epoch (progress_continuation): it probes at the
 * last entry, so that the server answers at once with its own last
 * index. */
static void progress_fresh(const struct raft *r, struct raft_peer_progress *p,
                           uint64_t seq, uint64_t epoch)
{
    raft_index last = log_last_index(&r->log);

    p->next_seq = seq;
    p->epoch = epoch;
    progress_reset(p, last > 0 ? last : 1, r->now);
    p->round_target = last;
}

/* set_conf puts @next in force (held by entry @index, 0 for base) and
 * moves the per-server state of the servers still tracked (members and
 * leaving servers) to their new slots; a new server's progress starts
 * anew, probing after the last entry. */
static void set_conf(struct raft *r, const struct raft_configuration *next,
                     raft_index index)
{
    struct raft_peer_progress progress[RAFT_MAX_SERVERS];
    int8_t votes[RAFT_MAX_SERVERS];
    bool active[RAFT_MAX_SERVERS];
    bool used[RAFT_MAX_SERVERS];
    bool kept[RAFT_MAX_SERVERS];
    struct raft_leaving leaving;
    uint64_t max_seq = 1;
    uint64_t max_epoch = 0;
    unsigned n_slots;
    unsigned j;
    unsigned k;

    r->conf_index = index;
    if (raft_configuration_equal(&r->conf, next)) {
        r->self_slot = raft_slot_of(r, r->id);
        return;
    }
    progress_continuation(r, &max_seq, &max_epoch);
    collect_leaving(r, next, index, &leaving);
    n_slots = next->n + leaving.servers.n;
    memset(used, 0, sizeof used);
    for (j = 0; j < n_slots; j++) {
        raft_id id = j < next->n ? next->servers[j].id
                                 : leaving.servers.servers[j - next->n].id;
        unsigned old = raft_track_of(r, id);
        kept[j] = old < RAFT_MAX_SERVERS;
        if (kept[j]) {
            progress[j] = r->progress[old];
            votes[j] = r->votes[old];
            active[j] = r->active[old];
            used[old] = true;
        }
    }
    /* The slots of servers no longer tracked (and the spare ones) hold
     * allocated windows: hand them to the new servers, then to the spare
     * slots. Invariant: leaving servers were tracked, so only members
     * are new. */
    k = 0;
    for (j = 0; j < RAFT_MAX_SERVERS; j++) {
        if (j < n_slots && kept[j]) {
            continue;
        }
        while (used[k]) {
            k++;
        }
        progress[j] = r->progress[k];
        used[k] = true;
        votes[j] = 0;
        active[j] = false;
        if (j < n_slots) {
            progress_fresh(r, &progress[j], max_seq, max_epoch);
        }
    }
    memcpy(r->progress, progress, sizeof progress);
    memcpy(r->votes, votes, sizeof votes);
    memcpy(r->active, active, sizeof active);
    r->conf = *next;
    r->leaving = leaving;
    r->self_slot = raft_slot_of(r, r->id);
    r->conf_changed = true;
    if (r->transfer_to != 0 &&
        !raft_is_voter(r, raft_slot_of(r, r->transfer_to))) {
        r->transfer_to = 0;
    }
}

/* latest_before finds the configuration in force at @index: the latest
 * configuration entry at or below it in the log, else base. */
static void latest_before(const struct raft *r, raft_index index,
                          struct raft_configuration *out, raft_index *out_index)
{
    raft_index i;

    for (i = index; i >= r->log.first && i > 0; i--) {
        const struct raft_entry *e = log_get(&r->log, i);
        if (e != NULL && e->type == RAFT_ENTRY_CONFIG &&
            decode_entry(e, out) == 0) {
            *out_index = i;
            return;
        }
    }
    *out = r->base;
    *out_index = 0;
}

int membership_init(struct raft *r, const struct raft_config *cfg)
{
    struct raft_configuration c;
    raft_index index;
    unsigned i;
    int rc;

    raft_configuration_init(&r->base);
    if (cfg->configuration != NULL) {
        if (!raft_configuration_valid(cfg->configuration)) {
            return RAFT_INVALID;
        }
        r->base = *cfg->configuration;
    } else {
        for (i = 0; i < cfg->n_voters; i++) {
            rc = raft_configuration_add(&r->base, cfg->voters[i], RAFT_VOTER,
                                        NULL);
            if (rc != 0) {
                return rc;
            }
        }
    }
    for (i = 0; i < r->log.n; i++) {
        if (r->log.entries[i].type == RAFT_ENTRY_CONFIG &&
            decode_entry(&r->log.entries[i], &c) != 0) {
            return RAFT_CORRUPT;
        }
    }
    raft_configuration_init(&r->conf);
    latest_before(r, log_last_index(&r->log), &c, &index);
    set_conf(r, &c, index);
    r->conf_changed = false;
    return 0;
}

void membership_appended(struct raft *r, raft_index index)
{
    const struct raft_entry *e = log_get(&r->log, index);
    struct raft_configuration c;

    if (e != NULL && e->type == RAFT_ENTRY_CONFIG && decode_entry(e, &c) == 0) {
        set_conf(r, &c, index);
    }
}

void membership_truncated(struct raft *r, raft_index from)
{
    struct raft_configuration c;
    raft_index index;

    if (r->conf_index < from) {
        return;
    }
    latest_before(r, from - 1, &c, &index);
    set_conf(r, &c, index);
}

void membership_compacting(struct raft *r, raft_index index,
                           const struct raft_configuration *snapshot)
{
    raft_index at;

    if (snapshot != NULL) {
        r->base = *snapshot;
    } else {
        latest_before(r, index, &r->base, &at);
    }
    if (r->conf_index <= index) {
        /* The entry that holds conf goes: base holds it from now on. */
        if (!raft_configuration_equal(&r->conf, &r->base)) {
            set_conf(r, &r->base, 0);
        }
        r->conf_index = 0;
    }
}

void membership_reset(struct raft *r, const struct raft_configuration *snapshot)
{
    if (snapshot != NULL) {
        r->base = *snapshot;
    } else {
        r->base = r->conf;
    }
    set_conf(r, &r->base, 0);
}

raft_index membership_commit_index(const struct raft *r)
{
    raft_index matches[RAFT_MAX_SERVERS];
    unsigned n = 0;
    unsigned i;

    for (i = 0; i < r->conf.n; i++) {
        if (raft_is_voter(r, i)) {
            matches[n++] =
                i == r->self_slot ? r->persisted : r->progress[i].match;
        }
    }
    return quorum_commit_index(matches, n);
}

enum quorum_vote membership_tally(const struct raft *r, const int8_t *votes)
{
    int8_t v[RAFT_MAX_SERVERS];
    unsigned n = 0;
    unsigned i;

    for (i = 0; i < r->conf.n; i++) {
        if (raft_is_voter(r, i)) {
            v[n++] = votes[i];
        }
    }
    return quorum_vote_result(v, n);
}

/* check_change validates @e against the leader's state and builds the
 * changed configuration in @next. */
static int check_change(const struct raft *r, const struct raft_event *e,
                        struct raft_configuration *next)
{
    unsigned slot = raft_slot_of(r, e->change.id);
    const char *addr = e->change.address;
    struct raft_server *s;

    if (r->role != RAFT_LEADER) {
        return RAFT_NOTLEADER;
    }
    if (e->change.id == 0 || e->change.kind < RAFT_CHANGE_ADD ||
        e->change.kind > RAFT_CHANGE_UPDATE_ADDRESS) {
        return RAFT_INVALID;
    }
    /* Ongaro's fix of single-server changes (raft-dev, 2015): a new
     * leader's configuration may hold an entry of an earlier term that a
     * later leader does not; until an entry of this term commits, a
     * change could then overlap with none of it. */
    if (r->transfer_to != 0 || r->conf_index > r->commit ||
        log_term_at(&r->log, r->commit) != r->term) {
        return RAFT_BUSY;
    }
    *next = r->conf;
    if (e->change.kind == RAFT_CHANGE_ADD) {
        int rc;
        if (slot != RAFT_MAX_SERVERS ||
            (e->change.auto_promote && e->change.role != RAFT_LEARNER)) {
            return RAFT_INVALID;
        }
        rc = raft_configuration_add(next, e->change.id, e->change.role, addr);
        if (rc == 0) {
            next->servers[next->n - 1].auto_promote = e->change.auto_promote;
        }
        return rc;
    }
    if (slot == RAFT_MAX_SERVERS) {
        return RAFT_NOTFOUND;
    }
    s = &next->servers[slot];
    switch (e->change.kind) {
        case RAFT_CHANGE_REMOVE:
            if (s->role == RAFT_VOTER &&
                raft_configuration_n_voters(next) == 1) {
                return RAFT_INVALID;
            }
            return raft_configuration_remove(next, e->change.id);
        case RAFT_CHANGE_PROMOTE:
            if (s->role == RAFT_VOTER) {
                return RAFT_INVALID;
            }
            s->role = RAFT_VOTER;
            s->auto_promote = false;
            return 0;
        case RAFT_CHANGE_DEMOTE:
            if (s->role != RAFT_VOTER ||
                raft_configuration_n_voters(next) == 1) {
                return RAFT_INVALID;
            }
            s->role = RAFT_LEARNER;
            s->auto_promote = false;
            return 0;
        default:
            if (addr != NULL && strlen(addr) > RAFT_ADDRESS_MAX) {
                return RAFT_INVALID;
            }
            memset(s->address, 0, sizeof s->address);
            if (addr != NULL) {
                memcpy(s->address, addr, strlen(addr));
            }
            return 0;
    }
}

/* can_elect tells whether a majority of @next's voters is known to hold
 * a configuration: this leader, and the followers that acknowledged an
 * entry in its term (any log or snapshot holds one). A server without
 * one never votes (election.c, may_vote): made a voter before it received
 * anything (ADD of a voter, PROMOTE of a learner never reached), it could
 * leave a configuration that elects nobody, for good. */
static bool can_elect(const struct raft *r,
                      const struct raft_configuration *next)
{
    unsigned i, slot, n_voters = 0, n_known = 0;

    for (i = 0; i < next->n; i++) {
        if (next->servers[i].role != RAFT_VOTER) {
            continue;
        }
        n_voters++;
        slot = raft_slot_of(r, next->servers[i].id);
        if (next->servers[i].id == r->id ||
            (slot < RAFT_MAX_SERVERS && r->progress[slot].match > 0)) {
            n_known++;
        }
    }
    return n_known > n_voters / 2;
}

/* check_voters is check_change, and refuses (RAFT_BUSY) a change of the
 * voters (ADD of a voter, PROMOTE, DEMOTE, REMOVE of a voter) after which
 * they could elect nobody (can_elect). Invariant: a majority of the voters
 * of every configuration holds one, so that they can elect a leader. */
static int check_voters(const struct raft *r, const struct raft_event *e,
                        struct raft_configuration *next)
{
    uint8_t kind = e->change.kind;
    bool voters_change =
        kind == RAFT_CHANGE_PROMOTE || kind == RAFT_CHANGE_DEMOTE ||
        (kind == RAFT_CHANGE_ADD && e->change.role == RAFT_VOTER) ||
        (kind == RAFT_CHANGE_REMOVE &&
         raft_is_voter(r, raft_slot_of(r, e->change.id)));
    int rc = check_change(r, e, next);

    if (rc == 0 && voters_change && !can_elect(r, next)) {
        return RAFT_BUSY;
    }
    return rc;
}

int membership_check_change(const struct raft *r, const struct raft_event *e)
{
    struct raft_configuration next;

    return check_voters(r, e, &next);
}

int membership_change(struct raft *r, const struct raft_event *e,
                      raft_index *out_index)
{
    struct raft_configuration next;
    struct raft_buf *b = NULL;
    raft_index index;
    int rc;

    rc = check_voters(r, e, &next);
    if (rc != 0) {
        return rc;
    }
    rc = raft_configuration_encode_buf(&next, &b);
    if (rc != 0) {
        return rc;
    }
    index = log_append(&r->log, r->term, RAFT_ENTRY_CONFIG, b);
    raft_buf_unref(b);
    raft_mark_written(r, index);
    set_conf(r, &next, index);
    *out_index = index;
    return 0;
}

void membership_lead(struct raft *r)
{
    struct raft_configuration committed;
    raft_index at;
    unsigned i;

    memset(&r->leaving, 0, sizeof r->leaving);
    if (r->conf_index <= r->commit) {
        return;
    }
    latest_before(r, r->commit, &committed, &at);
    for (i = 0; i < committed.n; i++) {
        keep_leaving(r, &r->conf, &committed.servers[i], r->conf_index, NULL, 0,
                     &r->leaving);
    }
    if (r->leaving.servers.n > 0) {
        r->conf_changed = true;
    }
}

void membership_unlead(struct raft *r)
{
    if (r->leaving.servers.n > 0) {
        r->conf_changed = true;
    }
    memset(&r->leaving, 0, sizeof r->leaving);
}

/* drop_leaving stops tracking leaving server @i: the last one takes its
 * place, and its slot (with its window) goes to the spare ones. */
static void drop_leaving(struct raft *r, unsigned i)
{
    struct raft_leaving *l = &r->leaving;
    unsigned last = l->servers.n - 1;
    unsigned a = r->conf.n + i;
    unsigned b = r->conf.n + last;
    struct raft_peer_progress p = r->progress[a];
    int8_t vote = r->votes[a];
    bool active = r->active[a];

    r->progress[a] = r->progress[b];
    r->votes[a] = r->votes[b];
    r->active[a] = r->active[b];
    r->progress[b] = p;
    r->votes[b] = vote;
    r->active[b] = active;
    l->servers.servers[i] = l->servers.servers[last];
    l->index[i] = l->index[last];
    l->committed[i] = l->committed[last];
    l->committed_at[i] = l->committed_at[last];
    l->holds[i] = l->holds[last];
    l->servers.n--;
    r->conf_changed = true;
}

void membership_leaving_tick(struct raft *r)
{
    struct raft_leaving *l = &r->leaving;
    unsigned i = 0;

    while (i < l->servers.n) {
        const struct raft_peer_progress *p = &r->progress[r->conf.n + i];
        if (r->commit >= l->index[i] && !l->committed[i]) {
            l->committed[i] = true;
            l->committed_at[i] = r->now;
        }
        /* A server catching up towards its removal (its match rose, or a
         * snapshot is on its way: the only way it learns of a removal
         * compacted away) is kept an election timeout past its last
         * progress until it holds the removal; the commit index reaches
         * it with the next heartbeat. */
        if (!l->holds[i]) {
            if (p->last_progress > l->committed_at[i]) {
                l->committed_at[i] = p->last_progress;
            }
            l->holds[i] =
                p->state != RAFT_PROGRESS_SNAPSHOT && p->match >= l->index[i];
        }
        if (l->committed[i] && p->state != RAFT_PROGRESS_SNAPSHOT &&
            r->now - l->committed_at[i] >= r->election_timeout) {
            drop_leaving(r, i);
            continue;
        }
        i++;
    }
}

void membership_recall(struct raft *r, raft_id id)
{
    struct raft_leaving *l = &r->leaving;
    unsigned slot = raft_track_of(r, id);
    uint64_t max_seq = 1;
    uint64_t max_epoch = 0;
    unsigned k;

    if (r->role != RAFT_LEADER || id == r->id || id == 0) {
        return;
    }
    if (slot < r->conf.n) {
        return; /* a member */
    }
    if (slot < RAFT_MAX_SERVERS) {
        /* Leaving already: it has not learned yet, keep it longer. */
        k = slot - r->conf.n;
        if (l->committed[k]) {
            l->committed_at[k] = r->now;
        }
        return;
    }
    k = l->servers.n;
    if (r->conf.n + k >= RAFT_MAX_SERVERS ||
        raft_configuration_add(&l->servers, id, RAFT_VOTER, NULL) != 0) {
        return; /* no slot left: it asks again at its next timeout */
    }
    /* Its removal is committed as far as this leader knows (the
     * configuration in force, committed or not, leaves it out): the
     * window counts from now. It learns it from the entry that holds that
     * configuration, or from a snapshot past the compacted prefix whose
     * configuration is in force. */
    l->index[k] = r->conf_index != 0 ? r->conf_index : r->log.first - 1;
    l->committed[k] = true;
    l->committed_at[k] = r->now;
    l->holds[k] = false;
    slot = r->conf.n + k;
    progress_continuation(r, &max_seq, &max_epoch);
    /* Invariant: slot was spare (raft_n_slots); its window is allocated
     * and its vote and activity count for nothing. */
    progress_fresh(r, &r->progress[slot], max_seq, max_epoch);
    r->votes[slot] = 0;
    r->active[slot] = false;
    r->conf_changed = true;
    /* Tell it of this leader at once: it stops campaigning. */
    replication_heartbeat(r, slot);
}

void membership_after_step(struct raft *r)
{
    /* Thesis §4.2.2: a leader that is no voter of its configuration
     * leads, without counting itself, until that configuration commits;
     * then it steps down (it never campaigns again), handing over to an
     * up-to-date voter so that no election timeout is lost. */
    if (r->role == RAFT_LEADER && !raft_is_voter(r, r->self_slot) &&
        r->commit >= r->conf_index) {
        transfer_hand_over(r);
        election_become_follower(r, r->term, 0);
    }
}
