#!/usr/bin/python3
"""bench/snapshot_pace.py: the 1-client write p99 while a snapshot is sent,
against snapshot_rate_mb (docs/performance.md "A snapshot transfer paced
while writes go on").

For each round (ROUNDS, default 3) and each rate of RATES (MiB a second,
default "0 100"; 0 is unpaced), interleaved: node 1 founds a cluster from
bench/scale.py's cached source of SIZE GB (default 0.1; built once under
build/scale/ by bench/scale.sh), nodes 2 and 3 join, one client writes
through node 1's attach socket (raft_exec of a fresh 1000-byte row) for
3 s, then node 4 joins (a snapshot is sent to it) under the same writes.
Prints, per run, the p99 of the writes before the join (base) and during
it, their ratio (the issue 25 target is <= 2), and the join's seconds;
then each rate's median ratio over the rounds. Needs build/raftsql.so and
build/raftsql-testhost (make all), and RAFTSQL_SO pointing at the first.
"""

import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import scale  # noqa: E402
from scale import Cluster, connect, key, pct, wait_until, VALUE_LEN  # noqa


EXTRA = scale.EXTRA.replace("log_level=warn", "log_level=error")


def run(size, rate, work):
    """(base p99 ms, during p99 ms, join s) of one run at @rate."""
    scale.EXTRA = EXTRA + " snapshot_rate_mb=%d" % rate
    src = os.path.join(ROOT, "build", "scale", "kv-%sgb.db" % size)
    if not os.path.exists(src):
        sys.exit("%s is missing: run SIZES=%s bench/scale.sh once" %
                 (src, size))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    c = Cluster(work)
    try:
        c.spawn(1, "cluster=1@127.0.0.1:%d bootstrap_from=%s" % (
            c.ports[0], src))
        wait_until("node 1 leads",
                   lambda: c.nodes[1].value("SELECT raft_leader()") == 1, 60)
        c.join_wait(2, 600)
        c.join_wait(3, 600)
        con = connect(c.nodes[1].db)
        samples = []
        done = threading.Event()

        def write():
            n = 10 ** 9
            while not done.is_set():
                n += 1
                t = time.monotonic()
                con.execute("SELECT raft_exec('INSERT OR REPLACE INTO "
                            "kv(k, v, n) VALUES(?, ?, ?)', ?, ?, ?)",
                            (key(n), os.urandom(VALUE_LEN), n)).fetchall()
                samples.append((t, time.monotonic() - t))
        th = threading.Thread(target=write)
        th.start()
        try:
            time.sleep(3)
            began = time.monotonic()
            c.join_wait(4, 600)
            ended = time.monotonic()
        finally:
            done.set()
            th.join()
            con.close()
        base = [x for t, x in samples if t < began]
        during = [x for t, x in samples if began <= t < ended]
        return pct(base, 99) * 1000, pct(during, 99) * 1000, ended - began
    finally:
        c.stop()


def main():
    rounds = int(os.environ.get("ROUNDS", "3"))
    rates = [int(r) for r in os.environ.get("RATES", "0 100").split()]
    size = os.environ.get("SIZE", "0.1")
    work = tempfile.mkdtemp(prefix="raftsql-pace-",
                            dir=os.path.join(ROOT, "build"))
    ratios = {r: [] for r in rates}
    try:
        for i in range(rounds):
            for r in rates:
                base, during, join_s = run(size, r, work)
                ratios[r].append(during / base)
                print("round %d snapshot_rate_mb=%d: write p99 %.2f ms "
                      "before, %.2f ms during the join (%.2f x); join "
                      "%.2f s" % (i + 1, r, base, during, during / base,
                                  join_s), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for r in rates:
        print("snapshot_rate_mb=%d: median ratio %.2f (%s)" % (
            r, statistics.median(ratios[r]),
            " ".join("%.2f" % x for x in ratios[r])))


if __name__ == "__main__":
    main()
