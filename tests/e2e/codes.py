"""raftsql's result codes (RAFTSQL_* of ext/raftsql.h), read from the
header itself, so that the tests compare what the functions return with
what the header promises: CODES["RAFTSQL_NOT_APPLIED"] is its number; and
other_process, the codes a caller in another process gets.
"""

import json
import os
import re
import subprocess

from e2e import ROOT, SO

PYTHON = "/usr/bin/python3"
SO_BASE = os.path.splitext(os.path.abspath(SO))[0]

# SQLite's primary codes the header builds on (https://sqlite.org/rescode.html).
PRIMARY = {"SQLITE_ERROR": 1, "SQLITE_BUSY": 5, "SQLITE_INTERRUPT": 9,
           "SQLITE_FULL": 13, "SQLITE_CANTOPEN": 14, "SQLITE_TOOBIG": 18,
           "SQLITE_AUTH": 23}
HEADER = os.path.join(ROOT, "ext", "raftsql.h")


def read_codes(path=HEADER):
    """{name: (number, primary name, n)} for every RAFTSQL_* result code
    the header defines as (SQLITE_X | (n << 8))."""
    with open(path) as f:
        text = f.read()
    out = {}
    for name, primary, n in re.findall(
            r"#define (RAFTSQL_[A-Z_]+) \((SQLITE_[A-Z]+) \| \((\d+) << 8\)\)",
            text):
        out[name] = (PRIMARY[primary] | (int(n) << 8), primary, int(n))
    return out


CODES = {name: v[0] for name, v in read_codes().items()}


# A writer process: runs the statements (JSON [sql, params...] lists) on a
# fresh connection with raftsql loaded (no raft_start: calls go to the
# node's socket), interrupting each after argv[4] seconds when given;
# prints one JSON line per statement: {"rows": ...} or {"error", "code"}.
WRITER = r"""
import json, sqlite3, sys, threading
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10,
                      check_same_thread=False)
con.enable_load_extension(True)
con.load_extension(sys.argv[2])
after = float(sys.argv[4]) if len(sys.argv) > 4 else None
for text, *params in json.loads(sys.argv[3]):
    t = threading.Timer(after, con.interrupt) if after else None
    if t:
        t.start()
    try:
        rows = [list(r) for r in con.execute(text, params).fetchall()]
        print(json.dumps({"rows": rows}), flush=True)
    except sqlite3.Error as e:
        print(json.dumps({"error": str(e), "code": e.sqlite_errorcode}),
              flush=True)
    if t:
        t.cancel()
"""


def other_process(db, statements, interrupt_after=None):
    """@statements run by a writer process on @db; its answers."""
    args = [PYTHON, "-c", WRITER, db, SO_BASE, json.dumps(statements)]
    if interrupt_after is not None:
        args.append(str(interrupt_after))
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError("writer failed: %s" % out.stderr)
    return [json.loads(line) for line in out.stdout.splitlines()]
