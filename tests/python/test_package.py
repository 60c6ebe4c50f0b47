"""The Python package (README "From Python"), as a user installs it: a fresh
virtual environment made by /usr/bin/python3 -m venv, the README's one pip
command run in the repository with no package index, the installed module
used there (tests/python/installed.py: load, errors, a three-node cluster),
a wheel built and installed, and the package uninstalled.

Run by `make python-test` (part of `make test`).  pip sees no configuration
and no PIP_* variable of this machine (PIP_CONFIG_FILE=/dev/null), so only
/usr/share/python-wheels can serve setuptools and wheel: the Debian
packages python3-setuptools-whl and python3-wheel-whl that `make deps`
installs.  When python3-venv or those wheels are missing and cannot be
installed, every test is skipped with the reason printed.
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
WHEELS = "/usr/share/python-wheels"
# The README's command, run in the repository.
INSTALL = ["install", "--no-index", "--find-links", WHEELS, "."]
WHEEL = ["wheel", "--no-index", "--find-links", WHEELS]


def missing():
    """Why the package cannot be built here (a Debian tool missing), or
    None."""
    for name in ("setuptools", "wheel"):
        if not glob.glob(os.path.join(WHEELS, name + "-*.whl")):
            return ("no %s wheel in %s (Debian package python3-%s-whl; "
                    "`make deps` installs it)" % (name, WHEELS, name))
    r = subprocess.run([PYTHON, "-c", "import ensurepip, venv"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return ("%s cannot make a virtual environment (Debian package "
                "python3-venv): %s" % (PYTHON, r.stderr.strip()))
    return None


def environment():
    """This process's environment without pip's settings (PIP_*) and
    make's (a make above ours passes its flags and jobserver)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIP_")
           and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_NO_CACHE_DIR"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(args, cwd, timeout=300, env=None):
    """Run @args in @cwd; return its output; fail showing it when it exits
    non-zero."""
    r = subprocess.run(args, cwd=cwd, env=env or environment(), text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    if r.returncode != 0:
        raise AssertionError("%s exited %d:\n%s" % (" ".join(args),
                                                    r.returncode, r.stdout))
    return r.stdout


class PackageTest(unittest.TestCase):
    """One virtual environment for the class; the tests run in their
    numbered order (the last one uninstalls)."""

    @classmethod
    def setUpClass(cls):
        why = missing()
        if why is not None:
            print("python-test: skipped: " + why, flush=True)
            raise unittest.SkipTest(why)
        cls.dir = tempfile.mkdtemp(prefix="raftsql-venv-")
        cls.venv = os.path.join(cls.dir, "venv")
        run([PYTHON, "-m", "venv", cls.venv], cls.dir)
        cls.python = os.path.join(cls.venv, "bin", "python")
        cls.pip = os.path.join(cls.venv, "bin", "pip")
        cls.install_output = run([cls.pip] + INSTALL, ROOT)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def site_package(self):
        """Where the environment holds the package's directory."""
        out = run([self.python, "-c", "import sysconfig; "
                   "print(sysconfig.get_path('platlib'))"], self.dir)
        return os.path.join(out.strip(), "raftsql")

    def test_1_installed_package(self):
        """pip built and installed it from the repository offline; the
        installed module passes tests/python/installed.py."""
        self.assertIn("Successfully installed raftsql-", self.install_output)
        self.assertTrue(os.path.isfile(os.path.join(self.site_package(),
                                                    "raftsql.so")))
        env = environment()
        env["RAFTSQL_ROOT"] = ROOT
        r = subprocess.run([self.python, os.path.join(HERE, "installed.py")],
                           cwd=self.dir, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=120)
        sys.stdout.write(r.stdout)
        self.assertEqual(r.returncode, 0, "installed.py failed (above)")

    def test_2_wheel(self):
        """pip wheel builds a py3-none-<platform> wheel holding the module
        and the library; installed (into a target directory), it loads."""
        out = os.path.join(self.dir, "wheels")
        run([self.pip] + WHEEL + ["-w", out, "."], ROOT)
        wheels = os.listdir(out)
        self.assertEqual(len(wheels), 1, wheels)
        self.assertRegex(wheels[0],
                         r"^raftsql-[0-9.]+-py3-none-linux_[a-z0-9_]+\.whl$")
        with zipfile.ZipFile(os.path.join(out, wheels[0])) as z:
            names = set(z.namelist())
        for f in ("__init__.py", "config.py", "errors.py", "py.typed",
                  "raftsql.so"):
            self.assertIn("raftsql/" + f, names)
        target = os.path.join(self.dir, "target")
        run([self.pip, "install", "--no-index", "--target", target,
             os.path.join(out, wheels[0])], self.dir)
        env = environment()
        env["PYTHONPATH"] = target
        got = run([PYTHON, "-c", (
            "import os, sqlite3, raftsql\n"
            "assert raftsql.path().startswith(%r), raftsql.path()\n"
            "c = sqlite3.connect(os.path.join(%r, 'w.db'))\n"
            "raftsql.load(c)\n"
            "try:\n"
            "    raftsql.status(c)\n"
            "except raftsql.NoNode as e:\n"
            "    print(e.name, e.code)\n") % (target, self.dir)],
            self.dir, env=env)
        self.assertEqual(got.strip(), "RAFTSQL_NO_NODE 28430")

    def test_3_uninstall(self):
        """pip uninstall removes the module and its library."""
        lib = os.path.join(self.site_package(), "raftsql.so")
        self.assertTrue(os.path.isfile(lib))
        out = run([self.pip, "uninstall", "-y", "raftsql"], self.dir)
        self.assertIn("Successfully uninstalled raftsql-", out)
        self.assertFalse(os.path.exists(self.site_package()),
                         "left behind: %s" % self.site_package())
        r = subprocess.run([self.python, "-c", "import raftsql"],
                           cwd=self.dir, capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("No module named 'raftsql'", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
