"""The power-loss fault: run a node under the shim (powerloss.c), and
after its SIGKILL ("the power fails") undo what the shim's journals say a
disk would have lost, before the node restarts.

restore(journal_dir, prefixes) reads every journal in journal_dir (one per
process that ran under the shim with POWERLOSS_DIR=journal_dir: the node's
earlier incarnations and its attached writers too, since a write that no
fsync covered stays unsynced across a mere kill -9), sorts the records by
seq (one CLOCK_MONOTONIC for all processes), and, newest first:
- undoes a WRITE or TRUNCATE of a file unless a later SYNC of that inode
  covers it (the old bytes written back, the size set back), never
  touching bytes that a later write on an O_DSYNC fd made durable;
- undoes a CREATE, UNLINK or RENAME unless a later SYNC of its directory
  (both directories, for a rename) covers it.
Then it deletes the hard links the shim kept, the journals, and every
SQLite -shm file under the prefixes: the wal-index is volatile (shared
memory on a file SQLite rebuilds when the first connection opens the
database after a crash), and on a real disk its contents after a power
loss would be any mix of its pages, which SQLite discards alike.
"""

import collections
import os
import shutil
import struct
import subprocess

HEADER = struct.Struct("<IIQQQQQQII")
MAGIC = 0x314a4c50
WRITE, WRITE_SYNCED, TRUNCATE, SYNC, CREATE, UNLINK, RENAME = range(1, 8)
NAMES = {WRITE: "write", WRITE_SYNCED: "synced write", TRUNCATE: "truncate",
         SYNC: "sync", CREATE: "create", UNLINK: "unlink", RENAME: "rename"}

Rec = collections.namedtuple("Rec", "type seq dev ino a b c path data")


class JournalError(Exception):
    """A journal that cannot be used (marked broken by the shim, or bad
    bytes before its end)."""


def read_journal(path):
    """The records of the journal at path, in file order; a record cut
    short at the end (the kill came during its write) is dropped.
    Raises JournalError."""
    if os.path.exists(path + ".broken"):
        raise JournalError("%s: the shim could not write it completely "
                           "(see the node's log)" % path)
    recs = []
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0
    while pos + HEADER.size <= len(buf):
        (magic, type_, seq, dev, ino, a, b, c, path_len,
         data_len) = HEADER.unpack_from(buf, pos)
        if magic != MAGIC or type_ not in NAMES:
            raise JournalError("%s: bad record at byte %d (magic %#x, type "
                               "%d)" % (path, pos, magic, type_))
        end = pos + HEADER.size + path_len + data_len
        if end > len(buf):
            break
        p = pos + HEADER.size
        recs.append(Rec(type_, seq, dev, ino, a, b, c,
                        buf[p:p + path_len].decode(errors="surrogateescape"),
                        buf[p + path_len:end]))
        pos = end
    return recs


def journals(journal_dir):
    """The journal files in journal_dir."""
    return sorted(os.path.join(journal_dir, n) for n in os.listdir(journal_dir)
                  if n.startswith("journal.") and not n.endswith(".broken"))


def inode_of(path):
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def minus(lo, hi, pins):
    """The parts of [lo, hi) outside every (plo, phi) of pins."""
    parts = [(lo, hi)] if lo < hi else []
    for plo, phi in pins:
        nxt = []
        for a, b in parts:
            if phi <= a or plo >= b:
                nxt.append((a, b))
                continue
            if a < plo:
                nxt.append((a, plo))
            if phi < b:
                nxt.append((phi, b))
        parts = nxt
    return parts


