/* The little-endian integers and typed values that the payload formats of
 * sql/ share (the request of request.c, the changeset of
 * changeset_codec.c): one encoding of a value, written and read in one
 * place. Pure; private to sql/. */

#ifndef SQL_CODEC_H
#define SQL_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sql.h"

/* codec_put_u16, codec_put_u32 and codec_put_u64 write @v little-endian
 * at @p. */
void codec_put_u16(uint8_t *p, uint16_t v);
void codec_put_u32(uint8_t *p, uint32_t v);
void codec_put_u64(uint8_t *p, uint64_t v);

/* codec_get_u16, codec_get_u32 and codec_get_u64 read a little-endian
 * integer at @p. */
uint16_t codec_get_u16(const uint8_t *p);
uint32_t codec_get_u32(const uint8_t *p);
uint64_t codec_get_u64(const uint8_t *p);

/* codec_value_size returns the encoded size of @v's value part (after its
 * type byte): 8 for INTEGER and FLOAT, 4 + len for TEXT and BLOB, 0 for
 * NULL. It returns 0 with *@bad set to 1 for an unknown type or bytes
 * missing (len > 0, p NULL). */
uint64_t codec_value_size(const struct sql_value *v, int *bad);

/* codec_value_put writes @v's value part (codec_value_size bytes, which
 * the caller checked) at @p and returns the byte after it. */
uint8_t *codec_value_put(uint8_t *p, const struct sql_value *v);

/* codec_value_get reads a value part of type @type (1..5, checked by the
 * caller) from the @avail bytes at @p into @out (TEXT and BLOB point into
 * @p) and gives its size in *@out_used. Returns 0, or -1 when @avail
 * bytes cannot hold it; then *@out_used is the size needed so far (the
 * length prefix's, or the whole value's). */
int codec_value_get(const uint8_t *p, size_t avail, uint8_t type,
                    struct sql_value *out, uint64_t *out_used);

/* codec_value_equal says whether @a and @b are the same value: the same
 * type and the same bits (a FLOAT bit for bit, -0.0 and NaN payloads
 * included; TEXT and BLOB byte for byte). Pure. */
bool codec_value_equal(const struct sql_value *a, const struct sql_value *b);

#endif /* SQL_CODEC_H */
