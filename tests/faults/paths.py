"""The ways a client operation reaches a node, and what its errors mean.

A request through raftsql's functions (raft_exec, raft_query,
raft_barrier) goes on the node's own connection, under its slot's lock.
A plain SQL transaction (README "Plain SQL writes") goes on the node's
own connection ("host": the slot's lock held from the first statement to
the last) or on its attached writer, another process ("attached").

Both answer an Outcome: ok with the result, or fail / info (history.py)
with the error text.
"""

from history import commit_outcome, exec_outcome
from nodes import NodeError, Timeout

# SQLite's codes a plain write meets, named in its error text.
CODE_NAMES = {5: "SQLITE_BUSY", 517: "SQLITE_BUSY_SNAPSHOT",
              23: "SQLITE_AUTH", 531: "SQLITE_CONSTRAINT_COMMITHOOK",
              275: "SQLITE_CONSTRAINT_CHECK", 13: "SQLITE_FULL"}
SQLITE_AUTH = 23
SQLITE_CONSTRAINT_COMMITHOOK = 531


class NotSent(Exception):
    """The operation was never sent: its node is down or its pipe out of
    step. Nothing to record."""


class Outcome:
    """type ("ok", "fail", "info"), value (an ok one's result), error
    (the text of the others), timed_out (no answer in time: the node's
    pipe is out of step)."""

    __slots__ = ("type", "value", "error", "timed_out")

    def __init__(self, type_, value=None, error=None, timed_out=False):
        self.type = type_
        self.value = value
        self.error = error
        self.timed_out = timed_out


def request(slot, timeout, text, *params):
    """Run the statement text (a raftsql call) on slot's node; its
    Outcome. Raises NotSent when the node is down."""
    try:
        return Outcome("ok", slot.request(text, *params, timeout=timeout))
    except NodeError as e:
        if e.code == -1 and "(not sent)" in str(e):
            raise NotSent(str(e))
        return Outcome(exec_outcome(e.code, str(e)), error=str(e),
                       timed_out=isinstance(e, Timeout))


def plain(cluster, slot, channel, timeout, busy_s, steps):
    """Run a plain transaction on node slot's own connection (channel
    "host") or its attached writer ("attached"); its Outcome.

    steps(conn) runs the statements with conn(text, *params,
    commit=False), the committing one (COMMIT, or an autocommit write)
    with commit=True, and returns the result. An error before the
    committing statement is a definite failure (the transaction is
    rolled back), as is a statement that never reached the process; one
    of the committing statement is judged by history.commit_outcome with
    raft_last_error()'s reason. Raises NotSent when the host channel's
    node is down."""
    lock = slot.lock if channel == "host" else slot.attach_lock
    with lock:
        if channel == "host":
            pipe = slot.node
            if pipe is None or pipe.desync:
                raise NotSent("node %d is down" % slot.id)
        else:
            pipe = cluster.attached(slot.id, busy_s)
        committing = [False]

        def conn(text, *params, commit=False):
            committing[0] = commit
            return pipe.sql(text, *params, timeout=timeout)

        try:
            return Outcome("ok", steps(conn))
        except NodeError as e:
            error = str(e)
            if e.code is not None and e.code > 0:
                error += " [%s]" % CODE_NAMES.get(e.code, e.code)
            if not committing[0] or "(not sent)" in error:
                type_ = "fail"
            else:
                reason = None
                if e.code in (SQLITE_CONSTRAINT_COMMITHOOK, SQLITE_AUTH):
                    reason = last_error(pipe, timeout)
                    error += ": raft_last_error: %s" % reason
                type_ = commit_outcome(e.code, str(e), reason)
            rollback(pipe, timeout)
            return Outcome(type_, error=error,
                           timed_out=isinstance(e, Timeout))


def rollback(pipe, timeout):
    """End whatever transaction is open on pipe (there may be none)."""
    if pipe.desync:
        return
    try:
        pipe.sql("ROLLBACK", timeout=timeout)
    except NodeError:
        pass


def last_error(pipe, timeout):
    """raft_last_error() on pipe's connection, None when it fails."""
    try:
        return pipe.sql("SELECT raft_last_error()",
                        timeout=timeout)[0][0] or ""
    except NodeError:
        return None
