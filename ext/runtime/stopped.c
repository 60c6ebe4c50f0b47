/* Writes made while no node ran (stopped.h): one line of stat fields of
 * the database file and of its -wal at a clean stop, compared at the next
 * start, which then verifies the file against the running checksum
 * (start_scan.h). */

#include "stopped.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../raft/raft.h"
#include "sqlbridge.h"

/* Bytes of a record line. */
#define EXT__STOPPED_LINE 320

/* describe writes the look of @path to @out: "dev ino size mtime ctime"
 * (ns), or "-" when absent or empty (a -wal after a full checkpoint). */
static void describe(const char *path, char *out, size_t len)
{
    struct stat st;

    if (stat(path, &st) != 0 || st.st_size == 0) {
        snprintf(out, len, "-");
        return;
    }
    snprintf(out, len, "%llu %llu %lld %lld.%09ld %lld.%09ld",
             (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
             (long long)st.st_size, (long long)st.st_mtim.tv_sec,
             st.st_mtim.tv_nsec, (long long)st.st_ctim.tv_sec,
             st.st_ctim.tv_nsec);
}

/* describe_both writes the record line of @db_path to @out (@len bytes). */
static void describe_both(const char *db_path, char *out, size_t len)
{
    char wal[4200], a[128], b[128];

    snprintf(wal, sizeof wal, "%s-wal", db_path);
    describe(db_path, a, sizeof a);
    describe(wal, b, sizeof b);
    snprintf(out, len, "1 db %s wal %s\n", a, b);
}

bool stopped_write_file(const char *path, const char *text, bool durable)
{
    char tmp[4300];
    FILE *fp;
    bool ok;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fp = fopen(tmp, "w");
    ok = fp != NULL && fputs(text, fp) >= 0;
    ok = fp != NULL && fflush(fp) == 0 && ok;
    ok = fp != NULL && (!durable || fsync(fileno(fp)) == 0) && ok;
    ok = fp != NULL && fclose(fp) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return false;
    }
    return true;
}

void stopped_record(struct sql_fsm *fsm, struct ext_node_log *log,
                    const char *record_path, const char *db_path)
{
    char line[EXT__STOPPED_LINE];
    uint64_t durable;

    (void)sql_fsm_checkpoint(fsm, SQL_CHECKPOINT_WAIT, &durable);
    describe_both(db_path, line, sizeof line);
    if (!stopped_write_file(record_path, line, true)) {
        node_log_line(log, RAFT_LOG_WARN,
                      "cannot record the clean stop in %s: %s (the next "
                      "start verifies the database)",
                      record_path, strerror(errno));
    }
}

bool stopped_changed(const char *record_path, const char *db_path, char *why,
                     size_t why_len)
{
    char was[EXT__STOPPED_LINE] = "", now[EXT__STOPPED_LINE];
    FILE *fp = fopen(record_path, "r");

    if (fp == NULL) {
        snprintf(why, why_len,
                 "no record of a clean stop in %s (a crash, or a first "
                 "start)",
                 record_path);
        return true;
    }
    if (fgets(was, sizeof was, fp) == NULL) {
        was[0] = '\0';
    }
    fclose(fp);
    unlink(record_path);
    describe_both(db_path, now, sizeof now);
    if (strcmp(was, now) != 0) {
        snprintf(why, why_len,
                 "%s or its -wal changed since the node's last clean stop",
                 db_path);
        return true;
    }
    return false;
}
