"""The fault network: one TCP proxy per directed peer link, on 127.0.0.1.

raftsql sends node a's messages to node b over a connection a dials to the
address b has in a's `dial=` string (else in `cluster=`), and b writes
back on it only its answer to a's handshake. Every node gets the same `cluster=` string (the real
addresses) and a `dial=` string naming its outgoing proxies (link (a, b)
listens on a port of its own and forwards to b's real listening port),
which puts every directed link in our hands:

- up: bytes pass, after `delay` seconds plus up to `jitter` more (in order:
  a TCP stream is never reordered); with `loss`, each chunk read is lost
  with that probability and comes late by a retransmission timeout (RTO
  seconds, doubled for each loss in a row of its connection, at most
  RTO_MAX), holding back what follows it: packet loss as TCP shows it to
  its reader (stalls, never a gap);
- hold: bytes are kept (and so are those still waiting for their delay)
  until the link is set up again, then delivered all at once, late;
- drop: bytes are read and thrown away while the connection stays open (a
  black hole); leaving drop closes the connections, since the receiver
  holds a partial frame;
- cut: open connections are closed and new ones closed on arrival (the
  sender sees its connection end and re-dials).

One thread runs every proxy (a selectors loop, nonblocking sockets);
other threads change links through Net methods, which run their change in
the loop and wait for it.
"""

import collections
import random
import selectors
import socket
import threading
import time

# Bytes held or delayed per connection before the proxy stops reading it
# (the sender then blocks, as it would on a slow link).
QUEUE_CAP = 64 << 20
CHUNK = 65536

MODES = ("up", "hold", "drop", "cut")
# Linux's minimum retransmission timeout, and the bound of its doubling.
RTO = 0.2
RTO_MAX = 3.2


class Pipe:
    """One proxied connection: `a` from the sending node, `b` to the
    receiver's real port (None while the link drops)."""

    def __init__(self, link, a, b):
        self.link = link
        self.a = a
        self.b = b
        self.queue = collections.deque()  # [due, bytes], due in time order
        self.queued = 0                   # bytes in queue
        self.last_due = 0.0
        self.losses = 0                   # chunks lost in a row
        self.blocked = False              # b's send buffer is full
        self.events_a = 0
        self.events_b = 0
        self.closed = False


class Link:
    """The directed link src -> dst: its proxy's listening socket and
    state. Read its fields only through Net."""

    def __init__(self, src, dst, target_port):
        self.src = src
        self.dst = dst
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.mode = "up"
        self.delay = 0.0
        self.jitter = 0.0
        self.loss = 0.0
        self.pipes = set()
        self.bytes_passed = 0
        self.bytes_dropped = 0


