"""raftsql's result codes and the exceptions that carry them.

Every error of a raft_* SQL function reaches Python as a sqlite3.Error
whose ``sqlite_errorcode`` is raftsql's extended result code (the
``RAFTSQL_*`` of ext/raftsql.h, SQLite's layout: primary | (n << 8)) or,
for a SQL error of the write itself, SQLite's own.  error_from() turns such
an exception into an instance of the class below that names its code, so
that a caller catches what it can act on (``except raftsql.NotApplied:``
retry) instead of comparing numbers.  The classes derive from
sqlite3.Error, so code that catches that still catches them.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Dict, Iterator, Mapping, Optional, Tuple, Type

# SQLite's primary result codes that raftsql's codes build on
# (https://sqlite.org/rescode.html).
_SQLITE_ERROR = 1
_SQLITE_BUSY = 5
_SQLITE_INTERRUPT = 9
_SQLITE_FULL = 13
_SQLITE_CANTOPEN = 14
_SQLITE_TOOBIG = 18
_SQLITE_AUTH = 23


def _own(primary: int, n: int) -> int:
    """The extended result code raftsql numbers @n (101 to 199) on SQLite's
    @primary code, as ext/raftsql.h defines it."""
    return primary | (n << 8)


#: Every RAFTSQL_* result code of ext/raftsql.h, by name: the number that
#: ``sqlite3.Error.sqlite_errorcode`` and ``Error.code`` carry.
CODES: Mapping[str, int] = {
    "RAFTSQL_NOT_APPLIED": _own(_SQLITE_BUSY, 101),
    "RAFTSQL_BUSY": _own(_SQLITE_BUSY, 102),
    "RAFTSQL_STALE": _own(_SQLITE_BUSY, 103),
    "RAFTSQL_DIVERGED": _own(_SQLITE_BUSY, 104),
    "RAFTSQL_FULL": _own(_SQLITE_FULL, 105),
    "RAFTSQL_TOOBIG": _own(_SQLITE_TOOBIG, 106),
    "RAFTSQL_UNKNOWN": _own(_SQLITE_ERROR, 107),
    "RAFTSQL_INTERRUPTED": _own(_SQLITE_INTERRUPT, 108),
    "RAFTSQL_INTERRUPTED_UNKNOWN": _own(_SQLITE_INTERRUPT, 109),
    "RAFTSQL_INVALID": _own(_SQLITE_ERROR, 110),
    "RAFTSQL_NO_NODE": _own(_SQLITE_CANTOPEN, 111),
    "RAFTSQL_REMOVED": _own(_SQLITE_ERROR, 112),
    "RAFTSQL_REFUSED": _own(_SQLITE_AUTH, 113),
}


def is_own_code(code: int) -> bool:
    """Whether @code (an extended result code) is one of raftsql's own, as
    RAFTSQL_IS_OWN_CODE() of ext/raftsql.h says: n from 101 to 199."""
    return 101 <= (code >> 8) <= 199


class Error(sqlite3.Error):
    """An error of a raftsql function.

    Attributes:
        code: the extended result code (an int): a ``RAFTSQL_*`` number
            (see CODES) or, for SQLiteError, SQLite's own.
        name: the code's name, e.g. ``"RAFTSQL_NOT_APPLIED"`` or
            ``"SQLITE_CONSTRAINT_PRIMARYKEY"``.
        message: the function's text, e.g. ``"raft_exec: not applied:
            ..."`` (also ``str(error)``).

    ``sqlite_errorcode`` and ``sqlite_errorname`` hold the same as code and
    name, as on any sqlite3.Error.  The sqlite3.Error it was made from is
    its ``__cause__`` when raised by this package.
    """

    def __init__(self, message: str, code: int, name: str) -> None:
        """Make the error of text @message with extended result code @code
        named @name."""
        super().__init__(message)
        self.message: str = message
        self.code: int = code
        self.name: str = name
        self.sqlite_errorcode: int = code
        self.sqlite_errorname: str = name

    def __reduce__(self) -> Tuple[Type["Error"], Tuple[str, int, str]]:
        """Pickle as the class and the three arguments of __init__ (the
        default would call it with the message only)."""
        return (type(self), (self.message, self.code, self.name))


class SQLiteError(Error):
    """An error with SQLite's own code, none of raftsql's: a SQL error of
    the write (a constraint, a missing table: rolled back on every node,
    applied nowhere), or another failure (a raft_start that cannot listen,
    an extension that cannot be loaded).  Fix the request or the data."""


class NotApplied(Error):
    """RAFTSQL_NOT_APPLIED: not applied anywhere (no leader by the deadline,
    the node shutting down, the leader refused a forward); retry as it
    is."""


class Busy(Error):
    """RAFTSQL_BUSY: not done, the node or its socket is busy (its queue, a
    pending membership change or load); retry later."""


class Stale(Error):
    """RAFTSQL_STALE: a read barrier could not be confirmed in time (no
    quorum, no leader); retry later or on another node."""


class Diverged(Error):
    """RAFTSQL_DIVERGED: this replica took a write the node did not make and
    is being repaired; nothing applied: retry on another node, or here after
    the repair."""


class Full(Error):
    """RAFTSQL_FULL: the log reached log_max_mb or its disk is full; nothing
    applied: writes resume once space is freed."""


class TooBig(Error):
    """RAFTSQL_TOOBIG: the request is over max_request_bytes; nothing
    applied, and a retry as it is fails alike: split it."""


class OutcomeUnknown(Error):
    """RAFTSQL_UNKNOWN: the request left this node, but whether it applies
    is not known (it ends up applied on all nodes or on none).  Read before
    retrying, or retry with raft_exec_id and the same id."""


class Interrupted(Error):
    """RAFTSQL_INTERRUPTED: the caller's connection was interrupted before
    the request left this node; nothing applied."""


class InterruptedOutcomeUnknown(Interrupted, OutcomeUnknown):
    """RAFTSQL_INTERRUPTED_UNKNOWN: interrupted after the request left this
    node: as OutcomeUnknown (``except raftsql.OutcomeUnknown`` catches
    both)."""


class Invalid(Error):
    """RAFTSQL_INVALID: bad arguments or configuration, a request with a
    syntax error, raft_exec inside a transaction, ...: the call cannot
    succeed whatever the data.  Fix the call."""


class NoNode(Error):
    """RAFTSQL_NO_NODE: no raftsql node runs for the database file in this
    process or another of the machine, or this process may not use its
    socket.  Start one (raftsql.start) or fix the permissions."""


class Removed(Error):
    """RAFTSQL_REMOVED: this node was removed from the cluster; nothing
    applied: write on a member."""


class Refused(Error):
    """RAFTSQL_REFUSED: the request does what raft_exec does not replicate
    (VACUUM, ATTACH, TEMP objects, transaction control, ...); nothing
    applied: change the SQL."""


_CLASSES: Mapping[str, Type[Error]] = {
    "RAFTSQL_NOT_APPLIED": NotApplied,
    "RAFTSQL_BUSY": Busy,
    "RAFTSQL_STALE": Stale,
    "RAFTSQL_DIVERGED": Diverged,
    "RAFTSQL_FULL": Full,
    "RAFTSQL_TOOBIG": TooBig,
    "RAFTSQL_UNKNOWN": OutcomeUnknown,
    "RAFTSQL_INTERRUPTED": Interrupted,
    "RAFTSQL_INTERRUPTED_UNKNOWN": InterruptedOutcomeUnknown,
    "RAFTSQL_INVALID": Invalid,
    "RAFTSQL_NO_NODE": NoNode,
    "RAFTSQL_REMOVED": Removed,
    "RAFTSQL_REFUSED": Refused,
}

_NAMES: Dict[int, str] = {code: name for name, code in CODES.items()}


def error_class(code: int) -> Type[Error]:
    """The class of Error that stands for extended result code @code: one
    of raftsql's (e.g. NotApplied for RAFTSQL_NOT_APPLIED), else
    SQLiteError."""
    name = _NAMES.get(code)
    return _CLASSES[name] if name is not None else SQLiteError


def error_from(exc: sqlite3.Error) -> Error:
    """The raftsql Error standing for @exc, an exception a raft_* function
    raised through the sqlite3 module; @exc itself when it is one already.

    Raises ValueError when @exc carries no result code (an error of the
    sqlite3 module itself, e.g. a closed connection: not SQLite's)."""
    if isinstance(exc, Error):
        return exc
    code: Optional[int] = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        raise ValueError("raftsql.error_from: %s has no SQLite result code "
                         "(sqlite_errorcode): %s" % (type(exc).__name__, exc))
    name = _NAMES.get(code) or getattr(exc, "sqlite_errorname", None) \
        or "unknown"
    return error_class(code)(str(exc), code, name)


@contextlib.contextmanager
def mapped_errors() -> Iterator[None]:
    """A context manager that re-raises each sqlite3.Error carrying a result
    code as its raftsql Error (error_from), the original as its __cause__;
    other exceptions pass unchanged.  For calls of raft_* functions made
    with conn.execute::

        with raftsql.mapped_errors():
            conn.execute("SELECT raft_exec(?, ?)", (sql, value))
    """
    try:
        yield
    except Error:
        raise
    except sqlite3.Error as exc:
        if getattr(exc, "sqlite_errorcode", None) is None:
            raise
        raise error_from(exc) from exc
