/* Log levels and the logging callback that I/O modules report through. The
 * pure core never logs; the node runtime writes these lines to stderr. */

#ifndef RAFT_LOGGING_H
#define RAFT_LOGGING_H

/* Severity of a log line; a node prints lines at or above its log_level. */
enum raft_log_level {
    RAFT_LOG_DEBUG = 0,
    RAFT_LOG_INFO = 1,
    RAFT_LOG_WARN = 2,
    RAFT_LOG_ERROR = 3,
};

/* A sink for log lines: @level is an enum raft_log_level, @msg a
 * NUL-terminated line without newline, valid only during the call. */
typedef void (*raft_log_cb)(void *data, int level, const char *msg);

#endif /* RAFT_LOGGING_H */
