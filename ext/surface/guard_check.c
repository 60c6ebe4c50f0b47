/* The check running on a thread (guard_check.h). */

#include "guard_check.h"

#include <stddef.h>

#include "../../sql/sql.h"

/* The check running on this thread (guard_check_begin), or NULL. */
static _Thread_local struct guard_check *checking;

void guard_check_begin(struct guard_check *seen)
{
    seen->refused[0] = '\0';
    seen->setting = NULL;
    checking = seen;
}

void guard_check_end(void)
{
    checking = NULL;
}

struct guard_check *guard_check_current(void)
{
    return checking;
}

void guard_check_note(struct guard_check *seen, int action, const char *a1,
                      const char *a2, const char *db_name)
{
    const char *setting = sql_refusal_setting(action, a1, a2, db_name);
    if (setting != NULL) {
        seen->setting = setting;
    }
    if (seen->refused[0] == '\0') {
        (void)sql_refusal_action(action, a1, a2, db_name, seen->refused,
                                 sizeof seen->refused);
    }
}
