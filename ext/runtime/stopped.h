/* Writes made while no node ran (stopped.c): what the database file
 * looked like at the node's last clean stop, recorded in <dir>/stopped,
 * which a start compares with the file now. */

#ifndef EXT_STOPPED_H
#define EXT_STOPPED_H

#include <stdbool.h>
#include <stddef.h>

#include "../../sql/sql.h"
#include "node_log.h"

/* stopped_write_file writes @text to @path through "<path>.tmp" renamed
 * over it, fsynced first when @durable. Returns false (errno set, nothing
 * left behind) on failure. Thread: any. */
bool stopped_write_file(const char *path, const char *text, bool durable);

/* stopped_record empties the WAL of @fsm's database @db_path (a TRUNCATE
 * checkpoint, best effort) and records at @record_path its look: device,
 * inode, size, mtime and ctime (ns) of the file and of its -wal (absent or
 * empty alike), durably. A failure is a WARN line on @log: the next start
 * then verifies the file. Thread: the apply thread's owner, with the
 * apply thread joined (applier_stop). */
void stopped_record(struct sql_fsm *fsm, struct ext_node_log *log,
                    const char *record_path, const char *db_path);

/* stopped_changed reads and removes the record at @record_path and says
 * whether @db_path may have changed since it was written: true when the
 * record is missing (a crash, a first start of an existing database),
 * unreadable or differs from the file now, with @why (@why_len bytes)
 * saying which; the start then verifies the file against the running
 * checksum (start_scan.h). Thread: the opener, before the apply thread
 * starts (applier_start). */
bool stopped_changed(const char *record_path, const char *db_path, char *why,
                     size_t why_len);

#endif /* EXT_STOPPED_H */
