"""Reproductions of two findings of the plain writers of `make faults`
(not part of make test; each exits 1 when it reproduces its finding).

resend: a plain COMMIT on a follower answered "not applied" although its
transaction is applied on every node (kill faults, e.g. `make faults
FAULTS_SEED=24 FAULTS_COUNT=10 FAULTS_KINDS=kill`). The follower F holds
the write lease of leader L and sends its COMMIT; L appends the
changeset and commits it with the third node, but its answer to F is held
(the link L -> F holds every byte); L is killed with kill -9 and
restarted; F sends its COMMIT again to L's new process, which knows no
lease and refuses it ("lease ... is not in force there"), and F vetoes
the COMMIT as "not applied". The entry is committed all the same: every
node, F included, applies it. The answer should be "outcome unknown" (or
the commit).

fulldisk: a plain write on a follower whose log disk is full does not
return (disk faults, e.g. `make faults FAULTS_SEED=32 FAULTS_COUNT=8
FAULTS_KINDS=disk`): its connection (busy timeout 5 s) asks for the
lease from the WAL lock (ext/surface/wal_lock.c), waits up to
exec_timeout_ms for its node to apply up to the grant (it cannot: it
stores no entry), gets SQLITE_BUSY, and SQLite's busy handler, which
counts only its own sleeps, tries again, and again; each try holds the
cluster's write lease, so the leader's raft_exec calls wait behind it.
Needs root (a tmpfs per node).

removed: a plain write through the attached writer (busy timeout 5 s)
of a node removed from the cluster answered SQLITE_BUSY only after about
20 s (the member faults of `make jepsen`, seed 26001: 20.3 s for each of
7 writes in a row on node 3's attached writer, while node 3 stayed
removed), on the node's own connection after 6.5 s, and the first one
right after the removal took a lease from the leader and applied. The
node stores no entry any more, so it never applies up to a grant. Fixed:
the write is refused at once, its COMMIT vetoed ("this node was removed
from the cluster"); this case reproduces when a write is applied or
takes more than 10 s.

noquorum: a plain write on a learner while the cluster has no quorum
(the other follower's log disk full) answered SQLITE_BUSY only after
many times its busy timeout (`make faults-short`, seed 333692: node 3, a
learner, did not answer within 23 s with a busy timeout of 5 s): each try
took the lease of a leader whose last entries could not commit, waited
exec_timeout_ms for its node to apply them, and SQLite's busy handler,
which counts only its own sleeps, tried again: 41 s here. Fixed: a try
gives up once its node applied nothing for 500 ms (20 ms on a retry):
about 10 s (the busy handler's 5 s and as much in asks of leaders that
step down); this case reproduces when the write takes more than 20 s
(four times its busy timeout). Needs root.

Usage: /usr/bin/python3 tests/faults/repro_plain.py resend|fulldisk|removed|noquorum [N]
(RAFTSQL_TESTHOST, default build/san/raftsql-testhost): N rounds
(resend, default 5; removed, default 2), or N seconds of waiting for the
write (fulldisk, default 40; the disk is freed 11 s after the write
began).
"""

import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from nodes import FaultCluster, NodeError  # noqa: E402
from run import NODE, SO  # noqa: E402

EXTRA = ("election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=3000 "
         "log_level=info")


def leader_of(c):
    """The leader every live node names, within 20 s."""
    end = time.monotonic() + 20
    while time.monotonic() < end:
        try:
            seen = {c.slots[i].request("SELECT raft_leader()",
                                       timeout=10)[0][0] for i in c.ids}
        except NodeError:
            seen = set()
        if len(seen) == 1 and None not in seen:
            return seen.pop()
        time.sleep(0.1)
    raise TimeoutError("no leader named by all")


def count(c, i, key):
    return c.slots[i].request("SELECT count(*) FROM t WHERE k = ?", key,
                              timeout=10)[0][0]


