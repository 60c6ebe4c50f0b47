/* The process's subscribers to node events (events.h): a fixed table under
 * one mutex, copied out before the calls, so a subscriber runs with no lock
 * of ours held. */

#include "events.h"

#include <pthread.h>

#include "../../raft/err.h"

/* One subscriber. */
struct subscriber {
    ext_event_cb cb;
    void *arg;
};

static pthread_mutex_t subs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct subscriber subs[EXT_EVENTS_MAX]; /* n_subs of them (subs_mu) */
static unsigned n_subs;

int ext_events_subscribe(ext_event_cb cb, void *arg)
{
    int rc = 0;
    unsigned i;
    pthread_mutex_lock(&subs_mu);
    for (i = 0; i < n_subs; i++) {
        if (subs[i].cb == cb && subs[i].arg == arg) {
            break;
        }
    }
    if (i == n_subs) {
        if (n_subs == EXT_EVENTS_MAX) {
            rc = RAFT_NOMEM;
        } else {
            subs[n_subs++] = (struct subscriber){.cb = cb, .arg = arg};
        }
    }
    pthread_mutex_unlock(&subs_mu);
    return rc;
}

void ext_events_publish(int event)
{
    struct subscriber copy[EXT_EVENTS_MAX];
    unsigned n;
    pthread_mutex_lock(&subs_mu);
    n = n_subs;
    for (unsigned i = 0; i < n; i++) {
        copy[i] = subs[i];
    }
    pthread_mutex_unlock(&subs_mu);
    for (unsigned i = 0; i < n; i++) {
        copy[i].cb(event, copy[i].arg);
    }
}
