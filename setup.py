"""Builds the sluice extension through CMake for `pip install .` and
`pip wheel .` (pyproject.toml holds the package's metadata).

The extension is the CMake target `_sluice` (python/CMakeLists.txt), built
for the interpreter running pip. SLUICE_BUILD_DIR names a configured build
tree to reuse (scripts/setup's build/): only the extension and what it
links are brought up to date there, and its interpreter must be this one's
version (checked by the extension's file name). Without it a tree of its
own is configured in pip's temporary build folder with the compilers
scripts/setup uses (clang-19, lld). CMAKE_BUILD_PARALLEL_LEVEL sets the
build's jobs (default 2).
"""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        reuse = os.environ.get("SLUICE_BUILD_DIR")
        if reuse:
            tree = os.path.abspath(reuse)
            if not os.path.isfile(os.path.join(tree, "CMakeCache.txt")):
                raise SystemExit(
                    "sluice setup: SLUICE_BUILD_DIR=%s is not a configured "
                    "CMake build tree (no CMakeCache.txt); run scripts/setup "
                    "first, or unset it to configure a tree of its own" % tree)
        else:
            tree = os.path.abspath(os.path.join(self.build_temp, "cmake"))
            if not os.path.isfile(os.path.join(tree, "CMakeCache.txt")):
                self._run(["cmake", "-S", ROOT, "-B", tree, "-G", "Ninja",
                           "-DCMAKE_BUILD_TYPE=Release",
                           "-DCMAKE_C_COMPILER=clang-19",
                           "-DCMAKE_CXX_COMPILER=clang++-19",
                           "-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld",
                           "-DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld",
                           "-DSLUICE_BUILD_TESTS=OFF",
                           "-DSLUICE_BUILD_BENCH=OFF",
                           "-DSLUICE_PYTHON_EXE=" + sys.executable])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
        self._run(["cmake", "--build", tree, "--target", "sluice_python",
                   "-j", jobs])
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = os.path.join(tree, "python", "sluice", "_sluice" + suffix)
        if not os.path.isfile(built):
            found = glob.glob(os.path.join(tree, "python", "sluice",
                                           "_sluice*.so"))
            raise SystemExit(
                "sluice setup: the build tree %s has no _sluice%s for this "
                "interpreter (%s, Python %s); it has %s. Reuse a tree built "
                "for this Python, or unset SLUICE_BUILD_DIR" %
                (tree, suffix, sys.executable, sysconfig.get_python_version(),
                 ", ".join(os.path.basename(f) for f in found) or "none"))
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built, dest)

    @staticmethod
    def _run(cmd: list) -> None:
        print("sluice setup: " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)


setup(ext_modules=[CMakeExtension("sluice._sluice")],
      cmdclass={"build_ext": CMakeBuild})
