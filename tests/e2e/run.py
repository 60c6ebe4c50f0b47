"""Run the end-to-end tests and close with an 'N passed, N failed' line.

Usage: python3 tests/e2e/run.py   (RAFTSQL_TESTHOST and RAFTSQL_SO as in the
Makefile's e2e target)
"""

import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py")
result = unittest.TextTestRunner(verbosity=2).run(suite)
failed = len(result.failures) + len(result.errors)
print("e2e: %d passed, %d failed" % (result.testsRun - failed, failed))
sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
