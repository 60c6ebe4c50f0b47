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

Usage: /usr/bin/python3 tests/faults/repro_plain.py resend|fulldisk [N]
(RAFTSQL_TESTHOST, default build/san/raftsql-testhost): N rounds
(resend, default 5), or N seconds of waiting for the write (fulldisk,
default 40; the disk is freed 11 s after the write began).
"""

import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from nodes import FaultCluster, NodeError  # noqa: E402
from run import NODE  # noqa: E402

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


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else ""
    if case not in ("resend", "fulldisk"):
        sys.exit(__doc__)
    n = int(sys.argv[2]) if len(sys.argv) > 2 else (
        5 if case == "resend" else 40)
    work = tempfile.mkdtemp(prefix="raftsql-repro-")
    c = FaultCluster(NODE, work, 3, EXTRA, 1,
                     64 if case == "fulldisk" else 0)
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
