"""Run the end-to-end tests and close with an 'N passed, N failed' line and
the seconds each test file took.

Usage: python3 tests/e2e/run.py   (RAFTSQL_TESTHOST and RAFTSQL_SO as in the
Makefile's e2e target). E2E_SKIP=test_a,test_b leaves those files out (the
Makefile's TSan pass skips files whose threads the ASan pass already covers
and whose time goes to set-up: see its comment).

E2E_JOBS=N (default 3; the Makefile's e2e target gives 5, its tsan
target 4) runs N test files at a time, each in a process of
its own (python3 run.py --one test_x), largest file first; a file's output
is printed whole once it ends, so files never interleave. The tests spend
most of their time waiting for nodes (a file uses a third to a half of
one core), and each picks free ports, temporary directories and namespaces of
its own, so files run side by side. E2E_JOBS=1 runs them one after another. A file that keeps cores busy on
purpose (runaway requests on every node) says so with a line
`E2E_ALONE = True`: those run after the others, one at a time.
E2E_ONLY=test_a,test_b runs only those files.
"""

import os
import subprocess
import sys
import threading
import time
import unittest

here = os.path.dirname(os.path.abspath(__file__))


def names(var):
    """The comma-separated file names (modules) in environment variable
    @var, as a set."""
    return set(filter(None, (name.strip() for name in
                             os.environ.get(var, "").split(","))))


class TimedResult(unittest.TextTestResult):
    """Sums the seconds of the tests of each file (module)."""

    seconds = {}

    def startTest(self, test):
        self._started = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        module = type(test).__module__
        TimedResult.seconds[module] = (TimedResult.seconds.get(module, 0.0) +
                                       time.monotonic() - self._started)


def run_one(module):
    """Run the tests of file @module in this process; print the result
    line "e2e-result: <passed> <failed>" last; return the exit code."""
    sys.path.insert(0, here)
    suite = unittest.defaultTestLoader.loadTestsFromName(module)
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout,
                                     resultclass=TimedResult).run(suite)
    failed = len(result.failures) + len(result.errors)
    print("e2e-result: %d %d" % (max(0, result.testsRun - failed), failed))
    return 0 if result.wasSuccessful() else 1


def alone_file(module):
    """Whether test file @module asks to run alone (a line
    "E2E_ALONE = True")."""
    with open(os.path.join(here, module + ".py")) as f:
        return any(line.strip() == "E2E_ALONE = True" for line in f)


def parse(out):
    """The (passed, failed) counts of a --one run's output @out, or None
    when it has no result line (the process died)."""
    for line in reversed(out.splitlines()):
        if line.startswith("e2e-result: "):
            p, f = line.split()[1:3]
            return int(p), int(f)
    return None


def main():
    """Run the files E2E_ONLY/E2E_SKIP select, E2E_JOBS at a time; print
    each file's output, the seconds per file and the totals; return the
    exit code (0 when every test passed and some ran)."""
    skip, only = names("E2E_SKIP"), names("E2E_ONLY")
    files = [f[:-3] for f in os.listdir(here)
             if f.startswith("test_") and f.endswith(".py")]
    files = [m for m in files if m not in skip and (not only or m in only)]
    # Largest first: the long files start early, the short ones fill in.
    files.sort(key=lambda m: -os.path.getsize(os.path.join(here, m + ".py")))
    alone = [m for m in files if alone_file(m)]
    files = [m for m in files if m not in alone]
    jobs = max(1, int(os.environ.get("E2E_JOBS", "3")))
    lock = threading.Lock()
    seconds, passed, failed, broken = {}, 0, 0, []

    def worker(slot):
        nonlocal passed, failed
        # Each worker's files pick ports from a slice of their own
        # (raftsql_cluster.free_ports): E2E_SLOT of E2E_SLOTS.
        env = dict(os.environ, E2E_SLOT=str(slot), E2E_SLOTS=str(jobs))
        while True:
            with lock:
                if not files:
                    return
                module = files.pop(0)
            started = time.monotonic()
            proc = subprocess.run([sys.executable, os.path.abspath(__file__),
                                   "--one", module],
                                  env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
            counts = parse(proc.stdout)
            with lock:
                seconds[module] = time.monotonic() - started
                sys.stdout.write("=== %s (%.1f s)\n%s" %
                                 (module, seconds[module], proc.stdout))
                sys.stdout.flush()
                if counts is None:
                    broken.append(module)
                    failed += 1
                else:
                    passed += counts[0]
                    failed += counts[1]
                    if proc.returncode != 0 and counts[1] == 0:
                        broken.append(module)
                        failed += 1

    wall = time.monotonic()
    threads = [threading.Thread(target=worker, args=(k,))
               for k in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    files.extend(alone)
    worker(0)
    for module, s in sorted(seconds.items(), key=lambda kv: -kv[1]):
        print("e2e: %-22s %6.1f s" % (module, s))
    for module in broken:
        print("e2e: %s exited without a result (see its output above)" %
              module)
    print("e2e: %d passed, %d failed (%d files, %d at a time, %.0f s)" %
          (passed, failed, len(seconds), jobs, time.monotonic() - wall))
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        sys.exit(run_one(sys.argv[2]))
    sys.exit(main())
