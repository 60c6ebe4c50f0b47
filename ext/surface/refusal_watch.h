/* The refusal watch: a thread per process that expires the prepared
 * statements of the guarded connections when the guard starts refusing
 * reads of their database file (ext_guard_read_refusal), in a process
 * with no node of its own for that file: a stale notice appears beside
 * it, or the node that served a file bound by max_staleness_ms stops or
 * dies. The node's loop thread does the same for its own file
 * (staleness.h); this covers attached clients (attach_client.h), where a
 * statement prepared while reads were allowed would go on reading. */

#ifndef EXT_REFUSAL_WATCH_H
#define EXT_REFUSAL_WATCH_H

#include <stdint.h>

/* Period of the watch, ms: a statement prepared before the guard began
 * refusing is expired at most this long (plus a busy connection's
 * statement) after. */
#define EXT_REFUSAL_WATCH_MS 10

/* refusal_watch_add watches database file @path (copied; "" and NULL are
 * ignored) for one more connection, starting the thread at the first
 * call. Out of memory, or a thread that cannot start, leaves it
 * unwatched (its statements are then refused when prepared, not
 * expired). Any thread. */
void refusal_watch_add(const char *path);

/* refusal_watch_remove undoes one refusal_watch_add of @path. Any
 * thread, also one holding a connection's mutex (it takes only the
 * watch's own lock). */
void refusal_watch_remove(const char *path);

/* refusal_watch_stop ends the thread and waits for it (at unload or
 * exit; a later refusal_watch_add starts it again). Any thread but the
 * watch's own, holding no connection's mutex. */
void refusal_watch_stop(void);

/* refusal_watch_looks returns how many times the thread has asked the
 * guard about every watched file since the process started (tests wait
 * for it to move, so that they know a look saw what they set). Any
 * thread. */
uint64_t refusal_watch_looks(void);

#endif /* EXT_REFUSAL_WATCH_H */
