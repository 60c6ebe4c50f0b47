/* A busy timeout that counts raftsql's own waits (busy_clock.h). */

#include "busy_clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include <sqlite3ext.h>

SQLITE_EXTENSION_INIT3

/* What this thread waited for raftsql and SQLite's busy handler has not
 * slept less for yet, ns. */
static _Thread_local int64_t owed;
/* When this thread was last owed something, CLOCK_MONOTONIC ns. */
static _Thread_local int64_t owed_at;
/* This thread slept through the wrapped xSleep since it last forgot. */
static _Thread_local bool slept;

/* How long what is owed stays owed, ms: a busy handler sleeps right
 * after the try that waited (at most 100 ms later, SQLite's longest
 * step); what a statement left owed, untracked to its end, is not taken
 * from another's sleeps long after. */
#define BUSY_CLOCK_FRESH_MS 1000

/* The wrapped VFS's own xSleep, set before the wrap is stored. */
static _Atomic(int (*)(sqlite3_vfs *, int)) own_sleep;
static pthread_once_t installed = PTHREAD_ONCE_INIT;

int busy_clock_take(int64_t *owed_ns, int us)
{
    int64_t want = (int64_t)us * 1000;

    if (us <= 0 || us % 1000 != 0 || *owed_ns <= 0) {
        return us;
    }
    if (*owed_ns >= want) {
        *owed_ns -= want;
        return 0;
    }
    want -= *owed_ns;
    *owed_ns = 0;
    return (int)(want / 1000);
}

/* mono_ns returns CLOCK_MONOTONIC now, ns. */
static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* owed_sleep is the wrapped VFS's xSleep: @us less what this thread is
 * owed (busy_clock_take), what was owed more than BUSY_CLOCK_FRESH_MS
 * ago forgotten first. Returns the microseconds asked for, as the
 * unix VFS does (SQLite's busy handler ignores it). */
static int owed_sleep(sqlite3_vfs *vfs, int us)
{
    int (*base)(sqlite3_vfs *, int) = atomic_load(&own_sleep);
    int left;

    if (owed > 0 && mono_ns() - owed_at > BUSY_CLOCK_FRESH_MS * 1000000LL) {
        owed = 0;
    }
    left = busy_clock_take(&owed, us);
    if (us > 0 && us % 1000 == 0) {
        slept = true;
    }
    if (left > 0) {
        base(vfs, left);
    }
    return us;
}

static void install(void)
{
    sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);

    if (vfs == NULL || vfs->xSleep == NULL || vfs->xSleep == owed_sleep) {
        return;
    }
    atomic_store(&own_sleep, vfs->xSleep);
    vfs->xSleep = owed_sleep;
}

void busy_clock_install(void)
{
    pthread_once(&installed, install);
}

void busy_clock_owe(int64_t ns)
{
    if (ns > 0) {
        owed += ns;
        owed_at = mono_ns();
    }
}

void busy_clock_forget(void)
{
    owed = 0;
    slept = false;
}

bool busy_clock_ahead(void)
{
    return slept && owed > 0;
}

int64_t busy_clock_owed(void)
{
    return owed;
}
