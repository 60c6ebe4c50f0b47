"""raftsql for Python: the SQLite extension that makes a database one
replica of a Raft group, packaged with its loadable library.

    import sqlite3, raftsql

    conn = sqlite3.connect("node1.db", isolation_level=None)
    raftsql.load(conn)
    raftsql.start(conn, id=1, cluster={1: "127.0.0.1:7001",
                                       2: "127.0.0.1:7002",
                                       3: "127.0.0.1:7003"})
    raftsql.execute(conn, "INSERT INTO kv VALUES(?, ?)", "k", "v")
    print(raftsql.status(conn)["role"])

load() is all a program needs: the SQL functions (raft_exec, raft_status,
...; docs/reference.md "SQL functions") then work on every connection of the process
to a file a node serves.  start(), stop(), status(), leader() and execute()
call those functions and raise their errors as raftsql.Error subclasses
that carry the RAFTSQL_* code (errors.py); mapped_errors() does the same
for a caller's own conn.execute("SELECT raft_...").

Each function takes a sqlite3.Connection and may be called from any thread
that may use that connection (Python's check_same_thread rule); the
node's own work runs on threads of the extension.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from typing import TYPE_CHECKING, Any, Dict, Optional

from .config import KEYS, Config, config_text
from .errors import (CODES, Busy, Diverged, Error, Full, Interrupted,
                     InterruptedOutcomeUnknown, Invalid, NoNode, NotApplied,
                     OutcomeUnknown, Refused, Removed, SQLiteError, Stale,
                     TooBig, error_class, error_from, is_own_code,
                     mapped_errors)

if TYPE_CHECKING:
    if sys.version_info >= (3, 12):
        from typing import Unpack
    else:
        from typing_extensions import Unpack

__all__ = [
    "CODES", "KEYS", "Config", "Busy", "Diverged", "Error", "Full",
    "Interrupted", "InterruptedOutcomeUnknown", "Invalid", "NoNode",
    "NotApplied", "OutcomeUnknown", "Refused", "Removed", "SQLiteError",
    "Stale", "TooBig", "error_class", "error_from", "is_own_code",
    "mapped_errors", "path", "load", "start", "stop", "status", "leader",
    "execute",
]

_LIBRARY = "raftsql.so"


def path() -> str:
    """The absolute path of the loadable extension this package ships
    (``.../raftsql/raftsql.so``), for sqlite3.Connection.load_extension or
    any other SQLite host (``.load`` in the sqlite3 shell).

    Raises FileNotFoundError when the file is missing (a copy of the
    package's sources that was never built: install it with pip)."""
    lib = os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY)
    if not os.path.isfile(lib):
        raise FileNotFoundError(
            "raftsql: %s is missing: this raftsql package was not built; "
            "install it with pip (README \"From Python\")" % lib)
    return lib


def load(conn: sqlite3.Connection) -> None:
    """Load raftsql into @conn: enables extension loading, loads path(),
    and disables extension loading again (also when the load fails).

    Once loaded into one connection, raftsql is in the whole process: its
    guard watches every connection opened afterwards, and its functions are
    registered on each.  Raises RuntimeError when this Python's sqlite3
    module cannot load extensions (use Debian's /usr/bin/python3), and
    SQLiteError when SQLite cannot load the library (its text says why,
    e.g. a shared library missing)."""
    if not hasattr(conn, "enable_load_extension"):
        raise RuntimeError(
            "raftsql.load: this Python's sqlite3 module was built without "
            "loadable extensions (no enable_load_extension); use one that "
            "has them, such as Debian's /usr/bin/python3")
    lib = path()
    conn.enable_load_extension(True)
    try:
        with mapped_errors():
            conn.load_extension(lib)
    finally:
        conn.enable_load_extension(False)


def _call(conn: sqlite3.Connection, sql: str, *params: Any) -> Any:
    """The one value of @sql (a SELECT of one raft_* function) run on @conn
    with @params; its error as a raftsql Error."""
    with mapped_errors():
        return conn.execute(sql, params).fetchone()[0]


def start(conn: sqlite3.Connection, **config: Unpack[Config]) -> str:
    """Start this process's node for @conn's main database file, with the
    keys of raft_start() as keyword arguments (Config lists them; docs/reference.md
    "Configuration keys"), e.g. ``start(conn, id=1, cluster={1:
    "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: "127.0.0.1:7003"},
    election_timeout_ms=300)``.  A value None leaves its key out.

    Returns raft_start()'s line saying where the node listens.  Raises
    TypeError for an unknown key or a value of the wrong type, ValueError
    for a value raft_start() cannot be given (empty, with a blank, an
    unknown choice), each naming the key, before anything starts; Invalid
    when raft_start() refuses the configuration (a value out of range, keys
    that do not go together: its text names the key), and another Error
    (SQLiteError for most) when the node cannot start: it cannot listen, a
    node already runs for the file in another process; its text says
    why."""
    return str(_call(conn, "SELECT raft_start(?)", config_text(config)))


def stop(conn: sqlite3.Connection) -> str:
    """Stop the node serving @conn's database file (raft_stop(): a leader
    first hands its leadership on).  Returns raft_stop()'s answer
    (``"stopped"``).  Raises NoNode when none runs."""
    return str(_call(conn, "SELECT raft_stop()"))


def status(conn: sqlite3.Connection) -> Dict[str, Any]:
    """raft_status() of the node serving @conn's database file, as a dict
    (docs/reference.md "raft_status() fields": id, role, term, leader, commit,
    applied, peers, ...).  Raises NoNode when no node serves the file."""
    result: Dict[str, Any] = json.loads(_call(conn, "SELECT raft_status()"))
    return result


def leader(conn: sqlite3.Connection) -> Optional[int]:
    """The id of the leader the node serving @conn's file knows
    (raft_leader()), or None when it knows none yet.  Raises NoNode when no
    node serves the file."""
    value = _call(conn, "SELECT raft_leader()")
    return None if value is None else int(value)


def execute(conn: sqlite3.Connection, sql: str, *params: Any) -> int:
    """Run the write @sql with @params (bound by position: None, int, float,
    str or bytes) through the cluster with raft_exec(); returns the number
    of rows changed, once the write is applied on this node.

    Raises the raftsql Error of its code: NotApplied (retry), OutcomeUnknown
    (read before retrying), Invalid (e.g. inside a transaction), Refused
    (SQL raft_exec does not replicate), NoNode, SQLiteError for a SQL
    error of the write (rolled back on every node), ... (docs/errors.md, "What
    happens on errors")."""
    placeholders = ", ".join("?" for _ in range(len(params) + 1))
    return int(_call(conn, "SELECT raft_exec(%s)" % placeholders, sql,
                     *params))
