"""The raft_start() configuration as Python keyword arguments.

raft_start() takes one text of ``key=value`` pairs separated by blanks
(docs/reference.md "Configuration keys").  config_text() builds that text from keyword
arguments: it checks each key's name against KEYS and its value's type, and
writes each value as raft_start() reads it (True as ``on`` or ``1``, a
mapping {id: address} as ``id@host:port,...``).  The ranges and the rules
between keys are raft_start()'s own: it names the key it refuses
(raftsql.Invalid).
"""

from __future__ import annotations

import difflib
import os
from typing import List, Literal, Mapping, Required, Tuple, TypedDict, Union

#: A path: text or an os.PathLike (e.g. pathlib.Path).
PathValue = Union[str, "os.PathLike[str]"]
#: Members as raft_start() writes them (``1@127.0.0.1:7001,2@...``) or as
#: a mapping of server id to its ``host:port``.
MemberList = Union[str, Mapping[int, str]]


class Config(TypedDict, total=False):
    """The keyword arguments of raftsql.start(), one per key of raft_start()
    (docs/reference.md "Configuration keys" says what each does).  A key left out, or
    given as None, takes raft_start()'s default."""

    id: Required[int]
    listen: str
    advertise: str
    cluster: MemberList
    dial: MemberList
    dir: PathValue
    election_timeout_ms: int
    heartbeat_ms: int
    exec_timeout_ms: int
    lease_timeout_ms: int
    log_max_mb: int
    max_request_bytes: int
    log_level: Literal["debug", "info", "warn", "error"]
    snapshot_threshold: int
    trailing_entries: int
    snapshot_chunk_bytes: int
    snapshot_rate_mb: int
    follower_apply_ms: int
    max_staleness_ms: int
    max_request_steps: int
    request_id_window: int
    request_id_window_ms: int
    max_result_bytes: int
    join: str
    force_new_cluster: bool
    bootstrap_from: PathValue
    tls_cert: PathValue
    tls_key: PathValue
    tls_ca: PathValue
    secret_file: PathValue
    insecure: bool
    checksum: bool
    socket: bool
    socket_group: str
    socket_max_clients: int
    repair: Literal["auto", "manual"]


#: The keys raft_start() knows (docs/reference.md lists them).
KEYS: Tuple[str, ...] = tuple(Config.__annotations__)

_INT = ("id", "election_timeout_ms", "heartbeat_ms", "exec_timeout_ms",
        "lease_timeout_ms", "log_max_mb", "max_request_bytes",
        "snapshot_threshold", "trailing_entries", "snapshot_chunk_bytes",
        "snapshot_rate_mb",
        "follower_apply_ms", "max_staleness_ms", "max_request_steps",
        "request_id_window", "request_id_window_ms", "max_result_bytes",
        "socket_max_clients")
_TEXT = ("listen", "advertise", "join", "socket_group")
_PATH = ("dir", "bootstrap_from", "tls_cert", "tls_key", "tls_ca",
         "secret_file")
_MEMBERS = ("cluster", "dial")
_ON_OFF = ("insecure", "checksum", "socket")
_ZERO_ONE = ("force_new_cluster",)
_CHOICES: Mapping[str, Tuple[str, ...]] = {
    "log_level": ("debug", "info", "warn", "error"),
    "repair": ("auto", "manual"),
}


def _word(key: str, text: str) -> str:
    """@text as the value of @key: refused (ValueError) when empty or when
    it holds a blank, which raft_start()'s text cannot carry."""
    if text == "":
        raise ValueError("raftsql.start: %s: the value is empty" % key)
    if any(c.isspace() for c in text):
        raise ValueError("raftsql.start: %s: %r holds a blank, which "
                         "raft_start()'s configuration cannot carry"
                         % (key, text))
    return text


def _type_error(key: str, want: str, value: object) -> TypeError:
    """The TypeError for @value, of the wrong type for @key (@want says what
    it takes)."""
    return TypeError("raftsql.start: %s: takes %s, not %s (%r)"
                     % (key, want, type(value).__name__, value))


def _members(key: str, value: object) -> str:
    """The text of the member list @value given for @key."""
    if isinstance(value, str):
        return _word(key, value)
    if not isinstance(value, Mapping):
        raise _type_error(key, "'id@host:port,...' text or a mapping "
                          "{id: 'host:port'}", value)
    if not value:
        raise ValueError("raftsql.start: %s: the mapping is empty" % key)
    parts: List[str] = []
    for server, address in value.items():
        if isinstance(server, bool) or not isinstance(server, int):
            raise _type_error(key + " (a server id)", "an int", server)
        if not isinstance(address, str):
            raise _type_error("%s (server %d's address)" % (key, server),
                              "'host:port' text", address)
        parts.append("%d@%s" % (server, _word(key, address)))
    return ",".join(parts)


def _value(key: str, value: object) -> str:
    """The text raft_start() reads for @value given for @key (a known
    key)."""
    if key in _INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _type_error(key, "an int", value)
        return str(value)
    if key in _ON_OFF or key in _ZERO_ONE:
        if not isinstance(value, bool):
            raise _type_error(key, "a bool", value)
        if key in _ON_OFF:
            return "on" if value else "off"
        return "1" if value else "0"
    if key in _CHOICES:
        if not isinstance(value, str):
            raise _type_error(key, "text", value)
        if value not in _CHOICES[key]:
            raise ValueError("raftsql.start: %s: %r is none of %s"
                             % (key, value, ", ".join(_CHOICES[key])))
        return value
    if key in _PATH:
        if not isinstance(value, (str, os.PathLike)):
            raise _type_error(key, "a path (str or os.PathLike)", value)
        path = os.fspath(value)
        if not isinstance(path, str):
            raise _type_error(key, "a path (str or os.PathLike)", value)
        return _word(key, path)
    if key in _MEMBERS:
        return _members(key, value)
    if not isinstance(value, str):
        raise _type_error(key, "text", value)
    return _word(key, value)


def config_text(config: Mapping[str, object]) -> str:
    """raft_start()'s configuration text for the keyword arguments
    @config (a key given as None is left out).

    Raises TypeError naming the key for an unknown key (with the known key
    nearest to it) or a value of the wrong type, and ValueError naming the
    key for a value raft_start()'s text cannot carry (empty, with a blank)
    or a choice it does not know (log_level, repair)."""
    pairs: List[str] = []
    for key, value in config.items():
        if key not in KEYS:
            near = difflib.get_close_matches(key, KEYS, n=1)
            raise TypeError("raftsql.start: unknown configuration key %r%s "
                            "(known: %s)" % (key, (" (did you mean %r?)"
                                                   % near[0]) if near else "",
                                             ", ".join(KEYS)))
        if value is None:
            continue
        pairs.append("%s=%s" % (key, _value(key, value)))
    return " ".join(pairs)
