/* The changeset encoder's pieces (changeset_codec.c), for the capture
 * (changeset_capture.c), which writes records as the hooks see them.
 * Private to sql/. */

#ifndef SQL_CHANGESET_INTERNAL_H
#define SQL_CHANGESET_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "changeset.h"

/* Fixed bytes of a row record before its values: kind, name length, two
 * rowids, n_cols (the name's bytes come on top). */
#define SQL__CHANGE_ROW_FIXED (1 + 2 + 8 + 8 + 2)

/* Fixed bytes of a schema record before its text: kind, length. */
#define SQL__CHANGE_SCHEMA_FIXED (1 + 4)

/* changeset_codec_header writes the payload header (SQL_CHANGESET_HEADER
 * bytes) at @p: origin id @id, lease @lease, @n_records records. */
void changeset_codec_header(uint8_t *p, const uint64_t id[2], uint64_t lease,
                            uint32_t n_records);

/* changeset_codec_row writes the head of a row record of kind @kind
 * (INSERT, UPDATE or DELETE) on table @table (@table_len bytes, 1 to
 * 65535) at @p, SQL__CHANGE_ROW_FIXED + @table_len bytes, and returns the
 * byte after it, where the @n_cols values of the old row, then of the
 * new row, follow (codec_value_put, each after its type byte). */
uint8_t *changeset_codec_row(uint8_t *p, uint8_t kind, const char *table,
                             size_t table_len, int64_t old_rowid,
                             int64_t new_rowid, unsigned n_cols);

/* changeset_codec_schema writes a schema record of SQL text @sql (@len
 * bytes, 1 to UINT32_MAX, no NUL byte) at @p, SQL__CHANGE_SCHEMA_FIXED +
 * @len bytes, and returns the byte after it. */
uint8_t *changeset_codec_schema(uint8_t *p, const char *sql, size_t len);

/* Fixed bytes of an in-transaction schema record before its text: kind,
 * settings, length. */
#define SQL__CHANGE_SCHEMA_IN_TXN_FIXED (1 + 1 + 4)

/* changeset_codec_schema_in_txn writes a schema record of kind
 * SQL_CHANGE_SCHEMA_IN_TXN, of the writer's @settings (SQL_SCHEMA_*
 * bits) and SQL text @sql (@len bytes, 1 to UINT32_MAX, no NUL byte) at
 * @p, SQL__CHANGE_SCHEMA_IN_TXN_FIXED + @len bytes, and returns the byte
 * after it. */
uint8_t *changeset_codec_schema_in_txn(uint8_t *p, uint8_t settings,
                                       const char *sql, size_t len);

#endif /* SQL_CHANGESET_INTERNAL_H */
