/* raft_backup()'s copy (backup.h).
 *
 * Happy path: the target is checked (absent, in a directory that exists),
 * the replica is copied with sql_snapshot_write (VACUUM INTO on a
 * read-only connection: one read transaction, so one applied index; the
 * writers go on meanwhile), fsynced, checked against the running checksum
 * stored in it (ext_node_copy_check), and described in JSON.
 * Failure modes: a refused target changes nothing; a failed copy removes
 * what it wrote (sql_snapshot_write); a copy that differs from the running
 * checksum is removed and marks the replica diverged; the replica is only
 * read. */

#include "backup.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "../../raft/err.h"
#include "../../sql/sql.h"
#include "../runtime/node.h"

/* absolute_dir writes into @out (@len bytes) the directory of @target,
 * resolved (realpath), and sets *@out_base to @target's last component. */
static int absolute_dir(const char *target, char *out, size_t len,
                        const char **out_base, char *errmsg, size_t errmsg_len)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(target, '/');
    struct stat st;
    char *real;

    if (slash == NULL) {
        snprintf(dir, sizeof dir, ".");
        *out_base = target;
    } else if (slash == target) {
        snprintf(dir, sizeof dir, "/");
        *out_base = slash + 1;
    } else {
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - target), target);
        *out_base = slash + 1;
    }
    if ((*out_base)[0] == '\0' || strcmp(*out_base, ".") == 0 ||
        strcmp(*out_base, "..") == 0) {
        snprintf(errmsg, errmsg_len, "%s names no file", target);
        return -1;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(errmsg, errmsg_len,
                 "%s: the directory %s does not exist (or is no directory)",
                 target, dir);
        return -1;
    }
    real = realpath(dir, NULL);
    if (real == NULL) {
        snprintf(errmsg, errmsg_len, "%s: %s: %s", target, dir,
                 strerror(errno));
        return -1;
    }
    snprintf(out, len, "%s", real);
    free(real);
    return 0;
}

int backup_write(struct ext_node *n, const char *db_path, const char *target,
                 char **out_json, char *errmsg, size_t errmsg_len)
{
    char dir[PATH_MAX], path[PATH_MAX + 256], why[512];
    const char *base;
    uint64_t index = 0, term = 0;
    struct sql_copy_gate gate;
    struct stat st;
    json_t *o;
    int rc;

    if (target[0] == '\0') {
        snprintf(errmsg, errmsg_len, "the target path is empty");
        return RAFT_INVALID;
    }
    if (absolute_dir(target, dir, sizeof dir, &base, errmsg, errmsg_len) != 0) {
        return RAFT_INVALID;
    }
    if ((size_t)snprintf(path, sizeof path, "%s%s%s", dir,
                         strcmp(dir, "/") == 0 ? "" : "/",
                         base) >= sizeof path) {
        snprintf(errmsg, errmsg_len, "%.200s...: %s", target,
                 strerror(ENAMETOOLONG));
        return RAFT_INVALID;
    }
    if (lstat(path, &st) == 0) {
        snprintf(errmsg, errmsg_len,
                 "%s exists: raft_backup never overwrites a file (remove it "
                 "or give another path)",
                 path);
        return RAFT_INVALID;
    }
    if (errno != ENOENT) {
        /* ENAMETOOLONG, EACCES, ELOOP...: say which. */
        snprintf(errmsg, errmsg_len, "%s: cannot be created: %s", path,
                 strerror(errno));
        return RAFT_INVALID;
    }
    ext_node_copy_gate(n, &gate);
    rc = sql_snapshot_write(db_path, path, &gate, &index, &term, why,
                            sizeof why);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "%s", why);
        /* SQL_ERR_INVALID: the target appeared meanwhile. */
        return rc == SQL_ERR_INVALID ? RAFT_INVALID
               : rc == SQL_ERR_NOMEM ? RAFT_NOMEM
               : rc == SQL_ERR_BUSY  ? RAFT_BUSY
                                     : RAFT_IOERR;
    }
    /* As a snapshot is before it is sent: a foreign write the node has
     * not seen yet would otherwise travel in the copy. */
    rc = ext_node_copy_check(n, path, "the copy", why, sizeof why);
    if (rc != 0) {
        unlink(path);
        snprintf(errmsg, errmsg_len,
                 "%s; no backup was written (the copy is removed): back up "
                 "another node, or this one after the repair",
                 why);
        return rc;
    }
    if (stat(path, &st) != 0) {
        snprintf(errmsg, errmsg_len, "%s: %s", path, strerror(errno));
        return RAFT_IOERR;
    }
    o = json_pack("{s:I, s:I, s:s, s:I}", "index", (json_int_t)index, "term",
                  (json_int_t)term, "path", path, "bytes",
                  (json_int_t)st.st_size);
    *out_json = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (*out_json == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    return 0;
}