class Restore:
    """One restore: the undone and the kept counts, for the fault's line."""

    def __init__(self, recs):
        self.recs = sorted(recs, key=lambda r: r.seq)
        self.synced = {}   # (dev, ino) -> the latest SYNC's seq
        self.paths = collections.defaultdict(set)  # (dev, ino) -> paths
        for r in self.recs:
            if r.type == SYNC:
                key = (r.dev, r.ino)
                self.synced[key] = max(self.synced.get(key, 0), r.seq)
            elif r.type in (WRITE, WRITE_SYNCED, TRUNCATE):
                self.paths[(r.dev, r.ino)].add(r.path)
        self.pins = collections.defaultdict(list)
        self.undone = collections.Counter()
        self.kept = collections.Counter()
        self.missing = 0   # changes to a file no longer found
        self.lines = []    # what was undone, for the restore's log
        self.bytes = collections.Counter()  # path -> bytes written back
        self.n_undone = collections.Counter()  # path -> changes undone

    def durable(self, key, seq):
        return self.synced.get(key, 0) > seq

    def locate(self, key):
        """A path where the inode key is now, None when none is."""
        for p in sorted(self.paths[key]):
            if inode_of(p) == key:
                return p
        return None

    def run(self):
        undo = {WRITE: self.undo_content, TRUNCATE: self.undo_content,
                CREATE: self.undo_create, UNLINK: self.undo_unlink,
                RENAME: self.undo_rename}
        for r in reversed(self.recs):
            if r.type == SYNC:
                continue
            name = NAMES[r.type]
            if r.type == WRITE_SYNCED:
                self.pins[(r.dev, r.ino)].append((r.a, r.a + r.b))
                durable = True
            elif r.type == RENAME:
                durable = self.durable((r.dev, r.ino), r.seq) and \
                    self.durable((r.a, r.b), r.seq)
            else:
                # A file's own inode; a create's or unlink's directory.
                durable = self.durable((r.dev, r.ino), r.seq)
            if durable:
                self.kept[name] += 1
            else:
                undo[r.type](r)

    def undo_content(self, r):
        key = (r.dev, r.ino)
        path = self.locate(key)
        if path is None:
            self.missing += 1
            return
        pins = self.pins[key]
        with open(path, "r+b") as f:
            if r.type == WRITE:
                lo, hi, old_size = r.a, r.a + len(r.data), r.c
                grew = r.a + r.b > old_size
            else:
                lo, hi, old_size = r.a, r.c, r.c
                grew = r.a > r.c
                if r.a < r.c:
                    # Extend back first, then the tail's bytes below.
                    f.truncate(max(os.fstat(f.fileno()).st_size, r.c))
            for a, b in minus(lo, hi, pins):
                f.seek(a)
                f.write(r.data[a - lo:b - lo])
                self.bytes[path] += b - a
            if grew:
                f.truncate(max([old_size] + [phi for _, phi in pins
                                             if phi > old_size]))
        self.undone[NAMES[r.type]] += 1
        self.n_undone[path] += 1

    def undo_create(self, r):
        if inode_of(r.path) == (r.dev, r.a):
            os.unlink(r.path)
            self.undone["create"] += 1
            self.lines.append("create of %s undone" % r.path)
        else:
            self.missing += 1

    def undo_unlink(self, r):
        link = os.fsdecode(r.data)
        if link and os.path.exists(link) and not os.path.lexists(r.path):
            os.rename(link, r.path)
            self.undone["unlink"] += 1
            self.lines.append("unlink of %s undone" % r.path)
        else:
            self.missing += 1

    def undo_rename(self, r):
        new, link = (os.fsdecode(p) for p in r.data.split(b"\0", 1))
        st = inode_of(new)
        if st is None or st[1] != r.c:
            self.missing += 1
            return
        os.rename(new, r.path)
        if link and os.path.exists(link):
            os.rename(link, new)
        self.undone["rename"] += 1
        self.lines.append("rename of %s to %s undone%s" % (
            r.path, new, " (the file it replaced is back)" if link else ""))

    def details(self):
        """Lines naming every namespace change undone and the bytes
        written back per file."""
        return self.lines + [
            "%d writes/truncations of %s undone, %d old bytes written back"
            % (n, p, self.bytes[p]) for p, n in sorted(self.n_undone.items())]

    def summary(self):
        undone = ", ".join("%d %s" % (n, k) for k, n in
                           sorted(self.undone.items())) or "nothing"
        text = "undid %s" % undone
        if self.missing:
            text += " (%d on files gone)" % self.missing
        return text


def restore(journal_dir, prefixes, log=None):
    """Undo, on the files under prefixes, everything the journals in
    journal_dir record as not durable; then delete the journals, the
    hard links kept to undo removals, and the -shm files. The processes
    that wrote them must be dead. Appends the details to the file log
    (a path) when given. Returns a one-line summary. Raises
    JournalError (nothing is changed then)."""
    recs = []
    for path in journals(journal_dir):
        recs += read_journal(path)
    r = Restore(recs)
    r.run()
    if log is not None:
        with open(log, "a") as f:
            f.write("restore of %s: %s\n" % (journal_dir, r.summary()))
            f.writelines("  %s\n" % line for line in r.details())
    for rec in recs:
        links = []
        if rec.type == UNLINK:
            links = [os.fsdecode(rec.data)]
        elif rec.type == RENAME:
            links = [os.fsdecode(rec.data.split(b"\0", 1)[1])]
        for link in links:
            if link and os.path.lexists(link):
                os.unlink(link)
    for path in journals(journal_dir):
        os.unlink(path)
    n_shm = 0
    for prefix in prefixes:
        for p in (prefix + "-shm",):
            if os.path.exists(p):
                os.unlink(p)
                n_shm += 1
    return r.summary() + (", removed the -shm" if n_shm else "")


def asan_runtime(binary):
    """The ASan runtime binary links dynamically, None when it links none:
    it must come first in LD_PRELOAD."""
    try:
        out = subprocess.run(["ldd", binary], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.decode(errors="replace").splitlines():
        parts = line.split()
        if parts and parts[0].startswith("libasan") and len(parts) >= 3:
            return parts[2]
    return None


class PowerLoss:
    """The shim's settings for the nodes of one cluster: journals under
    workdir/power/node<i>, the shim at so."""

    def __init__(self, workdir, so):
        if not os.path.exists(so):
            raise OSError("no power-loss shim %s (make %s)" % (so, so))
        self.workdir = workdir
        self.so = os.path.abspath(so)
        self.asan = {}

    def journal_dir(self, i):
        d = os.path.join(self.workdir, "power", "node%d" % i)
        os.makedirs(d, exist_ok=True)
        return d

    def env(self, i, binary, prefixes):
        """The environment that runs binary under the shim for node i,
        recording the files under prefixes."""
        if binary not in self.asan:
            self.asan[binary] = asan_runtime(binary)
        preload = [self.so]
        if self.asan[binary]:
            preload.insert(0, self.asan[binary])
        return {"LD_PRELOAD": ":".join(preload),
                "POWERLOSS_DIR": self.journal_dir(i),
                "POWERLOSS_PATHS": ":".join(os.path.realpath(p)
                                            for p in prefixes)}

    def restore(self, i, prefixes):
        """After every process of node i is dead: undo what it lost; the
        details go to <workdir>/power-restore.log (kept with the node
        logs of a failed episode)."""
        return restore(self.journal_dir(i), [os.path.realpath(p)
                                             for p in prefixes],
                       os.path.join(self.workdir, "power-restore.log"))

    def close(self):
        shutil.rmtree(os.path.join(self.workdir, "power"),
                      ignore_errors=True)