def file_count(path, key):
    """Rows of t with k = key in the database file at path, read with
    Python's SQLite (no raftsql: a removed node refuses reads)."""
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        return con.execute("SELECT count(*) FROM t WHERE k = ?",
                           (key,)).fetchone()[0]
    finally:
        con.close()


def round_(c, n):
    """One try; returns (answer, copies per node)."""
    lead = leader_of(c)
    f = [i for i in c.ids if i != lead][0]
    node = c.slots[f].node
    key = "k%d" % n
    node.sql("BEGIN IMMEDIATE", timeout=20)      # the lease, from L
    node.sql("INSERT INTO t VALUES(?)", key, timeout=20)
    c.net.set([(lead, f)], "hold")               # L's answers to F wait
    answer = {}

    def commit():
        try:
            node.sql("COMMIT", timeout=40)
            answer["a"] = "committed"
        except NodeError as e:
            answer["a"] = "%s: %s" % (e, node.sql(
                "SELECT raft_last_error()", timeout=20)[0][0])
            try:
                node.sql("ROLLBACK", timeout=20)
            except NodeError:
                pass

    t = threading.Thread(target=commit)
    t.start()
    time.sleep(0.3)                              # L appends and commits
    c.kill(lead)
    time.sleep(0.3)
    c.start(lead)
    c.net.heal()
    t.join(60)
    leader_of(c)
    c.slots[leader_of(c)].request("SELECT raft_exec('SELECT 1')",
                                  timeout=30)
    time.sleep(1.0)
    return answer.get("a"), {i: count(c, i, key) for i in c.ids}


def full_disk(c, wait_s):
    """The fulldisk case; returns whether it reproduced."""
    lead = leader_of(c)
    f = [i for i in c.ids if i != lead][0]
    c.disks[f].fill()
    for n in range(6):  # entries the full node cannot store
        c.slots[lead].request("SELECT raft_exec('INSERT INTO t VALUES(?)', "
                              "?)", {"blob": os.urandom(65536).hex()},
                              timeout=30)
    answer = {}

    def write():
        t0 = time.monotonic()
        try:
            c.slots[f].node.sql("INSERT INTO t VALUES('plain')",
                                timeout=wait_s)
            answer["a"] = "ok"
        except NodeError as e:
            answer["a"] = str(e)
        answer["s"] = time.monotonic() - t0

    t = threading.Thread(target=write)
    t.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    try:
        c.slots[lead].request("SELECT raft_exec('INSERT INTO t VALUES(1)')",
                              timeout=30)
        lead_answer = "ok"
    except NodeError as e:
        lead_answer = str(e)
    print("the leader's raft_exec meanwhile: %s after %.1f s" % (
        lead_answer, time.monotonic() - t0), flush=True)
    t.join(10)
    c.disks[f].free()
    print("freed follower %d's log disk 11 s after the write began" % f,
          flush=True)
    t.join(wait_s)
    hung = "s" not in answer or answer["s"] > 10
    print("plain INSERT on follower %d (log disk full, busy timeout 5 s): "
          "%s after %.1f s%s" % (f, answer.get("a"), answer.get("s", -1),
                                 "  <-- REPRODUCED" if hung else ""),
          flush=True)
    return hung


def no_quorum(c, rounds):
    """The noquorum case; returns whether it reproduced."""
    lead = leader_of(c)
    f, x = [i for i in c.ids if i != lead]
    print("raft_demote(%d): %s" % (x, c.slots[lead].request(
        "SELECT raft_demote(?)", x, timeout=30)[0][0]), flush=True)
    c.disks[f].fill()
    # Entries the full node cannot store: none commits from here.
    try:
        c.slots[lead].request("SELECT raft_exec('INSERT INTO t VALUES(?)', "
                              "?)", {"blob": os.urandom(65536).hex()},
                              timeout=10)
    except NodeError as e:
        print("the leader's raft_exec: %s" % e, flush=True)
    found = False
    for r in range(rounds):
        t0 = time.monotonic()
        try:
            c.slots[x].node.sql("INSERT INTO t VALUES('noquorum')",
                                timeout=60)
            answer = "ok"
        except NodeError as e:
            answer = str(e)
        took = time.monotonic() - t0
        slow = took > 20.0
        found = found or slow
        print("round %d: plain INSERT on learner %d (no quorum, busy "
              "timeout 5 s): %s after %.1f s%s" % (
                  r, x, answer, took, "  <-- REPRODUCED" if slow else ""),
              flush=True)
    c.disks[f].free()
    return found


