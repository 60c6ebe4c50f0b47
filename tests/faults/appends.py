"""The list-append workload: transactions of appends and reads on a few
keys of a table lists (each key's value the appended numbers, space
separated), for the serializability checker (elle.py).

A transaction is 1 to 4 micro-operations, ["append", k, v] or
["r", k, None] (the read filled in when it completes), sent as one
multi-statement request (raft_exec when it only appends, raft_query when
it reads: its SELECTs' rows come back in order), or as a plain
transaction, BEGIN IMMEDIATE (or a deferred BEGIN) ... COMMIT, on the
node's own connection or its attached writer. Appended values are unique
per key (one counter per key, shared by the clients).
"""

import json

from clients import Clients
from workload import BUSY_S

KEYS = 5
SCHEMA = "CREATE TABLE lists(k INTEGER PRIMARY KEY, v TEXT NOT NULL); "
APPEND = ("INSERT INTO lists(k, v) VALUES(%s, %s) ON CONFLICT(k) "
          "DO UPDATE SET v = lists.v || ' ' || excluded.v")
READ = "SELECT v FROM lists WHERE k = %s"


def parse(rows):
    """A key's list from the rows of READ: [] when it has no row."""
    return [int(x) for x in rows[0][0].split()] if rows else []


def request_sql(mops):
    """The statements of transaction mops as one request's SQL text (the
    values are the workload's own integers: literals)."""
    return "; ".join(APPEND % (k, "'%d'" % v) if f == "append" else
                     READ % k for f, k, v in mops)


def fill(mops, reads):
    """mops with its reads, in order, taken from reads (lists)."""
    it = iter(reads)
    return [[f, k, next(it) if f == "r" else v] for f, k, v in mops]


def query_reads(mops, rows):
    """The completed mops of a raft_query answer's rows."""
    results = json.loads(rows[0][0])["results"]
    return fill(mops, [parse(r["rows"]) for r in results])


class Appends(Clients):
    """Clients of the list-append workload (see the module's
    docstring)."""

    name = "txn"

    def __init__(self, *args):
        super().__init__(*args)
        self.next_value = {}

    def value(self, k):
        with self.lock:
            v = self.next_value[k] = self.next_value.get(k, 0) + 1
            return v

    def operation(self, process, slot, rng):
        mops = []
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(1, KEYS + 1)
            if rng.random() < 0.5:
                mops.append(["append", k, self.value(k)])
            else:
                mops.append(["r", k, None])
        reads = any(f == "r" for f, _, _ in mops)
        h = self.history
        if rng.random() < 0.5:
            if reads:
                op = h.invoke(process, slot.id, "txn", mops, "query")
                self.request(op, slot, "SELECT raft_query(?)",
                             request_sql(mops),
                             result=lambda rows: query_reads(mops, rows))
            else:
                op = h.invoke(process, slot.id, "txn", mops, "exec")
                self.request(op, slot, "SELECT raft_exec(?)",
                             request_sql(mops), result=lambda rows: mops)
            return
        channel = rng.choice(("host", "attached"))
        begin = "BEGIN IMMEDIATE" if rng.random() < 0.7 else "BEGIN"
        op = h.invoke(process, slot.id, "txn", mops, "plain-" + channel)

        def steps(conn):
            conn(begin)
            got = []
            for f, k, v in mops:
                if f == "append":
                    conn(APPEND % ("?1", "?2"), k, str(v))
                else:
                    got.append(parse(conn(READ % "?1", k)))
            conn("COMMIT", commit=True)
            return fill(mops, got)
        self.plain(op, slot, channel, steps, BUSY_S)