class Net:
    """Every directed link between the given nodes' real ports.

    real_ports: {node id: the port the node listens on}. Start with
    start(), end with close() (which closes every socket it made)."""

    def __init__(self, real_ports, seed=0):
        self.rng = random.Random(seed)  # jitter and loss only
        self.links = {}
        for src in real_ports:
            for dst, port in real_ports.items():
                if src != dst:
                    self.links[(src, dst)] = Link(src, dst, port)
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake",))
        for link in self.links.values():
            self.sel.register(link.listener, selectors.EVENT_READ,
                              ("accept", link))
        self.calls = collections.deque()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="faultnet",
                                       daemon=True)

    def port(self, src, dst):
        """The port node src dials to reach node dst."""
        return self.links[(src, dst)].port

    def start(self):
        self.thread.start()

    def close(self):
        """Stop the loop and close every socket."""
        if self.thread.is_alive():
            self._call(self._stop)
            self.thread.join(10)
        for link in self.links.values():
            for p in list(link.pipes):
                self._close_pipe(p)
            link.listener.close()
        self.sel.close()
        self.wake_r.close()
        self.wake_w.close()

    # ---- Control (any thread) ------------------------------------------

    def set(self, pairs, mode="up", delay=0.0, jitter=0.0, loss=0.0):
        """Put every link (src, dst) of pairs in mode (up with delay and
        jitter in seconds, and loss, the probability that a chunk is lost
        and retransmitted)."""
        assert mode in MODES
        assert 0.0 <= loss <= 1.0
        pairs = list(pairs)
        self._call(lambda: [self._set(self.links[p], mode, delay, jitter,
                                      loss) for p in pairs])

    def reset(self, pairs):
        """Close the open connections of the links (they are re-dialled)."""
        pairs = list(pairs)
        self._call(lambda: [self._reset(self.links[p]) for p in pairs])

    def heal(self):
        """Every link up, without delay."""
        self.set(self.links.keys())

    def state(self):
        """{(src, dst): (mode, delay, open connections)}."""
        return self._call(lambda: {k: (v.mode, v.delay, len(v.pipes))
                                   for k, v in self.links.items()})

    def _call(self, fn):
        if not self.thread.is_alive():
            return fn()
        done = threading.Event()
        box = []

        def run():
            try:
                box.append(fn())
            finally:
                done.set()

        self.calls.append(run)
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass
        if not done.wait(30):
            raise RuntimeError("fault network loop does not answer")
        return box[0] if box else None

    # ---- The loop (its thread only) ------------------------------------

    def _stop(self):
        self.stopping = True

    def _set(self, link, mode, delay, jitter, loss):
        old = link.mode
        link.mode, link.delay, link.jitter = mode, delay, jitter
        link.loss = loss
        if mode == "cut" or (old == "drop" and mode != "drop"):
            self._reset(link)
        elif mode == "drop":
            for p in link.pipes:
                p.queue.clear()
                p.queued = 0
        for p in list(link.pipes):
            self._interest(p)

    def _reset(self, link):
        for p in list(link.pipes):
            self._close_pipe(p)

    def _run(self):
        while not self.stopping:
            timeout = self._flush()
            for key, mask in self.sel.select(timeout):
                what = key.data
                if what[0] == "wake":
                    try:
                        while self.wake_r.recv(4096):
                            pass
                    except BlockingIOError:
                        pass
                    while self.calls:
                        self.calls.popleft()()
                elif what[0] == "accept":
                    self._accept(what[1])
                elif what[0] == "a":
                    self._read_a(what[1])
                elif what[0] == "b":
                    p = what[1]
                    if mask & selectors.EVENT_READ:
                        self._read_b(p)
                    if mask & selectors.EVENT_WRITE and not p.closed:
                        p.blocked = False
                        self._send(p)

    def _accept(self, link):
        try:
            a, _ = link.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        if link.mode == "cut":
            a.close()
            return
        b = None
        if link.mode != "drop":
            b = socket.socket()
            b.settimeout(1.0)
            try:
                b.connect(("127.0.0.1", link.target_port))
            except OSError:
                # The receiver is down: the sender sees its dial end.
                b.close()
                a.close()
                return
            b.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            b.setblocking(False)
        a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        a.setblocking(False)
        p = Pipe(link, a, b)
        link.pipes.add(p)
        self._interest(p)

    def _interest(self, p):
        """(Re-)register p's sockets for what the loop waits on."""
        if p.closed:
            return
        want_a = selectors.EVENT_READ if p.queued < QUEUE_CAP else 0
        self._register(p.a, p.events_a, want_a, ("a", p))
        p.events_a = want_a
        if p.b is not None:
            want_b = selectors.EVENT_READ
            if p.blocked:
                want_b |= selectors.EVENT_WRITE
            self._register(p.b, p.events_b, want_b, ("b", p))
            p.events_b = want_b

    def _register(self, sock, old, new, data):
        if old == new:
            return
        if old == 0:
            self.sel.register(sock, new, data)
        elif new == 0:
            self.sel.unregister(sock)
        else:
            self.sel.modify(sock, new, data)

    def _close_pipe(self, p):
        if p.closed:
            return
        p.closed = True
        for sock, ev in ((p.a, p.events_a), (p.b, p.events_b)):
            if sock is None:
                continue
            if ev:
                try:
                    self.sel.unregister(sock)
                except (KeyError, ValueError):
                    pass
            sock.close()
        p.link.pipes.discard(p)
        p.queue.clear()

    def _recv(self, p, sock):
        """A chunk read from sock of p, or None (nothing yet, or the end:
        then p is closed)."""
        try:
            data = sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            data = b""
        if not data:
            self._close_pipe(p)
            return None
        return data

    def _read_a(self, p):
        data = self._recv(p, p.a)
        if data is None:
            return
        link = p.link
        if link.mode == "drop" or p.b is None:
            link.bytes_dropped += len(data)
            return
        now = time.monotonic()
        due = now + link.delay
        if link.jitter > 0:
            due += self.rng.uniform(0, link.jitter)
        if link.loss > 0 and self.rng.random() < link.loss:
            due += min(RTO * (2 ** p.losses), RTO_MAX)
            p.losses += 1
        else:
            p.losses = 0
        due = max(due, p.last_due)
        p.last_due = due
        p.queue.append([due, data])
        p.queued += len(data)
        if p.queued >= QUEUE_CAP:
            self._interest(p)
        self._send(p)

    def _read_b(self, p):
        # raftsql writes only its answer to the handshake on an accepted
        # connection; pass anything through, and notice the receiver
        # closing.
        data = self._recv(p, p.b)
        if data is None:
            return
        try:
            p.a.send(data)
        except OSError:
            pass

    def _send(self, p):
        """Send what is due of p's queue; keep the rest."""
        if p.closed or p.b is None or p.link.mode != "up" or p.blocked:
            return
        now = time.monotonic()
        was_full = p.queued >= QUEUE_CAP
        while p.queue and p.queue[0][0] <= now:
            item = p.queue[0]
            try:
                n = p.b.send(item[1])
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                self._close_pipe(p)
                return
            p.link.bytes_passed += n
            p.queued -= n
            if n < len(item[1]):
                item[1] = item[1][n:]
                p.blocked = True
                break
            p.queue.popleft()
        if was_full or p.blocked or p.events_b & selectors.EVENT_WRITE:
            self._interest(p)

    def _flush(self):
        """Send what is due everywhere; return the select timeout."""
        timeout = 0.5
        now = time.monotonic()
        for link in self.links.values():
            if link.mode != "up":
                continue
            for p in list(link.pipes):
                if p.queue:
                    self._send(p)
                if p.queue and not p.closed and not p.blocked:
                    timeout = min(timeout, max(0.0, p.queue[0][0] - now))
        return timeout
