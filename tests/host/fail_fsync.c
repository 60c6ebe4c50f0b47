/* fail-fsync.so: an LD_PRELOAD shim of the end-to-end tests that plays a
 * disk gone bad under one node's log: while the file named by
 * $RAFTSQL_TEST_FAIL_FSYNC exists, fdatasync and fsync of a file named
 * data.mdb (an LMDB log) fail with EIO; every other file, and every call
 * before the file appears, goes to libc (tests/e2e/test_daemon_attach.py). */

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* armed says whether a sync of @fd must fail now. */
static bool armed(int fd)
{
    const char *trigger = getenv("RAFTSQL_TEST_FAIL_FSYNC");
    const char *suffix = "/data.mdb";
    size_t suffix_len = strlen(suffix);
    char link[64], path[4096];
    ssize_t len;

    if (trigger == NULL || access(trigger, F_OK) != 0) {
        return false;
    }
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    len = readlink(link, path, sizeof path - 1);
    if (len < (ssize_t)suffix_len) {
        return false;
    }
    path[len] = '\0';
    return strcmp(path + len - suffix_len, suffix) == 0;
}

/* call_next calls libc's (the next object's) @name on @fd. */
static int call_next(const char *name, int fd)
{
    int (*next)(int) = (int (*)(int))dlsym(RTLD_NEXT, name);
    if (next == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return next(fd);
}

int fdatasync(int fd)
{
    if (armed(fd)) {
        errno = EIO;
        return -1;
    }
    return call_next("fdatasync", fd);
}

int fsync(int fd)
{
    if (armed(fd)) {
        errno = EIO;
        return -1;
    }
    return call_next("fsync", fd);
}
