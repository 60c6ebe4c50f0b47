/* The shared little-endian integers and value encoding of codec.h. */

#include "codec.h"

#include <string.h>

void codec_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

void codec_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

void codec_put_u64(uint8_t *p, uint64_t v)
{
    codec_put_u32(p, (uint32_t)v);
    codec_put_u32(p + 4, (uint32_t)(v >> 32));
}

uint16_t codec_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

uint32_t codec_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

uint64_t codec_get_u64(const uint8_t *p)
{
    return (uint64_t)codec_get_u32(p) | (uint64_t)codec_get_u32(p + 4) << 32;
}

uint64_t codec_value_size(const struct sql_value *v, int *bad)
{
    switch (v->type) {
        case SQL_INTEGER:
        case SQL_FLOAT:
            return 8;
        case SQL_TEXT:
        case SQL_BLOB:
            if (v->bytes.p == NULL && v->bytes.len > 0) {
                *bad = 1;
                return 0;
            }
            return 4 + (uint64_t)v->bytes.len;
        case SQL_NULL:
            return 0;
        default:
            *bad = 1;
            return 0;
    }
}

uint8_t *codec_value_put(uint8_t *p, const struct sql_value *v)
{
    uint64_t bits;

    switch (v->type) {
        case SQL_INTEGER:
            codec_put_u64(p, (uint64_t)v->integer);
            return p + 8;
        case SQL_FLOAT:
            memcpy(&bits, &v->real, 8);
            codec_put_u64(p, bits);
            return p + 8;
        case SQL_TEXT:
        case SQL_BLOB:
            codec_put_u32(p, (uint32_t)v->bytes.len);
            if (v->bytes.len > 0) {
                memcpy(p + 4, v->bytes.p, v->bytes.len);
            }
            return p + 4 + v->bytes.len;
        default:
            return p;
    }
}

int codec_value_get(const uint8_t *p, size_t avail, uint8_t type,
                    struct sql_value *out, uint64_t *out_used)
{
    uint64_t bits;
    uint32_t n;

    out->type = type;
    switch (type) {
        case SQL_INTEGER:
        case SQL_FLOAT:
            *out_used = 8;
            if (avail < 8) {
                return -1;
            }
            bits = codec_get_u64(p);
            if (type == SQL_INTEGER) {
                out->integer = (int64_t)bits;
            } else {
                memcpy(&out->real, &bits, 8);
            }
            return 0;
        case SQL_TEXT:
        case SQL_BLOB:
            *out_used = 4;
            if (avail < 4) {
                return -1;
            }
            n = codec_get_u32(p);
            *out_used = 4 + (uint64_t)n;
            if (n > avail - 4) {
                return -1;
            }
            out->bytes.p = p + 4;
            out->bytes.len = n;
            return 0;
        default:
            *out_used = 0;
            return 0;
    }
}

bool codec_value_equal(const struct sql_value *a, const struct sql_value *b)
{
    if (a->type != b->type) {
        return false;
    }
    switch (a->type) {
        case SQL_INTEGER:
            return a->integer == b->integer;
        case SQL_FLOAT:
            return memcmp(&a->real, &b->real, sizeof a->real) == 0;
        case SQL_TEXT:
        case SQL_BLOB:
            return a->bytes.len == b->bytes.len &&
                   (a->bytes.len == 0 ||
                    memcmp(a->bytes.p, b->bytes.p, a->bytes.len) == 0);
        default:
            return true;
    }
}
