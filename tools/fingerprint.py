"""Content fingerprint of a SQLite database, table by table.

Usage: python3 tools/fingerprint.py DBFILE

Prints `<table> <rowcount> <sha256>` per user table, sorted by name, leaving
out sqlite_* and raftsql_* (internal) tables. The hash is SHA-256 of the
stock sqlite3 shell's list-mode output ('|' separator, no header, NULL as
empty) of SELECT * FROM <table> ORDER BY <primary key> (rowid when the table
has none), so the result compares with ../shared/data/chinook's
expected-fingerprint.txt. Needs the sqlite3 shell.
"""

import hashlib
import sqlite3
import subprocess
import sys


def quote(name):
    return '"' + name.replace('"', '""') + '"'


def shell_output(db, sql):
    """The sqlite3 shell's list-mode output of sql on db, as bytes."""
    return subprocess.run(
        ["sqlite3", "-init", "/dev/null", "-batch", "-readonly", "-noheader",
         "-list", "-separator", "|", "-nullvalue", "", db, sql],
        check=True, stdout=subprocess.PIPE).stdout


def fingerprint(db):
    """Return [(table, rowcount, sha256 hex)] for db, sorted by name."""
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
            "AND name NOT LIKE 'raftsql\\_%' ESCAPE '\\'")]
        result = []
        for t in sorted(tables, key=lambda s: s.encode()):
            pk = [r[1] for r in sorted(
                (r for r in con.execute(
                    "SELECT pk, name FROM pragma_table_info(?)", (t,))
                 if r[0] > 0))]
            order = ", ".join(quote(c) for c in pk) or "rowid"
            count = con.execute("SELECT count(*) FROM %s" % quote(t))
            count = count.fetchone()[0]
            out = shell_output(db, "SELECT * FROM %s ORDER BY %s;" %
                               (quote(t), order))
            result.append((t, count, hashlib.sha256(out).hexdigest()))
        return result
    finally:
        con.close()


def render(fp):
    return "".join("%s %d %s\n" % row for row in fp)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: fingerprint.py DBFILE")
    sys.stdout.write(render(fingerprint(sys.argv[1])))
