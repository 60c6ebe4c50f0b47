"""make demo: replicate a real SQL script through a 3-node raftsql cluster.

Starts three node processes on 127.0.0.1, writes the script through a node
that is not the leader with raft_load_sql (split into statements with
sqlite3_complete, sent in bounded chunks, each under a request id derived
from the script, so a rerun resumes), then checks that every
node's database equals the same script loaded by the stock sqlite3 shell
into a plain file, table by table (tools/fingerprint.py). Exits 0 only if
all three match (and, for Chinook, match its expected fingerprint).

Environment: SQL=path picks the script (default: the Chinook script in
../shared/data/chinook, or a generated one when that is absent);
RAFTSQL_TESTHOST=path picks the node program (default build/raftsql-testhost);
KEEP=1 keeps the work directory.
"""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import fingerprint  # noqa: E402
import gen_script  # noqa: E402
from raftsql_cluster import Cluster, NodeError  # noqa: E402

CHINOOK = os.path.join(ROOT, "..", "shared", "data", "chinook")


def split_statements(script):
    """Split script into complete statements, dropping comment-only ones
    (for tests that write statement by statement; the demo itself uses
    raft_load_sql)."""
    stmts, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if sqlite3.complete_statement(_strip_comments(buf)):
                stmts.append(buf.strip())
            buf = ""
    if buf.strip() and _strip_comments(buf).strip():
        stmts.append(buf.strip())
    return stmts


def _strip_comments(sql):
    """SQL with -- and /* */ comments outside literals removed."""
    out, i, n = [], 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"[`":
            end = {"[": "]"}.get(c, c)
            j = sql.find(end, i + 1)
            j = n if j < 0 else j + 1
            out.append(sql[i:j])
            i = j
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def pick_script(workdir):
    """Return (path, expected fingerprint text or None, description)."""
    if os.environ.get("SQL"):
        return os.environ["SQL"], None, os.environ["SQL"]
    chinook = os.path.join(CHINOOK, "Chinook_Sqlite.sql")
    if os.path.exists(chinook):
        with open(os.path.join(CHINOOK, "expected-fingerprint.txt")) as f:
            return chinook, f.read(), "Chinook (../shared/data/chinook)"
    path = os.path.join(workdir, "generated.sql")
    with open(path, "w") as f:
        gen_script.main(f)
    return path, None, "a generated script (Chinook not found)"


def main():
    binary = os.environ.get("RAFTSQL_TESTHOST",
                            os.path.join(ROOT, "build", "raftsql-testhost"))
    workdir = tempfile.mkdtemp(prefix="raftsql-demo-")
    cluster = None
    ok = False
    try:
        script_path, expected, what = pick_script(workdir)
        script_path = os.path.abspath(script_path)
        print("demo: script: %s" % what)

        t0 = time.monotonic()
        cluster = Cluster(binary, workdir, 3,
                          "election_timeout_ms=300 heartbeat_ms=30")
        leader = cluster.wait_leader()
        writer = next(n for n in cluster.nodes if n.id != leader.id)
        print("demo: 3 nodes up on %s; leader is node %d; loading through "
              "follower node %d with raft_load_sql" %
              (cluster.members, leader.id, writer.id))
        try:
            result = json.loads(writer.value("SELECT raft_load_sql(?)",
                                             script_path))
        except NodeError as e:
            print("demo: the load failed: %s" % e)
            return 1
        print("demo: loaded %d statements in %d chunks (%d bytes), "
              "%d applied, %d found applied before" %
              (result["statements"], result["chunks"], result["bytes"],
               result["applied"], result["skipped"]))
        target = writer.status()["applied"]
        cluster.wait_applied(target)
        elapsed = time.monotonic() - t0
        print("demo: all 3 nodes applied index %d (%.1f s)" %
              (target, elapsed))
        for n in cluster.nodes:
            print("demo: node %d status: %s" %
                  (n.id, json.dumps(n.status(), sort_keys=True)))
        codes = cluster.stop()
        if any(codes):
            print("demo: a node exited with an error: %s" % codes)
            return 1

        ref = os.path.join(workdir, "reference.db")
        with open(script_path, "rb") as f:
            subprocess.run(["sqlite3", ref], stdin=f, check=True)
        want = fingerprint.render(fingerprint.fingerprint(ref))
        print("demo: stock sqlite3 reference:\n" + want, end="")
        ok = True
        if expected is not None and want != expected:
            print("demo: MISMATCH: the reference differs from "
                  "expected-fingerprint.txt")
            ok = False
        for n in cluster.nodes:
            got = fingerprint.render(fingerprint.fingerprint(n.db))
            same = got == want
            print("demo: node %d fingerprint %s" %
                  (n.id, "matches" if same else "DIFFERS:\n" + got))
            ok = ok and same
        print("demo: %s" % ("PASS: all three replicas equal stock SQLite"
                            if ok else "FAIL"))
        return 0 if ok else 1
    finally:
        if cluster is not None:
            for n in cluster.nodes:
                if n.proc.poll() is None:
                    n.kill()
        if os.environ.get("KEEP") or not ok:
            print("demo: files kept in %s" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
