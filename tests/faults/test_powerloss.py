"""Tests of the power-loss shim (powerloss.c) and its restore
(powerloss.py): a process runs under the shim, is killed with SIGKILL,
the restore runs, and its files must hold what a disk that lost every
unsynced change would hold.

Needs build/powerloss.so (POWERLOSS_SO): `make faults-power` builds it
and runs these.
"""

import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.dirname(os.path.dirname(HERE))

import powerloss  # noqa: E402

PYTHON = "/usr/bin/python3"
SO = os.environ.get("POWERLOSS_SO",
                    os.path.join(ROOT, "build", "powerloss.so"))
READY_S = 20.0

PRELUDE = textwrap.dedent("""\
    import os, sys, threading
    D = sys.argv[1]
    def path(name):
        return os.path.join(D, name)
    def put(name, data, off=None, flags=0, sync=False):
        fd = os.open(path(name), os.O_RDWR | os.O_CREAT | flags, 0o644)
        if off is None:
            os.write(fd, data)
        else:
            os.pwrite(fd, data, off)
        if sync:
            os.fsync(fd)
        os.close(fd)
    def sync_dir():
        fd = os.open(D, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)
    def create(name, data):
        put(name, data, sync=True)
        sync_dir()
    """)


class PowerLossTest(unittest.TestCase):

    def setUp(self):
        self.assertTrue(os.path.exists(SO), "no %s: make build/powerloss.so"
                        % SO)
        self.tmp = tempfile.mkdtemp(prefix="powerloss-test-")
        self.data = os.path.join(self.tmp, "data")
        self.journal = os.path.join(self.tmp, "journal")
        os.makedirs(self.data)
        os.makedirs(self.journal)
        self.prefix = os.path.join(os.path.realpath(self.data), "db")

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.tmp])

    def crash(self, body):
        """Run body (after PRELUDE) under the shim, recording the files
        whose path starts with <data>/db; SIGKILL it once it printed
        "ready"; then restore. Returns the restore's summary."""
        script = PRELUDE + textwrap.dedent(body) + \
            "\nprint('ready', flush=True)\nsys.stdin.read()\n"
        env = dict(os.environ, LD_PRELOAD=SO, POWERLOSS_DIR=self.journal,
                   POWERLOSS_PATHS=self.prefix)
        proc = subprocess.Popen([PYTHON, "-c", script, self.data], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            out = b""
            end = time.monotonic() + READY_S
            while b"ready" not in out and time.monotonic() < end:
                r, _, _ = select.select([proc.stdout], [], [], 0.5)
                if r:
                    chunk = os.read(proc.stdout.fileno(), 4096)
                    if not chunk:
                        break
                    out += chunk
            if b"ready" not in out:
                proc.kill()
                self.fail("the child never got ready: stdout %r stderr %r" %
                          (out, proc.communicate(timeout=10)[1]))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            for f in (proc.stdin, proc.stdout, proc.stderr):
                f.close()
        return powerloss.restore(self.journal, [self.prefix])

    def read(self, name):
        with open(os.path.join(self.data, name), "rb") as f:
            return f.read()

    def exists(self, name):
        return os.path.exists(os.path.join(self.data, name))

    def test_writes_after_the_last_fsync_are_undone(self):
        """write, write, fsync, write, append, kill: the file is as at the
        fsync; a record cut short at the journal's end is dropped."""
        what = self.crash("""
            create('db', b'A' * 60)
            put('db', b'a' * 40, off=60, sync=True)
            put('db', b'B' * 10, off=20)
            put('db', b'C' * 50, flags=os.O_APPEND)
            """)
        self.assertEqual(self.read("db"), b"A" * 60 + b"a" * 40, what)
        self.assertIn("2 write", what)
        self.assertEqual(os.listdir(self.journal), [])

    def test_a_record_cut_short_is_dropped(self):
        """A journal ending in half a record (the kill came during its
        write) restores the records before it."""
        path = os.path.join(self.journal, "journal.1")
        rec = powerloss.HEADER.pack(powerloss.MAGIC, powerloss.WRITE, 5, 1,
                                    2, 0, 4, 0, 3, 0) + b"/x/"
        with open(path, "wb") as f:
            f.write(rec + rec[:20])
        self.assertEqual(len(powerloss.read_journal(path)), 1)

    def test_a_broken_journal_is_refused(self):
        open(os.path.join(self.journal, "journal.7"), "wb").close()
        open(os.path.join(self.journal, "journal.7.broken"), "wb").close()
        with self.assertRaises(powerloss.JournalError):
            powerloss.restore(self.journal, [self.prefix])

    def test_fsync_through_another_fd_covers_the_write(self):
        """A write through an O_WRONLY fd, an fsync through an O_RDONLY fd
        of the same file: durable. A later write through the O_WRONLY fd
        (old bytes read through the path) is undone."""
        self.crash("""
            create('db', b'X' * 30)
            w = os.open(path('db'), os.O_WRONLY)
            os.pwrite(w, b'Y' * 10, 0)
            r = os.open(path('db'), os.O_RDONLY)
            os.fsync(r)
            os.pwrite(w, b'Z' * 10, 10)
            """)
        self.assertEqual(self.read("db"), b"Y" * 10 + b"X" * 20)

    def test_a_write_on_an_o_dsync_fd_is_kept(self):
        """Unsynced Y over synced X, then Z on an O_DSYNC fd over part of
        Y: Y is undone except where Z lies, Z stays."""
        what = self.crash("""
            create('db', b'X' * 40)
            put('db', b'Y' * 20, off=0)
            put('db', b'Z' * 10, off=5, flags=os.O_DSYNC)
            """)
        self.assertEqual(self.read("db"),
                         b"X" * 5 + b"Z" * 10 + b"X" * 25, what)

    def test_a_truncated_tail_comes_back(self):
        self.crash("""
            create('db', bytes(range(100)))
            fd = os.open(path('db'), os.O_RDWR)
            os.ftruncate(fd, 10)
            """)
        self.assertEqual(self.read("db"), bytes(range(100)))

    def test_o_trunc_is_undone(self):
        self.crash("""
            create('db', b'old' * 10)
            put('db', b'new', flags=os.O_TRUNC)
            """)
        self.assertEqual(self.read("db"), b"old" * 10)

    def test_rename_without_a_directory_fsync_is_undone(self):
        """tmp fsynced and renamed over db, the directory never fsynced:
        db is the old file again, tmp is back."""
        self.crash("""
            create('db', b'old')
            create('db.tmp', b'new')
            os.rename(path('db.tmp'), path('db'))
            """)
        self.assertEqual(self.read("db"), b"old")
        self.assertEqual(self.read("db.tmp"), b"new")
        self.assertEqual(sorted(os.listdir(self.data)), ["db", "db.tmp"])

    def test_rename_with_a_directory_fsync_is_kept(self):
        self.crash("""
            create('db', b'old')
            create('db.tmp', b'new')
            os.rename(path('db.tmp'), path('db'))
            sync_dir()
            """)
        self.assertEqual(self.read("db"), b"new")
        self.assertEqual(os.listdir(self.data), ["db"])

    def test_create_and_unlink_without_a_directory_fsync_are_undone(self):
        """A file created and fsynced (its directory not) is gone; a file
        unlinked without a directory fsync is back, with its synced
        contents; a file outside the prefixes is left alone."""
        self.crash("""
            create('db-old', b'synced')
            put('db-new', b'data', sync=True)
            os.unlink(path('db-old'))
            put('other', b'x')
            """)
        self.assertFalse(self.exists("db-new"))
        self.assertEqual(self.read("db-old"), b"synced")
        self.assertEqual(self.read("other"), b"x")
        self.assertEqual(sorted(os.listdir(self.data)), ["db-old", "other"])

    def test_unlink_with_a_directory_fsync_is_kept(self):
        self.crash("""
            create('db-old', b'synced')
            os.unlink(path('db-old'))
            sync_dir()
            """)
        self.assertEqual(os.listdir(self.data), [])

    def test_threads_and_the_shm(self):
        """Two threads write their own files, each fsyncs halfway: each
        file is as at its fsync. The -shm is deleted."""
        self.crash("""
            def run(name):
                fd = os.open(path(name), os.O_RDWR | os.O_CREAT, 0o644)
                for k in range(400):
                    os.write(fd, b'%05d' % k)
                    if k == 199:
                        os.fsync(fd)
                os.close(fd)
            ts = [threading.Thread(target=run, args=(n,))
                  for n in ('db-wal', 'db-raft')]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            sync_dir()
            put('db-shm', b'S' * 100)
            """)
        want = b"".join(b"%05d" % k for k in range(200))
        self.assertEqual(self.read("db-wal"), want)
        self.assertEqual(self.read("db-raft"), want)
        self.assertFalse(self.exists("db-shm"))


if __name__ == "__main__":
    unittest.main()
