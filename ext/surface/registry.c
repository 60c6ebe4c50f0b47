/* The process-wide table of running nodes (see registry.h). A short list
 * under one mutex: a process runs a handful of nodes at most. */

#include "registry.h"

#include "../runtime/attach_sock.h"
#include "attach_conn.h"
#include "attach_server.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/applier.h"
#include "../runtime/staleness.h"

struct slot {
    char path[4096];                 /* database file */
    struct ext_node *node;           /* the node, NULL while starting */
    struct ext_attach_server *serve; /* its socket, NULL when socket=off */
    unsigned refs;                   /* references from ext_registry_acquire */
    bool stopping;                   /* ext_registry_stop is waiting for refs */
    struct slot *next;
};

/* Database files a node ran on in this process: they stay guarded after
 * raft_stop, so a direct write cannot slip in between a stop and a
 * restart. */
struct known {
    char path[4096];
    struct known *next;
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct known *known_files;
static pthread_cond_t reg_cond = PTHREAD_COND_INITIALIZER;
static struct slot *slots;
/* How many slots there are (written under reg_mu): none, and
 * ext_registry_running answers without the lock, as the guard asks for
 * every column a statement reads. */
static atomic_uint n_slots;

/* elsewhere says whether a node of another process serves @path (its
 * pointer file names a live process whose socket answers), writing the
 * refusal of a second start into @errmsg. */
static bool elsewhere(const char *path, char *errmsg, size_t errmsg_len)
{
    struct ext_attach_pointer p;
    char why[256];
    int fd = -1;
    if (attach_sock_find(path, &p) != 0) {
        return false;
    }
    if (attach_conn_connect(p.socket, &fd, why, sizeof why) == RAFT_NOCONN) {
        /* A stale pointer file (its pid lives on in another process):
         * gone, also when this node writes none (socket=off). */
        attach_sock_pointer_remove(path, p.pid);
        return false;
    }
    if (fd >= 0) {
        close(fd);
    }
    snprintf(errmsg, errmsg_len,
             "a raftsql node already runs for %.3000s in process %ld (socket "
             "%s); this process writes through it: call raft_exec() and the "
             "other functions without raft_start",
             path, p.pid, p.socket);
    return true;
}

static struct slot *find(const char *path)
{
    for (struct slot *s = slots; s != NULL; s = s->next) {
        if (strcmp(s->path, path) == 0) {
            return s;
        }
    }
    return NULL;
}

static void unlink_slot(struct slot *victim)
{
    struct slot **p = &slots;
    while (*p != victim) {
        p = &(*p)->next;
    }
    *p = victim->next;
    atomic_fetch_sub(&n_slots, 1);
}

int ext_registry_start(const char *path, const struct ext_config *cfg,
                       ext_attach_conn_cb conn_init, char *errmsg,
                       size_t errmsg_len)
{
    struct slot *s;
    struct ext_node *n;
    int rc;

    pthread_mutex_lock(&reg_mu);
    if (find(path) != NULL) {
        pthread_mutex_unlock(&reg_mu);
        snprintf(errmsg, errmsg_len,
                 "a node already runs for %s in this process (raft_stop() "
                 "first)",
                 path);
        return RAFT_BUSY;
    }
    if (elsewhere(path, errmsg, errmsg_len)) {
        pthread_mutex_unlock(&reg_mu);
        return RAFT_BUSY;
    }
    s = calloc(1, sizeof *s);
    if (s == NULL) {
        pthread_mutex_unlock(&reg_mu);
        snprintf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    snprintf(s->path, sizeof s->path, "%s", path);
    s->next = slots;
    slots = s; /* reserved: node NULL while starting */
    atomic_fetch_add(&n_slots, 1);
    pthread_mutex_unlock(&reg_mu);

    rc = ext_node_start(path, cfg, &n, errmsg, errmsg_len);
    if (rc == 0 && cfg->socket) {
        rc = attach_server_start(path, cfg, n, conn_init, &s->serve, errmsg,
                                 errmsg_len);
        if (rc != 0) {
            ext_node_shutdown(n);
            ext_node_discard(n); /* a failed start leaves nothing */
        }
    }

    pthread_mutex_lock(&reg_mu);
    if (rc != 0) {
        unlink_slot(s);
        free(s);
    } else {
        struct known *k;
        s->node = n;
        for (k = known_files; k != NULL; k = k->next) {
            if (strcmp(k->path, path) == 0) {
                break;
            }
        }
        if (k == NULL && (k = calloc(1, sizeof *k)) != NULL) {
            snprintf(k->path, sizeof k->path, "%s", path);
            k->next = known_files;
            known_files = k;
        }
    }
    pthread_mutex_unlock(&reg_mu);
    return rc;
}

struct ext_node *ext_registry_acquire(const char *path)
{
    struct ext_node *n = NULL;
    pthread_mutex_lock(&reg_mu);
    struct slot *s = find(path);
    if (s != NULL && s->node != NULL && !s->stopping) {
        s->refs++;
        n = s->node;
    }
    pthread_mutex_unlock(&reg_mu);
    return n;
}

void ext_registry_release(struct ext_node *n)
{
    pthread_mutex_lock(&reg_mu);
    for (struct slot *s = slots; s != NULL; s = s->next) {
        if (s->node == n) {
            s->refs--;
            if (s->refs == 0) {
                pthread_cond_broadcast(&reg_cond);
            }
            break;
        }
    }
    pthread_mutex_unlock(&reg_mu);
}

bool ext_registry_running(const char *path)
{
    bool running;
    if (atomic_load(&n_slots) == 0) {
        return false;
    }
    pthread_mutex_lock(&reg_mu);
    running = find(path) != NULL;
    pthread_mutex_unlock(&reg_mu);
    return running;
}

bool ext_registry_replica(const char *path)
{
    bool known = false;
    pthread_mutex_lock(&reg_mu);
    known = find(path) != NULL;
    for (struct known *k = known_files; k != NULL && !known; k = k->next) {
        known = strcmp(k->path, path) == 0;
    }
    pthread_mutex_unlock(&reg_mu);
    return known;
}

/* ask_node returns what @ask says of the node running for @path (false
 * when none runs), with why in @why (@why_len bytes). */
static bool ask_node(const char *path,
                     bool (*ask)(struct ext_node *, char *, size_t), char *why,
                     size_t why_len)
{
    struct ext_node *n = ext_registry_acquire(path);
    bool yes;
    if (n == NULL) {
        return false;
    }
    yes = ask(n, why, why_len);
    ext_registry_release(n);
    return yes;
}

bool ext_registry_diverged(const char *path, char *why, size_t why_len)
{
    return applier_any_diverged() &&
           ask_node(path, ext_node_diverged, why, why_len);
}

bool ext_registry_stale(const char *path, char *why, size_t why_len)
{
    return staleness_any() && ask_node(path, ext_node_stale, why, why_len);
}

/* stop_slot stops @s's node; called with reg_mu held, returns with it
 * held. */
static void stop_slot(struct slot *s)
{
    struct ext_node *n = s->node;
    s->stopping = true;
    pthread_mutex_unlock(&reg_mu);
    ext_node_shutdown(n);
    /* Calls of other processes end now (shutting down) and answer; their
     * threads join before the node stops. */
    attach_server_stop(s->serve);
    s->serve = NULL;
    pthread_mutex_lock(&reg_mu);
    while (s->refs > 0) {
        pthread_cond_wait(&reg_cond, &reg_mu);
    }
    pthread_mutex_unlock(&reg_mu);
    ext_node_stop(n);
    pthread_mutex_lock(&reg_mu);
    unlink_slot(s);
    free(s);
}

int ext_registry_stop(const char *path)
{
    pthread_mutex_lock(&reg_mu);
    struct slot *s = find(path);
    if (s == NULL || s->node == NULL || s->stopping) {
        pthread_mutex_unlock(&reg_mu);
        return RAFT_NOTFOUND;
    }
    stop_slot(s);
    pthread_mutex_unlock(&reg_mu);
    return 0;
}

void ext_registry_stop_all(void)
{
    while (known_files != NULL) {
        struct known *k = known_files;
        known_files = k->next;
        free(k);
    }
    pthread_mutex_lock(&reg_mu);
    for (;;) {
        struct slot *s = slots;
        while (s != NULL && (s->node == NULL || s->stopping)) {
            s = s->next;
        }
        if (s == NULL) {
            break;
        }
        stop_slot(s);
    }
    pthread_mutex_unlock(&reg_mu);
}
