"""Content fingerprint of a SQLite database, table by table.

Usage: python3 tools/fingerprint.py DBFILE

Prints `<table> <rowcount> <sha256>` per user table, sorted by name, leaving
out sqlite_* and raftsql_* (internal) tables. The hash is SHA-256 of the
stock sqlite3 shell's list-mode output ('|' separator, no header, NULL as
empty) of SELECT * FROM <table> ORDER BY <primary key> (rowid when the table
has none), so the result compares with ../shared/data/chinook's
expected-fingerprint.txt. Needs the sqlite3 shell, which reads the file
for every step: a process that loaded raftsql has it on each of its
connections, whose guard refuses reads of a diverged or stale replica.
"""

import hashlib
import json
import subprocess
import sys


def quote(name):
    return '"' + name.replace('"', '""') + '"'


def shell_output(db, sql):
    """The sqlite3 shell's list-mode output of sql on db, as bytes."""
    return subprocess.run(
        ["sqlite3", "-init", "/dev/null", "-batch", "-readonly",
         "-cmd", ".timeout 10000", "-noheader", "-list", "-separator", "|", "-nullvalue", "", db, sql],
        check=True, stdout=subprocess.PIPE).stdout


def shell_rows(db, sql):
    """The rows of sql on db as lists, run by the sqlite3 shell (JSON
    mode)."""
    out = subprocess.run(
        ["sqlite3", "-init", "/dev/null", "-batch", "-readonly",
         "-cmd", ".timeout 10000", "-json", db, sql], check=True, text=True, stdout=subprocess.PIPE).stdout
    return [list(r.values()) for r in json.loads(out)] if out.strip() else []


def fingerprint(db):
    """Return [(table, rowcount, sha256 hex)] for db, sorted by name."""
    tables = [r[0] for r in shell_rows(
        db,
        "SELECT name FROM sqlite_master WHERE type = 'table' "
        "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
        "AND name NOT LIKE 'raftsql\\_%' ESCAPE '\\'")]
    result = []
    for t in sorted(tables, key=lambda s: s.encode()):
        pk = [r[1] for r in sorted(
            r for r in shell_rows(
                db, "SELECT pk, name FROM pragma_table_info('%s')" %
                t.replace("'", "''"))
            if r[0] > 0)]
        order = ", ".join(quote(c) for c in pk) or "rowid"
        count = shell_rows(db, "SELECT count(*) FROM %s" % quote(t))[0][0]
        out = shell_output(db, "SELECT * FROM %s ORDER BY %s;" %
                           (quote(t), order))
        result.append((t, count, hashlib.sha256(out).hexdigest()))
    return result


def render(fp):
    return "".join("%s %d %s\n" % row for row in fp)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: fingerprint.py DBFILE")
    sys.stdout.write(render(fingerprint(sys.argv[1])))
