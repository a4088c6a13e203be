# lit configuration: compiler (.mlir), spec error corpus and examples (.yaml,
# .test). Tools come from the build tree's bin/ and LLVM's tools dir.
import os
import lit.formats

config.name = "sluice"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".yaml", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.sluice_obj_root, "tests")
config.excludes = ["unit", "tools", "fuzz", "CMakeLists.txt", "lit.cfg.py", "Inputs"]

config.environment["PATH"] = os.pathsep.join(
    [config.sluice_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])
config.substitutions.append(("%sluice_src", config.sluice_src_root))
config.substitutions.append(("%examples", os.path.join(config.sluice_src_root, "examples")))
import sys
config.substitutions.append(("%python", getattr(config, "python", sys.executable)))
config.substitutions.append(("%expect_exit", sys.executable + " " + os.path.join(config.sluice_src_root, "tests", "tools", "expect_exit.py")))

# The LLVM/MLIR shared libraries' prefix, and whether this machine lets a
# test hide it (an unprivileged mount namespace): compiled executables must
# run without it.
config.substitutions.append(("%sluice_obj", config.sluice_obj_root))
config.substitutions.append(("%cxx", config.cxx_compiler))
config.substitutions.append(("%llvm_prefix", os.path.dirname(os.path.normpath(config.llvm_tools_dir))))
import subprocess
try:
    if subprocess.call(["unshare", "-rm", "true"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
        config.available_features.add("unshare")
except OSError:
    pass

# Tests that compare against torch / torchvision (python3-torch,
# python3-torchvision: `scripts/setup --bench`) say `REQUIRES: torch`.
import subprocess
try:
    if subprocess.run([getattr(config, "python", sys.executable), "-c",
                       "import torch, torchvision"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                      timeout=120).returncode == 0:
        config.available_features.add("torch")
except (OSError, subprocess.SubprocessError):
    pass

# Sanitized builds (scripts/sanitize): `asan` / `tsan`. Tests of what a
# sanitizer changes by design say `UNSUPPORTED: asan` with the reason
# (docs/reliability.md lists them).
_sanitize = getattr(config, "sluice_sanitize", "")
if "address" in _sanitize:
    config.available_features.add("asan")
if "thread" in _sanitize:
    config.available_features.add("tsan")

# Debian's jpegtran (libjpeg-turbo-progs, installed by scripts/setup) writes
# the restart-marked JPEGs of jpeg-restarts.test.
import shutil
if shutil.which("jpegtran"):
    config.available_features.add("jpegtran")
