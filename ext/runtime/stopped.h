/* Writes made while no node ran (stopped.c): what the database file
 * looked like at the node's last clean stop, recorded in <dir>/stopped,
 * and the verify of a start that finds the file may have changed. */

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

/* stopped_verify reads and removes the record at @record_path; when it is
 * missing (a crash, a first start of an existing database), unreadable or
 * differs from @db_path now, it compares the file with @fsm's running
 * checksum (sql_fsm_verify: a full scan) and logs the outcome on @log.
 * Nothing on a database with nothing applied (its sums come from the
 * file) or with the checksum off. Returns true when the file differs,
 * with @reason (@reason_len bytes) saying "the database changed while the
 * node was stopped: ..." and naming the tables; false otherwise (also
 * when the scan failed: a WARN line). Thread: the opener, before the
 * apply thread starts (applier_start). */
bool stopped_verify(struct sql_fsm *fsm, struct ext_node_log *log,
                    const char *record_path, const char *db_path, char *reason,
                    size_t reason_len);

#endif /* EXT_STOPPED_H */
