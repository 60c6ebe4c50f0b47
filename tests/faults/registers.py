"""The register workload: a few keys of a table kv, each a register,
written and read through every path a client has, for the linearizability
checker (linearizable.py).

  write  raft_exec of an upsert; or a plain autocommit upsert, on the
         node's own connection or its attached writer
  cas    raft_exec of UPDATE ... WHERE v = old: ok when it changed a row,
         fail when none (it applied nothing)
  read   SELECT raft_barrier(), then a local SELECT, on the node's own
         connection or its attached writer; or raft_query of the SELECT

Values are unique per key (client number * 10^6 + the client's count).
"""

import json

import paths
from clients import Clients
from workload import BUSY_S

KEYS = 3
SCHEMA = "CREATE TABLE kv(k INTEGER PRIMARY KEY, v INTEGER NOT NULL); "
UPSERT = ("INSERT INTO kv(k, v) VALUES(?1, ?2) "
          "ON CONFLICT(k) DO UPDATE SET v = excluded.v")
CAS = "UPDATE kv SET v = ?3 WHERE k = ?1 AND v = ?2"
GET = "SELECT v FROM kv WHERE k = ?1"


def query_value(rows):
    """The register's value from raft_query's answer rows: None when the
    SELECT matched no row."""
    got = json.loads(rows[0][0])["results"][0]["rows"]
    return got[0][0] if got else None


class Registers(Clients):
    """Clients of the register workload (see the module's docstring)."""

    name = "reg"

    def __init__(self, *args):
        super().__init__(*args)
        self.counts = {}
        self.seen = {}      # key -> the latest value a read returned

    def operation(self, process, slot, rng):
        cid = int(process.rsplit("-", 1)[1])
        n = self.counts[process] = self.counts.get(process, 0) + 1
        key = rng.randrange(1, KEYS + 1)
        value = cid * 1000000 + n
        channel = rng.choice(("host", "attached"))
        p = rng.random()
        h = self.history
        if p < 0.3:
            op = h.invoke(process, slot.id, "write", value, "exec", key)
            self.request(op, slot, "SELECT raft_exec(?1, ?2, ?3)", UPSERT,
                         key, value, result=lambda rows: value)
        elif p < 0.45:
            op = h.invoke(process, slot.id, "write", value,
                          "plain-" + channel, key)

            def steps(conn):
                conn(UPSERT, key, value, commit=True)
                return value
            self.plain(op, slot, channel, steps, BUSY_S)
        elif p < 0.55:
            old = self.seen.get(key)
            if old is None:
                old = value - 1
            op = h.invoke(process, slot.id, "cas", [old, value], "exec",
                          key)
            self.cas(op, slot, key, old, value)
        elif p < 0.8:
            op = h.invoke(process, slot.id, "read", None,
                          "barrier-" + channel, key)

            def steps(conn):
                conn("SELECT raft_barrier()")
                rows = conn(GET, key)
                return rows[0][0] if rows else None
            self.note(key, self.plain(op, slot, channel, steps, BUSY_S))
        else:
            op = h.invoke(process, slot.id, "read", None, "query", key)
            self.note(key, self.request(op, slot, "SELECT raft_query(?1, "
                                        "?2)", GET, key, result=query_value))

    def cas(self, op, slot, key, old, new):
        """A compare-and-set through raft_exec: ok when it changed the
        row, fail when it changed none."""
        def result(rows):
            if rows[0][0] == 1:
                return [old, new]
            return paths.Outcome("fail", error="cas: the register did not "
                                 "hold %r" % (old,))
        self.request(op, slot, "SELECT raft_exec(?1, ?2, ?3, ?4)", CAS, key,
                     old, new, result=result)

    def note(self, key, out):
        """Remember what an ok read (its paths.Outcome out) returned, as a
        later cas's old value."""
        if out.type == "ok" and out.value is not None:
            self.seen[key] = out.value
