/* Resolving the pre-update hook of preupdate.h: dlsym in the shared object
 * that holds the SQLite functions this code calls (dladdr), then in the
 * process's global scope, accepting only functions of that same copy. */

#include "preupdate.h"

#include <dlfcn.h>
#include <string.h>

#include "err.h"

SQLITE_EXTENSION_INIT3

/* The symbols, in the order of struct sql_preupdate's fields. */
static const char *const names[] = {
    "sqlite3_preupdate_hook",  "sqlite3_preupdate_old",
    "sqlite3_preupdate_new",   "sqlite3_preupdate_count",
    "sqlite3_preupdate_depth", "sqlite3_preupdate_blobwrite",
};

typedef int (*version_fn)(void);

/* lookup reads symbol @name from @handle into @out (a function pointer's
 * storage, written through memcpy: ISO C has no cast between object and
 * function pointers). Returns 0 when found. */
static int lookup(void *handle, const char *name, void *out, size_t size)
{
    void *p = dlsym(handle, name);

    if (p == NULL) {
        return -1;
    }
    memcpy(out, &p, size);
    return 0;
}

/* resolve_in fills @out from @handle when its sqlite3_libversion_number is
 * @ours, the function the API in use calls: then every symbol found there
 * belongs to that copy. Returns 0, or -1 with @why set. */
static int resolve_in(void *handle, version_fn ours, struct sql_preupdate *out,
                      char *why, size_t why_len)
{
    struct sql_preupdate p;
    version_fn theirs = NULL;

    if (lookup(handle, "sqlite3_libversion_number", &theirs, sizeof theirs) !=
        0) {
        sql_errmsgf(why, why_len, "no SQLite symbols are exported");
        return -1;
    }
    if (theirs != ours) {
        sql_errmsgf(why, why_len,
                    "the exported SQLite is another copy than the one in "
                    "use");
        return -1;
    }
    memset(&p, 0, sizeof p);
    if (lookup(handle, names[0], &p.hook, sizeof p.hook) != 0 ||
        lookup(handle, names[1], &p.old, sizeof p.old) != 0 ||
        lookup(handle, names[2], &p.new_, sizeof p.new_) != 0 ||
        lookup(handle, names[3], &p.count, sizeof p.count) != 0 ||
        lookup(handle, names[4], &p.depth, sizeof p.depth) != 0) {
        sql_errmsgf(why, why_len,
                    "SQLite %s is built without SQLITE_ENABLE_PREUPDATE_HOOK",
                    sqlite3_libversion());
        return -1;
    }
    if (lookup(handle, names[5], &p.blobwrite, sizeof p.blobwrite) != 0) {
        p.blobwrite = NULL; /* SQLite before 3.36.0 */
    }
    *out = p;
    return 0;
}

int preupdate_resolve(struct sql_preupdate *out, char *why, size_t why_len)
{
    version_fn ours = sqlite3_libversion_number;
    void *addr;
    Dl_info info;
    int rc = -1;

    memcpy(&addr, &ours, sizeof addr);
    /* The shared object that holds the function we call (the host's
     * libsqlite3, or the program itself). */
    if (dladdr(addr, &info) != 0 && info.dli_fname != NULL) {
        void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
        if (h != NULL) {
            rc = resolve_in(h, ours, out, why, why_len);
            dlclose(h);
            if (rc == 0) {
                return 0;
            }
        }
    }
    return resolve_in(RTLD_DEFAULT, ours, out, why, why_len);
}
