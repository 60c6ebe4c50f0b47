/* A check of a request with the write guard set aside: what raft_exec's
 * policy says of the statements prepared meanwhile on the calling thread
 * (precheck.h, attach_client.c), noted by the guard (guard.h) or by
 * raft_load_sql's check of a script (load_check.c). */

#ifndef EXT_GUARD_CHECK_H
#define EXT_GUARD_CHECK_H

/* What the guard saw while a check ran on this thread. */
struct guard_check {
    char refused[512];   /* why raft_exec refuses the first action that
                          sql_refusal_action refuses (transaction
                          control, ATTACH, TEMP objects, ...), else "" */
    const char *setting; /* the cluster-wide setting a PRAGMA sets
                            (sql_refusal_setting), else NULL */
};

/* guard_check_begin sets the guard aside on the calling thread until
 * guard_check_end: statements prepared meanwhile (to check a request,
 * never to run it) are allowed, and the first action that raft_exec's
 * policy refuses (sql_refusal_action, the apply connection's) and the
 * last cluster-wide setting set are noted in @seen. Thread: the caller's; the two calls pair up on one thread. */
void guard_check_begin(struct guard_check *seen);

/* guard_check_end puts the guard back on the calling thread. */
void guard_check_end(void);

/* guard_check_current returns the check running on the calling thread
 * (guard_check_begin), NULL when none: the guard allows what is prepared
 * then and notes it there. The caller's thread. */
struct guard_check *guard_check_current(void);

/* guard_check_note notes in @seen what raft_exec's policy says of one
 * authorizer call (@action, @a1, @a2, @db_name as SQLite gives them):
 * the reason sql_refusal_action gives, unless @seen holds one already
 * (the first stays), and the cluster-wide setting a PRAGMA sets
 * (sql_refusal_setting). The guard notes so during a check
 * (guard_check_begin); raft_load_sql's check of a script notes so on its
 * own connection (load_check.c). Thread: any (it touches @seen only). */
void guard_check_note(struct guard_check *seen, int action, const char *a1,
                      const char *a2, const char *db_name);

#endif /* EXT_GUARD_CHECK_H */