def removed(c, rounds):
    """The removed case; returns whether it reproduced."""
    lead = leader_of(c)
    f = [i for i in c.ids if i != lead][0]
    print("raft_remove(%d): %s" % (f, c.slots[lead].request(
        "SELECT raft_remove(?)", f, timeout=30)[0][0]), flush=True)
    end = time.monotonic() + 20
    while "removed" not in (c.slots[f].request(
            "SELECT raft_status()", timeout=10)[0][0] or ""):
        if time.monotonic() > end:
            raise TimeoutError("node %d does not know it was removed" % f)
        time.sleep(0.1)
    found = False
    for r in range(rounds):
        for way in ("attached", "host"):
            pipe = c.attached(f, 5.0) if way == "attached" else \
                c.slots[f].node
            t0 = time.monotonic()
            try:
                pipe.sql("INSERT INTO t VALUES(?)", "removed-%d-%s" % (
                    r, way), timeout=120)
                answer = "ok"
            except NodeError as e:
                answer = "%s: %s" % (e, pipe.sql(
                    "SELECT raft_last_error()", timeout=20)[0][0])
            took = time.monotonic() - t0
            slow = took > 10.0 or answer == "ok"
            found = found or slow
            key = "removed-%d-%s" % (r, way)
            time.sleep(1.0)
            copies = {i: count(c, i, key) if i != f else
                      file_count(c.db_path(f), key) for i in c.ids}
            print("round %d: plain INSERT on removed node %d (%s): %s "
                  "after %.1f s; copies per node %s%s" % (
                      r, f, way, answer, took, copies,
                      "  <-- REPRODUCED" if slow else ""), flush=True)
    return found


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else ""
    if case not in ("resend", "fulldisk", "removed", "noquorum"):
        sys.exit(__doc__)
    n = int(sys.argv[2]) if len(sys.argv) > 2 else (
        {"resend": 5, "removed": 2, "noquorum": 2}.get(case, 40))
    work = tempfile.mkdtemp(prefix="raftsql-repro-")
    c = FaultCluster(NODE, work, 3, EXTRA, 1,
                     64 if case in ("fulldisk", "noquorum") else 0,
                     os.path.splitext(os.path.abspath(SO))[0])
    found = False
    try:
        for i in c.ids:
            c.start(i)
        end = time.monotonic() + 30
        while True:
            try:
                c.slots[1].request("SELECT raft_exec('CREATE TABLE t(k)')",
                                   timeout=20)
                break
            except NodeError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.2)
        if case == "fulldisk":
            found = full_disk(c, n)
        if case == "removed":
            found = removed(c, n)
        if case == "noquorum":
            found = no_quorum(c, n)
        for r in range(n if case == "resend" else 0):
            answer, copies = round_(c, r)
            bad = "not applied" in (answer or "") and any(copies.values())
            found = found or bad
            print("round %d: COMMIT on a follower: %s; copies per node %s%s"
                  % (r, answer, copies, "  <-- REPRODUCED" if bad else ""),
                  flush=True)
    finally:
        c.close()
        if found:
            keep = os.path.join(tempfile.gettempdir(),
                                "raftsql-repro-logs")
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(work, keep, ignore=shutil.ignore_patterns(
                "*.db*", "node*-log"))
            print("node logs in %s" % keep)
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
