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

/* set_conf puts @next in force (held by entry @index, 0 for base) and
 * moves the per-server state of the servers kept to their new slots; a
 * new server's progress starts anew, probing after the last entry. */
static void set_conf(struct raft *r, const struct raft_configuration *next,
                     raft_index index)
{
    struct raft_peer_progress progress[RAFT_MAX_SERVERS];
    int8_t votes[RAFT_MAX_SERVERS];
    bool active[RAFT_MAX_SERVERS];
    bool used[RAFT_MAX_SERVERS];
    bool fresh[RAFT_MAX_SERVERS];
    unsigned j;
    unsigned k;

    r->conf_index = index;
    if (raft_configuration_equal(&r->conf, next)) {
        r->self_slot = raft_slot_of(r, r->id);
        return;
    }
    memset(used, 0, sizeof used);
    for (j = 0; j < next->n; j++) {
        int old = raft_configuration_find(&r->conf, next->servers[j].id);
        fresh[j] = old < 0;
        if (old >= 0) {
            progress[j] = r->progress[old];
            votes[j] = r->votes[old];
            active[j] = r->active[old];
            used[old] = true;
        }
    }
    /* The slots of removed servers (and the spare ones) hold allocated
     * windows: hand them to the new servers, then to the spare slots. */
    k = 0;
    for (j = 0; j < RAFT_MAX_SERVERS; j++) {
        if (j < next->n && !fresh[j]) {
            continue;
        }
        while (used[k]) {
            k++;
        }
        progress[j] = r->progress[k];
        used[k] = true;
        votes[j] = 0;
        active[j] = false;
        if (j < next->n) {
            /* Probe at the last entry: a new server answers at once
             * with its own last index. */
            raft_index last = log_last_index(&r->log);
            progress_reset(&progress[j], last > 0 ? last : 1, r->now);
            progress[j].round_target = last;
        }
    }
    memcpy(r->progress, progress, sizeof progress);
    memcpy(r->votes, votes, sizeof votes);
    memcpy(r->active, active, sizeof active);
    r->conf = *next;
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
        struct raft_buf *b = NULL;
        /* Valid exactly when encodable. */
        rc = raft_configuration_encode_buf(cfg->configuration, &b);
        if (rc != 0) {
            return rc;
        }
        raft_buf_unref(b);
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
        if (slot != RAFT_MAX_SERVERS) {
            return RAFT_INVALID;
        }
        return raft_configuration_add(next, e->change.id, e->change.role, addr);
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
            return 0;
        case RAFT_CHANGE_DEMOTE:
            if (s->role != RAFT_VOTER ||
                raft_configuration_n_voters(next) == 1) {
                return RAFT_INVALID;
            }
            s->role = RAFT_LEARNER;
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

int membership_check_change(const struct raft *r, const struct raft_event *e)
{
    struct raft_configuration next;

    return check_change(r, e, &next);
}

int membership_change(struct raft *r, const struct raft_event *e,
                      raft_index *out_index)
{
    struct raft_configuration next;
    struct raft_buf *b = NULL;
    raft_index index;
    int rc;

    rc = check_change(r, e, &next);
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

void membership_after_step(struct raft *r)
{
    /* Thesis §4.2.2: a leader that is no voter of its configuration
     * leads, without counting itself, until that configuration commits;
     * then it steps down (it never campaigns again). */
    if (r->role == RAFT_LEADER && !raft_is_voter(r, r->self_slot) &&
        r->commit >= r->conf_index) {
        election_become_follower(r, r->term, 0);
    }
}
