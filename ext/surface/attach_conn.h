/* Talking on the attach socket of a node (attach_sock.h says where it
 * is): the socket's path (in the log directory, or a short per-user
 * directory when that path is over sun_path's 108 bytes), connecting, and
 * the frames (a 4-byte little-endian length, then that many bytes of
 * JSON). */

#ifndef EXT_ATTACH_CONN_H
#define EXT_ATTACH_CONN_H

#include <stddef.h>
#include <sys/types.h>

#include "../runtime/attach_sock.h"
#include "../runtime/exec.h"

/* Longest frame either side accepts, bytes: a larger length closes the
 * connection. Three times the default max_request_bytes: a request of
 * that size in blobs, in hex, fits with room for its JSON. */
#define EXT_ATTACH_FRAME_MAX (192u * 1024 * 1024)

/* How much longer than the node's exec_timeout_ms a client waits for the
 * answer to a call that reached the node, ms: a call of tens of MiB first
 * takes seconds to pass through the socket. */
#define EXT_ATTACH_GRACE_MS 10000

/* attach_conn_path chooses the socket path of the node of @db_path whose
 * log directory is @dir: "<dir>/node.sock" when it fits and @group is -1,
 * else "/tmp/raftsql-<uid>/<hash>.sock" (a directory of mode 0700, made
 * when missing), or with a group "/tmp/raftsql-<uid>-g<gid>/<hash>.sock"
 * (mode 0750, that group), <hash> a hash of @db_path. Writes @out. Errors:
 * RAFT_IOERR with @errmsg: the directory cannot be made, or is not ours
 * (another owner, a symlink, other permissions). Any thread. */
int attach_conn_path(const char *db_path, const char *dir, gid_t group,
                     char out[EXT_ATTACH_PATH_MAX], char *errmsg,
                     size_t errmsg_len);

/* attach_conn_connect connects to the socket at @path and writes the
 * descriptor (close-on-exec) into *@out_fd. Errors: RAFT_NOCONN when no
 * one listens there (refused, or no socket: a stale pointer file),
 * RAFT_IOERR with @errmsg for any other failure (permission denied...).
 * Any thread. */
int attach_conn_connect(const char *path, int *out_fd, char *errmsg,
                        size_t errmsg_len);

/* attach_conn_frame_write writes one frame of @len bytes @data to @fd
 * (never raising SIGPIPE). Errors: RAFT_TOOBIG (over EXT_ATTACH_FRAME_MAX),
 * RAFT_NOCONN (the other end closed), RAFT_IOERR. Any thread. */
int attach_conn_frame_write(int fd, const char *data, size_t len);

/* attach_conn_frame_read reads one frame from @fd into *@out (malloc'd,
 * NUL-terminated, the caller frees it) and *@out_len, waiting at most
 * @timeout_ms (-1: no bound) and asking @probe (may be NULL) every
 * EXT_EXEC_POLL_MS whether its caller was interrupted. Errors: RAFT_NOCONN
 * (end of file before a whole frame), RAFT_TOOBIG (a length over
 * EXT_ATTACH_FRAME_MAX), RAFT_TIMEOUT, RAFT_CANCELED (interrupted),
 * RAFT_IOERR, RAFT_NOMEM. Any thread. */
int attach_conn_frame_read(int fd, int timeout_ms,
                           const struct ext_exec_probe *probe, char **out,
                           size_t *out_len);

#endif /* EXT_ATTACH_CONN_H */
