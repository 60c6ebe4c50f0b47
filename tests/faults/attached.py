"""An attached writer: a process of its own that loaded raftsql on a
node's database file, so that its plain SQL writes (and any raftsql call)
go through that node's socket (README "From other processes"). Driven as
raftsql-testhost is: one request a line on stdin, a JSON array [sql,
param...] (numbers, strings, null), one JSON line a request on stdout,
{"rows": [[...], ...]} or {"error": "<message>", "code": N} with SQLite's
extended code. At end of input it closes its connection and exits 0.

Usage: python3 attached.py DBFILE SO_PATH_WITHOUT_SUFFIX BUSY_TIMEOUT_S
"""

import json
import sqlite3
import sys


def main():
    db, so, busy_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    con = sqlite3.connect(db, timeout=busy_s, isolation_level=None)
    con.enable_load_extension(True)
    con.load_extension(so)
    con.enable_load_extension(False)
    for line in sys.stdin:
        text, *params = json.loads(line)
        try:
            out = {"rows": [list(r) for r in
                            con.execute(text, params).fetchall()]}
        except sqlite3.Error as e:
            out = {"error": str(e),
                   "code": getattr(e, "sqlite_errorcode", None) or 1}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    con.close()


if __name__ == "__main__":
    main()
