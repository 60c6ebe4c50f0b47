"""The clock workload, for the monotonic "now" checker (monotonic.py):
clients inserting the entry's "now" through raft_exec on random nodes,
each row naming its writer ([client, n], the history's value of the
"stamp" operation); at the end the table is read once, in rowid (log)
order, through raft_query (final_read)."""

import json

from clients import Clients

SCHEMA = ("CREATE TABLE clock(v TEXT NOT NULL, client INTEGER NOT NULL, "
          "n INTEGER NOT NULL); ")
STAMP = ("INSERT INTO clock(v, client, n) VALUES("
         "strftime('%Y-%m-%d %H:%M:%f', 'now'), ?1, ?2)")
READ = "SELECT rowid, v, client, n FROM clock ORDER BY rowid"


def query_rows(rows):
    """The rows of READ from raft_query's answer rows."""
    return json.loads(rows[0][0])["results"][0]["rows"]


class Clock(Clients):
    """Clients of the clock workload (see the module's docstring)."""

    name = "clock"

    def __init__(self, *args):
        super().__init__(*args)
        self.counts = {}

    def operation(self, process, slot, rng):
        cid = int(process.rsplit("-", 1)[1])
        n = self.counts[process] = self.counts.get(process, 0) + 1
        op = self.history.invoke(process, slot.id, "stamp", [cid, n],
                                 "exec")
        self.request(op, slot, "SELECT raft_exec(?1, ?2, ?3)", STAMP, cid, n,
                     result=lambda rows: [cid, n])
        # A few stamps a second are enough to cross every leader change.
        self.stopping.wait(rng.uniform(0.02, 0.08))
