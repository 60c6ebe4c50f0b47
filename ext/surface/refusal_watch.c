/* The refusal watch (refusal_watch.h).
 *
 * Every EXT_REFUSAL_WATCH_MS the thread asks the guard, for each watched
 * file, whether reads of it are refused now; when they became refused
 * (or the stale notice beside the file was written anew: a node that
 * went fresh and stale again between two looks), every guarded
 * connection of the process is marked to have its statements expired
 * (ext_guard_expire_all), and the marked ones are retried at each period
 * until none is left (ext_guard_expire_retry: a busy connection is only
 * tried). When the settings notice beside a file is written anew (a
 * node's cluster-wide settings changed, or a node started), its
 * settings are pushed to the guarded connections of the file
 * (ext_guard_settings_push), again at each period while a busy
 * connection is left. With
 * nothing watched, the thread sleeps until a file is added. */

#include "refusal_watch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../runtime/attach_sock.h"
#include "guard.h"

/* One watched file. Only the thread frees entries (those with no
 * connection left), so it walks the list without the lock; others add at
 * the head and change refs, under the lock. */
struct watched {
    char *path;           /* the database file (immutable) */
    unsigned refs;        /* connections watching it (mu) */
    int refusal;          /* the guard's answer at the last look (thread) */
    int64_t stamp;        /* the stale notice's ctime then, ns (thread) */
    uint64_t allowed;     /* ext_guard_allowed_gen then (thread) */
    int64_t settings;     /* the settings notice's stamp when its
                             settings were pushed (thread) */
    bool settings_left;   /* a busy connection was left (thread) */
    struct watched *next; /* (set before the entry is published) */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake;   /* CLOCK_MONOTONIC, made at the first start */
static bool cond_made;        /* wake was initialised (mu) */
static struct watched *files; /* (mu for the head) */
static unsigned n_watched;    /* entries with refs > 0 (mu) */
static bool running;          /* the thread runs (mu) */
static bool quit;             /* the thread is to end (mu) */
static pthread_t thread;      /* (mu) */
static atomic_uint_least64_t looks; /* refusal_watch_looks */

uint64_t refusal_watch_looks(void)
{
    return atomic_load(&looks);
}

/* notice_stamp returns the ctime (ns) of the stale notice of @path, 0
 * when there is none. */
static int64_t notice_stamp(const char *path)
{
    char notice[4200];
    struct stat st;
    attach_sock_stale_path(path, notice, sizeof notice);
    if (notice[0] == '\0' || stat(notice, &st) != 0) {
        return 0;
    }
    return (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
}

/* push_settings sets the node's cluster-wide settings on the guarded
 * connections of @w's file when its settings notice was written anew
 * since the last push, or a busy connection was left then. Thread. */
static void push_settings(struct watched *w)
{
    int64_t stamp = attach_sock_settings_stamp(w->path);
    unsigned mask;
    if (stamp == 0 || (stamp == w->settings && !w->settings_left)) {
        return;
    }
    if (!attach_sock_settings(w->path, &mask)) {
        return; /* being replaced: the next period reads it */
    }
    w->settings = stamp;
    w->settings_left = ext_guard_settings_push(w->path, mask);
}

/* look asks the guard about every watched file; returns true when reads
 * of one became refused since the last look. Thread. */
static bool look(void)
{
    struct watched *head;
    bool turned = false;
    pthread_mutex_lock(&mu);
    head = files;
    pthread_mutex_unlock(&mu);
    for (struct watched *w = head; w != NULL; w = w->next) {
        char why[600];
        /* Read before the refusal: reads allowed after it show at the
         * next look. */
        uint64_t gen = ext_guard_allowed_gen(w->path);
        bool allowed = gen != w->allowed; /* since the last look */
        int refusal = ext_guard_read_refusal(w->path, why, sizeof why);
        int64_t stamp = refusal != 0 ? notice_stamp(w->path) : 0;
        if (refusal != 0 && (w->refusal == 0 || stamp != w->stamp || allowed)) {
            turned = true;
        }
        w->refusal = refusal;
        w->stamp = stamp;
        w->allowed = gen;
        push_settings(w);
    }
    return turned;
}

/* collect frees the entries no connection watches any more. Holding mu;
 * thread. */
static void collect(void)
{
    struct watched **p = &files;
    while (*p != NULL) {
        struct watched *w = *p;
        if (w->refs == 0) {
            *p = w->next;
            free(w->path);
            free(w);
        } else {
            p = &w->next;
        }
    }
}

static void *watch_main(void *arg)
{
    bool marked = false; /* connections it marked are left to expire */
    (void)arg;
    pthread_setname_np(pthread_self(), "raftsql-watch");
    pthread_mutex_lock(&mu);
    while (!quit) {
        struct timespec until;
        collect();
        if (n_watched == 0) {
            pthread_cond_wait(&wake, &mu);
            continue;
        }
        pthread_mutex_unlock(&mu);
        if (look()) {
            ext_guard_expire_all();
            marked = true;
        }
        atomic_fetch_add(&looks, 1);
        if (marked) {
            marked = ext_guard_expire_retry();
        }
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += EXT_REFUSAL_WATCH_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&mu);
        if (!quit) {
            (void)pthread_cond_timedwait(&wake, &mu, &until);
        }
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* Around fork(): the child has no thread (the next add starts one). */
static void fork_prepare(void)
{
    pthread_mutex_lock(&mu);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&mu);
}

static void fork_child(void)
{
    running = false;
    pthread_mutex_unlock(&mu);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_handlers(void)
{
    (void)pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* start starts the thread unless it runs. Holding mu. */
static void start(void)
{
    if (running) {
        return;
    }
    pthread_once(&fork_once, fork_handlers);
    if (!cond_made) {
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&wake, &attr);
        pthread_condattr_destroy(&attr);
        cond_made = true;
    }
    quit = false;
    running = pthread_create(&thread, NULL, watch_main, NULL) == 0;
}

void refusal_watch_add(const char *path)
{
    struct watched *w;
    if (path == NULL || path[0] == '\0') {
        return;
    }
    pthread_mutex_lock(&mu);
    for (w = files; w != NULL && strcmp(w->path, path) != 0; w = w->next) {
    }
    if (w == NULL && (w = calloc(1, sizeof *w)) != NULL) {
        if ((w->path = strdup(path)) == NULL) {
            free(w);
            w = NULL;
        } else {
            w->next = files;
            files = w;
        }
    }
    if (w != NULL) {
        if (w->refs++ == 0) {
            n_watched++;
        }
        start();
        pthread_cond_signal(&wake);
    }
    pthread_mutex_unlock(&mu);
}

void refusal_watch_remove(const char *path)
{
    if (path == NULL || path[0] == '\0') {
        return;
    }
    pthread_mutex_lock(&mu);
    for (struct watched *w = files; w != NULL; w = w->next) {
        if (w->refs > 0 && strcmp(w->path, path) == 0) {
            if (--w->refs == 0) {
                n_watched--;
            }
            break;
        }
    }
    pthread_mutex_unlock(&mu);
}

void refusal_watch_stop(void)
{
    pthread_t t;
    pthread_mutex_lock(&mu);
    if (!running) {
        pthread_mutex_unlock(&mu);
        return;
    }
    quit = true;
    pthread_cond_signal(&wake);
    t = thread;
    pthread_mutex_unlock(&mu);
    pthread_join(t, NULL);
    pthread_mutex_lock(&mu);
    running = false; /* only now: an add meanwhile starts no second one */
    pthread_mutex_unlock(&mu);
}
