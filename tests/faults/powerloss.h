/* powerloss.h - the journal format of the power-loss shim (powerloss.c),
 * which tests/faults/powerloss.py reads to undo, after a SIGKILL, what a
 * power failure would have lost.
 *
 * A journal is one file per process, <dir>/journal.<pid>, a sequence of
 * records, each appended with one write() on an O_APPEND descriptor:
 * a struct powerloss_rec (little-endian, 64 bytes, no padding), then
 * path_len bytes of path (absolute, no NUL), then data_len bytes of data.
 * A record is written before the change it describes, so a record cut
 * short by the kill describes a change that was never made, and the
 * reader drops it. Version: POWERLOSS_MAGIC.
 */
#ifndef RAFTSQL_TESTS_FAULTS_POWERLOSS_H
#define RAFTSQL_TESTS_FAULTS_POWERLOSS_H

#include <stdint.h>

#define POWERLOSS_MAGIC 0x314a4c50u /* "PLJ1" */

/* The kinds of record. seq is CLOCK_MONOTONIC in ns (one clock for
 * every process on the machine), strictly increasing in each journal. */
enum powerloss_type {
    POWERLOSS_WRITE = 1,        /* a=offset, b=length, c=size before; data:
                                  the old bytes of [a, min(a+b, c)) */
    POWERLOSS_WRITE_SYNCED = 2, /* as WRITE, on an O_DSYNC/O_SYNC fd: durable
                                  when write() returned; no data */
    POWERLOSS_TRUNCATE = 3,     /* a=new size, c=size before; data: the old
                                  bytes of [a, c) when it shrank */
    POWERLOSS_SYNC = 4,         /* fsync/fdatasync/msync(MS_SYNC) of dev/ino
                                  (a file or a directory) returned; seq is
                                  taken before the call: every change of
                                  an earlier seq to that inode is durable */
    POWERLOSS_CREATE = 5,       /* path created; dev/ino: its directory;
                                  a: the new file's inode */
    POWERLOSS_UNLINK = 6,       /* path unlinked; dev/ino: its directory;
                                  a: the file's inode; data: the path of a
                                  hard link kept to undo it ("" if none) */
    POWERLOSS_RENAME = 7,       /* path renamed; dev/ino: its directory; a/b:
                                  dev/ino of the new name's directory; c: the
                                  file's inode; data: "<new>\0<link>", link
                                  a hard link to what <new> replaced ("" if
                                  nothing) */
};

/* One record's fixed part. */
struct powerloss_rec {
    uint32_t magic;    /* POWERLOSS_MAGIC */
    uint32_t type;     /* enum powerloss_type */
    uint64_t seq;      /* CLOCK_MONOTONIC, ns */
    uint64_t dev;      /* st_dev of the file (or directory) */
    uint64_t ino;      /* st_ino of the file (or directory) */
    uint64_t a;        /* per type, above */
    uint64_t b;        /* per type, above */
    uint64_t c;        /* per type, above */
    uint32_t path_len; /* bytes of path after this header */
    uint32_t data_len; /* bytes of data after the path */
};

#endif
