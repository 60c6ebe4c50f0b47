"""A pool of client threads that record their operations in a history:
the frame of the register and list-append workloads (registers.py,
appends.py). Each thread is one history process, "<name>-<n>", and runs
one operation at a time through a random node until stopped."""

import random
import threading
import time

import paths


class Clients:
    """n_clients threads over cluster (a FaultCluster whose schema is in
    place), each calling self.operation(process, slot, rng) in a loop;
    start(), then stop() to join them. Subclasses set name and define
    operation."""

    name = "client"

    def __init__(self, cluster, seed, n_clients, request_timeout, history):
        self.cluster = cluster
        self.seed = seed
        self.n_clients = n_clients
        self.request_timeout = request_timeout
        self.history = history
        self.stopping = threading.Event()
        self.threads = []
        self.lock = threading.Lock()
        self.stuck = []       # lines: requests that never returned
        self.errors = []      # lines: operations that raised in the harness

    def start(self):
        for c in range(self.n_clients):
            rng = random.Random("%d-%s-%d" % (self.seed, self.name, c))
            self.threads.append(threading.Thread(
                target=self._client, args=("%s-%d" % (self.name, c + 1),
                                           rng), daemon=True))
        for t in self.threads:
            t.start()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(self.request_timeout + 30)
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            self.stuck.append("%s threads still running: %s" % (self.name,
                                                                alive))

    def _client(self, process, rng):
        ids = self.cluster.ids
        while not self.stopping.is_set():
            slot = self.cluster.slots[rng.choice(ids)]
            try:
                self.operation(process, slot, rng)
            except Exception as e:  # the harness: recorded, shown as a check
                with self.lock:
                    self.errors.append("%s: %s: %s" % (
                        process, type(e).__name__, e))
                return
            time.sleep(rng.uniform(0, 0.01))

    def run(self, op, out):
        """Complete history op with paths.Outcome out (its value for ok);
        return out."""
        if out.timed_out:
            with self.lock:
                self.stuck.append(out.error)
        self.history.complete(op, out.type, out.value if out.type == "ok"
                              else None, out.error)
        return out

    def request(self, op, slot, text, *params, result=None):
        """Run text on slot's node for history op, completing it; return
        the paths.Outcome. result maps an ok answer's rows to the op's
        value, or to an Outcome that replaces the answer's."""
        try:
            out = paths.request(slot, self.request_timeout, text, *params)
        except paths.NotSent as e:
            out = paths.Outcome("fail", error=str(e))
        if out.type == "ok" and result is not None:
            value = result(out.value)
            out = value if isinstance(value, paths.Outcome) else \
                paths.Outcome("ok", value)
        return self.run(op, out)

    def plain(self, op, slot, channel, steps, busy_s):
        """Run the plain transaction steps (paths.plain) for history op,
        completing it; return the paths.Outcome."""
        try:
            out = paths.plain(self.cluster, slot, channel,
                              self.request_timeout, busy_s, steps)
        except paths.NotSent as e:
            out = paths.Outcome("fail", error=str(e))
        return self.run(op, out)
