/* The attach socket's path, connections and frames (attach_conn.h). */

#include "attach_conn.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "../../raft/err.h"

/* own_dir makes directory @dir (mode @mode, group @group or -1) or checks
 * that the one there is ours: a directory, not a symlink, of our user,
 * with exactly that mode and group. */
static int own_dir(const char *dir, mode_t mode, gid_t group, char *errmsg,
                   size_t errmsg_len)
{
    struct stat st;
    if (mkdir(dir, mode) == 0) {
        if ((group != (gid_t)-1 && chown(dir, (uid_t)-1, group) != 0) ||
            chmod(dir, mode) != 0) {
            snprintf(errmsg, errmsg_len, "socket directory %s: %s", dir,
                     strerror(errno));
            return RAFT_IOERR;
        }
    } else if (errno != EEXIST) {
        snprintf(errmsg, errmsg_len, "socket directory %s: mkdir: %s", dir,
                 strerror(errno));
        return RAFT_IOERR;
    }
    if (lstat(dir, &st) != 0) {
        snprintf(errmsg, errmsg_len, "socket directory %s: %s", dir,
                 strerror(errno));
        return RAFT_IOERR;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 07777) != mode ||
        (group != (gid_t)-1 && st.st_gid != group)) {
        char want_group[48] = "";
        if (group != (gid_t)-1) {
            snprintf(want_group, sizeof want_group,
                     ", group %ld (socket_group)", (long)group);
        }
        snprintf(errmsg, errmsg_len,
                 "socket directory %s is not ours: found %s of uid %ld, "
                 "group %ld, mode %04o; wanted a directory of uid %ld, mode "
                 "%04o%s: remove it",
                 dir,
                 S_ISDIR(st.st_mode)   ? "a directory"
                 : S_ISLNK(st.st_mode) ? "a symlink"
                                       : "a file",
                 (long)st.st_uid, (long)st.st_gid,
                 (unsigned)(st.st_mode & 07777), (long)geteuid(),
                 (unsigned)mode, want_group);
        return RAFT_IOERR;
    }
    return 0;
}

int attach_conn_path(const char *db_path, const char *dir, gid_t group,
                     char out[EXT_ATTACH_PATH_MAX], char *errmsg,
                     size_t errmsg_len)
{
    char base[64];
    int n, rc;
    if (group == (gid_t)-1) {
        n = snprintf(out, EXT_ATTACH_PATH_MAX, "%s/node.sock", dir);
        if (n > 0 && n < EXT_ATTACH_PATH_MAX) {
            return 0;
        }
        snprintf(base, sizeof base, "/tmp/raftsql-%ld", (long)geteuid());
        rc = own_dir(base, 0700, group, errmsg, errmsg_len);
    } else {
        snprintf(base, sizeof base, "/tmp/raftsql-%ld-g%ld", (long)geteuid(),
                 (long)group);
        rc = own_dir(base, 0750, group, errmsg, errmsg_len);
    }
    if (rc == 0) {
        snprintf(out, EXT_ATTACH_PATH_MAX, "%s/%016" PRIx64 ".sock", base,
                 (uint64_t)XXH64(db_path, strlen(db_path), 0));
    }
    return rc;
}

int attach_conn_connect(const char *path, int *out_fd, char *errmsg,
                        size_t errmsg_len)
{
    struct sockaddr_un sa;
    int fd;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(errmsg, errmsg_len, "socket path %s is too long", path);
        return RAFT_IOERR;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(errmsg, errmsg_len, "socket: %s", strerror(errno));
        return RAFT_IOERR;
    }
    while (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        if (e == EINTR) {
            continue;
        }
        close(fd);
        snprintf(errmsg, errmsg_len, "connect %s: %s", path, strerror(e));
        return e == ECONNREFUSED || e == ENOENT ? RAFT_NOCONN : RAFT_IOERR;
    }
    *out_fd = fd;
    return 0;
}

int attach_conn_frame_write(int fd, const char *data, size_t len)
{
    unsigned char hdr[4];
    struct iovec iov[2];
    struct msghdr m;
    size_t done = 0, total = len + 4;
    if (len > EXT_ATTACH_FRAME_MAX) {
        return RAFT_TOOBIG;
    }
    hdr[0] = (unsigned char)len;
    hdr[1] = (unsigned char)(len >> 8);
    hdr[2] = (unsigned char)(len >> 16);
    hdr[3] = (unsigned char)(len >> 24);
    while (done < total) {
        ssize_t w;
        memset(&m, 0, sizeof m);
        if (done < 4) {
            iov[0].iov_base = hdr + done;
            iov[0].iov_len = 4 - done;
            iov[1].iov_base = (void *)data;
            iov[1].iov_len = len;
            m.msg_iovlen = 2;
        } else {
            iov[0].iov_base = (void *)(data + (done - 4));
            iov[0].iov_len = total - done;
            m.msg_iovlen = 1;
        }
        m.msg_iov = iov;
        w = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w < 0) {
            return errno == EPIPE || errno == ECONNRESET ? RAFT_NOCONN
                                                         : RAFT_IOERR;
        }
        done += (size_t)w;
    }
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* read_full reads @len bytes into @p before @deadline (-1: none). */
static int read_full(int fd, void *p, size_t len, int64_t deadline,
                     const struct ext_exec_probe *probe)
{
    size_t done = 0;
    while (done < len) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int wait = EXT_EXEC_POLL_MS, r;
        ssize_t got;
        if (probe == NULL && deadline < 0) {
            wait = -1;
        }
        if (deadline >= 0) {
            int64_t left = deadline - now_ms();
            if (left <= 0) {
                return RAFT_TIMEOUT;
            }
            if (wait < 0 || left < wait) {
                wait = (int)left;
            }
        }
        r = poll(&pfd, 1, wait);
        if (r < 0 && errno != EINTR) {
            return RAFT_IOERR;
        }
        if (r <= 0) {
            if (probe != NULL && probe->interrupted(probe->data)) {
                return RAFT_CANCELED;
            }
            continue;
        }
        got = read(fd, (char *)p + done, len - done);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (got < 0) {
            return errno == ECONNRESET ? RAFT_NOCONN : RAFT_IOERR;
        }
        if (got == 0) {
            return RAFT_NOCONN;
        }
        done += (size_t)got;
    }
    return 0;
}

int attach_conn_frame_read(int fd, int timeout_ms,
                           const struct ext_exec_probe *probe, char **out,
                           size_t *out_len)
{
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    unsigned char hdr[4];
    uint32_t len;
    char *buf;
    int rc = read_full(fd, hdr, 4, deadline, probe);
    if (rc != 0) {
        return rc;
    }
    len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
          (uint32_t)hdr[3] << 24;
    if (len > EXT_ATTACH_FRAME_MAX) {
        return RAFT_TOOBIG;
    }
    buf = malloc((size_t)len + 1);
    if (buf == NULL) {
        return RAFT_NOMEM;
    }
    rc = read_full(fd, buf, len, deadline, probe);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    return 0;
}
