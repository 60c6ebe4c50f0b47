"""Writers in other processes: a process that loaded raftsql on a
database file whose node another process (a raftsql-testhost or a
raftsql-node daemon) runs writes through that node's Unix socket. The
Python writer process (WRITER, writer), the sqlite3 shell (shell), the C
example build/examples/write_through (EXAMPLE), and several of them at
once (write_at_once).
"""

import json
import os
import subprocess

from e2e import ROOT, SO

PYTHON = "/usr/bin/python3"
EXAMPLE = os.path.join(ROOT, "build", "examples", "write_through")
SO_BASE = os.path.splitext(os.path.abspath(SO))[0]

# A writer process: runs SQL statements given as JSON on a fresh
# connection with raftsql loaded (no raft_start; busy timeout argv[4] s,
# else 10), prints one JSON line per statement: {"rows": ...} or
# {"error": ..., "code": ...}.
WRITER = r"""
import json, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None,
                      timeout=float(sys.argv[4]) if len(sys.argv) > 4 else 10)
con.enable_load_extension(True)
con.load_extension(sys.argv[2])
for text, *params in json.loads(sys.argv[3]):
    try:
        rows = [list(r) for r in con.execute(text, params).fetchall()]
        rows = [[v.hex() if isinstance(v, bytes) else v for v in r]
                for r in rows]
        print(json.dumps({"rows": rows}), flush=True)
    except sqlite3.Error as e:
        print(json.dumps({"error": str(e),
                          "code": getattr(e, "sqlite_errorcode", None)}),
              flush=True)
"""


def writer(db, statements, prefix=(), timeout=60, timeout_s=10,
           stderr=False):
    """Run @statements ([sql, params...] lists) in a new Python process
    (through @prefix, e.g. setpriv) on @db, whose connection has a busy
    timeout of @timeout_s seconds; return its answers, and with @stderr
    what it wrote to stderr too (a pair)."""
    out = subprocess.run(list(prefix) + [PYTHON, "-c", WRITER, db, SO_BASE,
                                         json.dumps(statements),
                                         str(timeout_s)],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise AssertionError("writer failed: %s" % out.stderr)
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    return (answers, out.stderr) if stderr else answers


def shell(db, sql, timeout=60):
    """The sqlite3 shell on @db with raftsql loaded, running @sql."""
    return subprocess.run(["sqlite3", "-cmd", ".load " + SO_BASE, db, sql],
                          capture_output=True, text=True, timeout=timeout)


def write_at_once(db, table, rows, examples=10, timeout=120):
    """Three processes writing at once on @db: two Python writers, each
    inserting @rows rows ('w<writer>-<i>', i) into @table with one
    raft_exec a row, and a shell running @examples C examples one after
    the other (keys c0, c1, ..., values v0, v1, ...: they write table kv).
    Waits up to @timeout s for each. Returns the exit status of the
    three, the answers of each Python writer (a list of JSON objects,
    one a call) and the lines the examples printed."""
    procs = [subprocess.Popen(
        [PYTHON, "-c", WRITER, db, SO_BASE, json.dumps(
            [["SELECT raft_exec('INSERT INTO %s VALUES(?, ?)', ?, ?)" % table,
              "w%d-%d" % (w, i), i] for i in range(rows)])],
        stdout=subprocess.PIPE, text=True) for w in range(2)]
    procs.append(subprocess.Popen(
        ["sh", "-c", " && ".join(
            "%s %s c%d v%d" % (EXAMPLE, db, i, i) for i in range(examples))],
        stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    return ([p.returncode for p in procs],
            [[json.loads(x) for x in out.splitlines()] for out in outs[:2]],
            outs[2].splitlines())
