/* A node's log lines and last error (node_log.h). */

#include "node_log.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

/* now_ms reads CLOCK_MONOTONIC in ms. */
static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static const char *level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void node_log_init(struct ext_node_log *l, uint64_t id, int level)
{
    l->id = id;
    l->level = level;
    l->last_error[0] = '\0';
    pthread_mutex_init(&l->mu, NULL);
}

void node_log_close(struct ext_node_log *l)
{
    pthread_mutex_destroy(&l->mu);
}

/* print writes one formatted line to stderr. */
static void print(const struct ext_node_log *l, int level, const char *msg)
{
    fprintf(stderr, "raftsql[%" PRIu64 "] %s: %s\n", l->id,
            level_names[level < 0 || level > 3 ? 3 : level], msg);
}

void node_log_line(struct ext_node_log *l, int level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    if (level < l->level) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    print(l, level, line);
}

void node_log_error(struct ext_node_log *l, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&l->mu);
    snprintf(l->last_error, sizeof l->last_error, "%s", msg);
    l->last_error_at = now_ms();
    pthread_mutex_unlock(&l->mu);
    if (RAFT_LOG_ERROR >= l->level) {
        print(l, RAFT_LOG_ERROR, msg);
    }
}

uint64_t node_log_last_error(struct ext_node_log *l, char *out, size_t len)
{
    uint64_t age = 0;
    pthread_mutex_lock(&l->mu);
    if (len > 0) {
        snprintf(out, len, "%s", l->last_error);
    }
    if (l->last_error[0] != '\0') {
        age = now_ms() - l->last_error_at;
    }
    pthread_mutex_unlock(&l->mu);
    return age;
}

void node_log_iso_time(uint64_t ms, char out[EXT_ISO_TIME_LEN])
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    size_t len;
    gmtime_r(&secs, &tm);
    len = strftime(out, EXT_ISO_TIME_LEN, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + len, EXT_ISO_TIME_LEN - len, ".%03uZ",
             (unsigned)(ms % 1000));
}
