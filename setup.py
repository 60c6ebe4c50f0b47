"""Build of the Python package (pyproject.toml, README "From Python").

The package's one compiled piece is the SQLite loadable extension, not a
Python extension module: build_py runs the repository's make for
build/raftsql.so (its flags and libraries are the Makefile's) and copies
it into the package as raftsql/raftsql.so, beside the Python files.  The
wheel is tagged py3-none-<platform>: any CPython 3 whose sqlite3 module
loads extensions can use it, on this platform only.  setuptools' own files
go under build/python, beside make's.

Environment: MAKE (default "make") is the make program to run.
"""

import os
import re
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join("build", "raftsql.so")


def version():
    """The release, from the Makefile's VERSION line (the one place it is
    written; raftsql.pc carries the same)."""
    with open(os.path.join(ROOT, "Makefile")) as f:
        m = re.search(r"^VERSION\s*:=\s*(\S+)", f.read(), re.M)
    if m is None:
        raise RuntimeError("setup.py: no VERSION := line in the Makefile")
    return m.group(1)


class BuildWithLibrary(build_py):
    """build_py that also builds the loadable extension with make and puts
    it in the package."""

    def run(self):
        make = os.environ.get("MAKE", "make")
        cmd = [make, "-C", ROOT, LIBRARY]
        self.announce("running " + " ".join(cmd), level=2)
        try:
            subprocess.run(cmd, check=True)
        except FileNotFoundError:
            raise SystemExit("setup.py: %s not found: install make and "
                             "the build dependencies (make deps)" % make)
        except subprocess.CalledProcessError as e:
            raise SystemExit("setup.py: %s failed (exit %d); `make deps` "
                             "installs what the build needs"
                             % (" ".join(cmd), e.returncode))
        super().run()
        target = os.path.join(self.build_lib, "raftsql")
        self.mkpath(target)
        shutil.copyfile(os.path.join(ROOT, LIBRARY),
                        os.path.join(target, "raftsql.so"))

    def get_outputs(self, include_bytecode=True):
        """The files this command makes, the library included (install and
        bdist_wheel list what they install from this)."""
        return super().get_outputs(include_bytecode) + [
            os.path.join(self.build_lib, "raftsql", "raftsql.so")]


class BinaryDistribution(Distribution):
    """A distribution holding a platform's binary: installed in platlib,
    and its wheel is not pure."""

    def has_ext_modules(self):
        """True: the package holds a compiled library."""
        return True


cmdclass = {"build_py": BuildWithLibrary}

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # no wheel: `pip install` needs it, pyproject.toml says
    bdist_wheel = None

if bdist_wheel is not None:
    class PlatformWheel(bdist_wheel):
        """bdist_wheel for a package holding a platform's shared library
        but no Python extension module: py3-none-<platform>."""

        def get_tag(self):
            """(python, abi, platform): py3, none and this platform."""
            _, _, platform = super().get_tag()
            return "py3", "none", platform

    cmdclass["bdist_wheel"] = PlatformWheel

os.makedirs(os.path.join(ROOT, "build", "python"), exist_ok=True)
setup(
    version=version(),
    distclass=BinaryDistribution,
    cmdclass=cmdclass,
    options={
        "build": {"build_base": os.path.join("build", "python")},
        "egg_info": {"egg_base": os.path.join("build", "python")},
    },
)
