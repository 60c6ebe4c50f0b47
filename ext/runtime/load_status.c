/* A node's latest load (load_status.h): one mutex over the progress. */

#include "load_status.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../raft/err.h"

struct ext_load_status {
    pthread_mutex_t mu;                /* guards the two below */
    bool any;                          /* a load ran (p is valid) */
    struct ext_load_progress progress; /* the latest load's */
};

int load_status_new(struct ext_load_status **out)
{
    struct ext_load_status *s = calloc(1, sizeof *s);
    if (s == NULL) {
        return RAFT_NOMEM;
    }
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return 0;
}

void load_status_free(struct ext_load_status *s)
{
    if (s == NULL) {
        return;
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

bool load_status_get(struct ext_load_status *s, struct ext_load_progress *out)
{
    bool any;
    pthread_mutex_lock(&s->mu);
    any = s->any;
    if (any) {
        *out = s->progress;
    }
    pthread_mutex_unlock(&s->mu);
    return any;
}

void load_status_publish(struct ext_load_status *s,
                         const struct ext_load_progress *p)
{
    pthread_mutex_lock(&s->mu);
    s->progress = *p;
    pthread_mutex_unlock(&s->mu);
}

int load_status_begin(struct ext_load_status *s, const char *path,
                      struct ext_load_progress *p, char *errmsg,
                      size_t errmsg_len)
{
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    if (s->any && s->progress.state == EXT_LOAD_RUNNING) {
        snprintf(errmsg, errmsg_len,
                 "a load of %s runs on this node: one at a time",
                 s->progress.path);
        rc = RAFT_BUSY;
    } else {
        memset(p, 0, sizeof *p);
        snprintf(p->path, sizeof p->path, "%s", path);
        p->state = EXT_LOAD_RUNNING;
        s->progress = *p;
        s->any = true;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}
