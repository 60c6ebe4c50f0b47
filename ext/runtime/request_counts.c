/* Counters of refused, timed-out and forwarded requests
 * (request_counts.h). */

#include "request_counts.h"

#include <stddef.h>

static const char *const refusal_names[EXT_REFUSED_N] = {
    "invalid",  "too_big", "busy",      "log_full",      "removed",
    "diverged", "policy",  "wire_gate", "shutting_down", "other",
};

static const char *const timeout_names[EXT_TIMEOUT_N] = {
    "no_leader",
    "lease",
    "unanswered",
};

static const char *const forward_names[EXT_FORWARD_N] = {
    "first",
    "again",
};

static void add(atomic_uint_least64_t *counters, int n, int reason)
{
    if (reason >= 0 && reason < n) {
        atomic_fetch_add_explicit(&counters[reason], 1, memory_order_relaxed);
    }
}

void request_counts_refused(struct ext_request_counts *c, int reason)
{
    add(c->refused, EXT_REFUSED_N, reason);
}

void request_counts_timed_out(struct ext_request_counts *c, int reason)
{
    add(c->timed_out, EXT_TIMEOUT_N, reason);
}

void request_counts_forwarded(struct ext_request_counts *c, int reason)
{
    add(c->forwarded, EXT_FORWARD_N, reason);
}

void request_counts_read(struct ext_request_counts *c,
                         struct ext_request_tally *out)
{
    for (int i = 0; i < EXT_REFUSED_N; i++) {
        out->refused[i] =
            atomic_load_explicit(&c->refused[i], memory_order_relaxed);
    }
    for (int i = 0; i < EXT_TIMEOUT_N; i++) {
        out->timed_out[i] =
            atomic_load_explicit(&c->timed_out[i], memory_order_relaxed);
    }
    for (int i = 0; i < EXT_FORWARD_N; i++) {
        out->forwarded[i] =
            atomic_load_explicit(&c->forwarded[i], memory_order_relaxed);
    }
}

static const char *name(const char *const *names, int n, int reason)
{
    return reason >= 0 && reason < n ? names[reason] : "";
}

const char *request_counts_refusal_name(int reason)
{
    return name(refusal_names, EXT_REFUSED_N, reason);
}

const char *request_counts_timeout_name(int reason)
{
    return name(timeout_names, EXT_TIMEOUT_N, reason);
}

const char *request_counts_forward_name(int reason)
{
    return name(forward_names, EXT_FORWARD_N, reason);
}
