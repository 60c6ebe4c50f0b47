/* Where the attach socket of a node is, and what a node keeps beside its
 * database for the other processes of the machine: the pointer file
 * ("<db>-raftsql": pid and socket path) and the notices (diverged, stale,
 * settings, bound). Talking on the socket is attach_conn.h. */

#ifndef EXT_ATTACH_SOCK_H
#define EXT_ATTACH_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Longest socket path, with its NUL (sun_path). */
#define EXT_ATTACH_PATH_MAX 108

/* What the pointer file says. */
struct ext_attach_pointer {
    long pid;                         /* the node's process */
    char socket[EXT_ATTACH_PATH_MAX]; /* its socket */
    unsigned timeout_ms;              /* its exec_timeout_ms */
    unsigned version;                 /* the attach protocol its socket
                                         speaks (surface/attach_codec.h:
                                         EXT_ATTACH_VERSION); 1 when the
                                         file does not say (an older
                                         release) */
};

/* attach_sock_diverged_path writes "<@db_path>-raftsql-diverged" into
 * @out (@len bytes; "" when it does not fit): the notice a node writes
 * beside its database while it runs diverged (ext/runtime/applier.c), for the
 * guards of other processes. Any thread. */
void attach_sock_diverged_path(const char *db_path, char *out, size_t len);

/* attach_sock_diverged says whether a node of another process serves
 * @db_path and runs diverged (its notice exists and its pointer file names
 * a live process); @why (@why_len bytes) gets the notice's reason. A
 * single stat() when no notice exists. Any thread. */
bool attach_sock_diverged(const char *db_path, char *why, size_t why_len);

/* attach_sock_stale_path writes "<@db_path>-raftsql-stale" into @out
 * (@len bytes; "" when too long): the notice a node keeps beside its
 * database while it is a stale replica (ext/runtime/staleness.c). */
void attach_sock_stale_path(const char *db_path, char *out, size_t len);

/* attach_sock_stale says whether a node of another process serves
 * @db_path and is a stale replica now (its notice exists and its pointer
 * file names a live process), and then copies the notice's reason into
 * @why (@why_len bytes). Any thread. */
bool attach_sock_stale(const char *db_path, char *why, size_t why_len);

/* attach_sock_settings_path writes "<@db_path>-raftsql-settings" into
 * @out (@len bytes; "" when too long): the notice a running node keeps
 * beside its database with the cluster-wide settings in force (PRAGMA
 * foreign_keys=ON and the others of sql_setting_name), which the guards
 * of every process set on their connections to that file (guard.h).
 * Any thread. */
void attach_sock_settings_path(const char *db_path, char *out, size_t len);

/* attach_sock_settings_write writes the settings notice @path holding
 * @mask (bit i: sql_setting_name(i) ON), atomically, not fsynced (a
 * crash loses it with the node that keeps it). Returns false with errno
 * set on failure (nothing is left behind). Any thread. */
bool attach_sock_settings_write(const char *path, unsigned mask);

/* attach_sock_settings reads the settings notice of @db_path: returns
 * true with its settings in *@out_mask (bit i: sql_setting_name(i) ON;
 * a setting it does not name is OFF), false when there is none or it is
 * malformed. A failed open() alone when there is none. Any thread. */
bool attach_sock_settings(const char *db_path, unsigned *out_mask);

/* attach_sock_settings_stamp returns a value that changes whenever the
 * settings notice of @db_path is written anew (its inode and ctime), 0
 * when there is none: one stat(). Any thread. */
int64_t attach_sock_settings_stamp(const char *db_path);

/* attach_sock_bound_path writes "<@db_path>-raftsql-bound" into @out
 * (@len bytes; "" when too long): the marker a node started with
 * max_staleness_ms= keeps beside its database, after it stops too, until
 * a start without the bound (ext/runtime/staleness.c). Any thread. */
void attach_sock_bound_path(const char *db_path, char *out, size_t len);

/* attach_sock_unserved says whether reads of @db_path are bound
 * (a node last started on it with max_staleness_ms=, its bound marker
 * says) while no node serves it: the marker names no process (the node
 * stopped) or one that is gone (killed), or one that has not published
 * its pointer file yet (it is starting: its stale notice counts only
 * from then on), or the node's heartbeat stopped (the process is stopped
 * by SIGSTOP, or a zombie): the marker's mtime is further than
 * EXT_BOUND_SILENCE_MS from this wall clock. Then @why (@why_len bytes)
 * gets "stale replica: no raftsql node serves ...", "stale replica: the
 * node serving ... is starting ..." or "stale replica: the node serving
 * ... showed no sign of life ...". A single stat() when no marker
 * exists. Any thread. */
bool attach_sock_unserved(const char *db_path, char *why, size_t why_len);

/* attach_sock_find reads the pointer file of database file @db_path into
 * @out (its version 1 when the file names none: a node of an older
 * release). Returns 0 when it names a process that lives (it may still refuse
 * connections: attach_conn_connect tells), RAFT_NOTFOUND when there is no
 * pointer file, it is malformed, or its process is gone (a stale file).
 * Any thread. */
int attach_sock_find(const char *db_path, struct ext_attach_pointer *out);

/* attach_sock_pointer_write writes @p as the pointer file of @db_path
 * (four lines an older release reads, then the version line it skips),
 * atomically (a temporary file renamed over it), mode 0644: it holds no
 * secret, and every process that may read the database may learn that
 * it is served. Nothing is left behind on failure (the previous pointer
 * file, if any, stays). Errors, with @errmsg naming the file and the
 * cause: RAFT_NOSPACE when its file system is full (ENOSPC, EDQUOT: a
 * retry may succeed once space frees), RAFT_IOERR for any other
 * failure. Any thread. */
int attach_sock_pointer_write(const char *db_path,
                              const struct ext_attach_pointer *p, char *errmsg,
                              size_t errmsg_len);

/* attach_sock_pointer_remove removes the pointer file of @db_path when it
 * names process @pid (not one a later node wrote). Any thread. */
void attach_sock_pointer_remove(const char *db_path, long pid);

#endif /* EXT_ATTACH_SOCK_H */
