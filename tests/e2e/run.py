"""Run the end-to-end tests and close with an 'N passed, N failed' line and
the seconds each test file took.

Usage: python3 tests/e2e/run.py   (RAFTSQL_TESTHOST and RAFTSQL_SO as in the
Makefile's e2e target). E2E_SKIP=test_a,test_b leaves those files out (the
Makefile's TSan pass skips files whose threads the ASan pass already covers
and whose time goes to set-up: see its comment).
"""

import os
import sys
import time
import unittest

here = os.path.dirname(os.path.abspath(__file__))
skip = set(filter(None, (name.strip() for name in
                         os.environ.get("E2E_SKIP", "").split(","))))


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


def keep(suite):
    """The tests of @suite whose file is not in E2E_SKIP."""
    out = unittest.TestSuite()
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            out.addTests(keep(t))
        elif type(t).__module__ not in skip:
            out.addTest(t)
    return out


suite = keep(unittest.defaultTestLoader.discover(here, pattern="test_*.py"))
result = unittest.TextTestRunner(verbosity=2,
                                 resultclass=TimedResult).run(suite)
failed = len(result.failures) + len(result.errors)
for module, s in sorted(TimedResult.seconds.items(), key=lambda kv: -kv[1]):
    print("e2e: %-22s %6.1f s" % (module, s))
print("e2e: %d passed, %d failed" % (result.testsRun - failed, failed))
sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
