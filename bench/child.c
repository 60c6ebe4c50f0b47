/* The node processes of raftsql-bench (child.h): fork and exec of
 * build/raftsql-testhost, the JSON line protocol of its stdin and stdout, and
 * the ordered stop. */

#include "bench/child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/timing.h"

int child_spawn(struct bench_child *c, const char *bin, const char *db,
                const char *log)
{
    int in[2], out[2];
    pid_t pid;

    if (pipe2(in, O_CLOEXEC) != 0) {
        return -1;
    }
    if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        return -1;
    }
    if (pid == 0) {
        int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1) {
            _exit(127);
        }
        dup2(in[0], 0);
        dup2(out[1], 1);
        if (lfd >= 0) {
            dup2(lfd, 2);
        }
        /* Out of our process group: a terminal's ^C or timeout(1)'s
         * group signal reaches only the bench, which stops the nodes in
         * order (a node killed under load would stall the clients). */
        setpgid(0, 0);
        execl(bin, bin, db, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c->pid = pid;
    c->in_fd = in[1];
    c->out = fdopen(out[0], "r");
    if (c->out == NULL) {
        close(out[0]);
        return -1;
    }
    return 0;
}

void child_stop(struct bench_child *c, double grace_s)
{
    double end;
    int status;

    if (c->pid == 0) {
        return;
    }
    if (c->in_fd >= 0) {
        close(c->in_fd);
        c->in_fd = -1;
    }
    end = timing_now_s() + grace_s;
    while (waitpid(c->pid, &status, WNOHANG) == 0) {
        if (timing_now_s() > end) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &status, 0);
            break;
        }
        usleep(10000);
    }
    if (c->out != NULL) {
        fclose(c->out);
        c->out = NULL;
    }
    c->pid = 0;
}

json_t *child_sql(struct bench_child *c, const char *sql, const char *param,
                  char *err, size_t err_len)
{
    json_t *req =
        param ? json_pack("[s,s]", sql, param) : json_pack("[s]", sql);
    char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
    char line[65536];
    json_t *reply = NULL, *rows, *v = NULL;
    json_error_t jerr;
    size_t len;

    json_decref(req);
    if (text == NULL) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    len = strlen(text);
    text[len] = '\n';
    if (write(c->in_fd, text, len + 1) != (ssize_t)(len + 1)) {
        snprintf(err, err_len, "write to node: %s", strerror(errno));
        free(text);
        return NULL;
    }
    free(text);
    if (fgets(line, sizeof line, c->out) == NULL) {
        snprintf(err, err_len, "node exited");
        return NULL;
    }
    reply = json_loads(line, 0, &jerr);
    if (reply == NULL) {
        snprintf(err, err_len, "bad reply: %s", jerr.text);
        return NULL;
    }
    if (json_object_get(reply, "error") != NULL) {
        snprintf(err, err_len, "%s",
                 json_string_value(json_object_get(reply, "error")));
        json_decref(reply);
        return NULL;
    }
    rows = json_object_get(reply, "rows");
    v = json_array_get(json_array_get(rows, 0), 0);
    if (v != NULL) {
        json_incref(v);
    } else {
        v = json_null();
    }
    json_decref(reply);
    return v;
}
