"""The package as users install it: `pip install .` and `pip wheel .`
(offline, no build isolation) into a fresh venv made with
--system-site-packages, reusing this build tree (SLUICE_BUILD_DIR: only the
extension is brought up to date, so this costs ~10-20 s of pip and
setuptools, no compiling); `cmake --install --component python`; and
`python -m sluice check|run|tune`. Outside the build tree's .pth/PYTHONPATH:
the installed copy is what imports."""
import json
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import SLUICE_BIN

SOURCE_DIR = os.path.abspath(os.environ.get(
    "SLUICE_SOURCE_DIR",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")))
BUILD = os.environ.get("SLUICE_BUILD_TREE") or \
    os.path.dirname(os.path.dirname(os.path.abspath(SLUICE_BIN)))


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SLUICE_BUILD_DIR")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    if not os.path.isfile(os.path.join(BUILD, "CMakeCache.txt")):
        pytest.skip("needs the CMake build tree (SLUICE_BUILD_TREE)")
    d = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                    str(d)], check=True)
    return d


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       **kw)
    assert r.returncode == 0, "%s\n%s\n%s" % (cmd, r.stdout, r.stderr)
    return r


def test_pip_install_and_wheel(venv, tmp_path, fashion_spec):
    py = str(venv / "bin" / "python")
    env = clean_env(SLUICE_BUILD_DIR=BUILD, PIP_NO_INDEX="1")
    run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
         "--no-deps", SOURCE_DIR], env=env, cwd=str(tmp_path))
    probe = ("import json, sluice, sluice.torch, sluice.metrics; "
             "print(json.dumps({'file': sluice.__file__, "
             "'version': sluice.__version__}))")
    out = json.loads(run([py, "-c", probe], env=clean_env(),
                         cwd=str(tmp_path)).stdout)
    assert out["file"].startswith(str(venv)), out
    pkg = os.path.dirname(out["file"])
    assert {"py.typed", "__init__.pyi", "_sluice.pyi"} <= set(os.listdir(pkg))
    # The installed module runs a pipeline; python -m sluice mirrors the CLI.
    r = run([py, "-m", "sluice", "check", fashion_spec], env=clean_env(),
            cwd=str(tmp_path))
    assert "image: f32[28,28]" in r.stdout or "image:" in r.stdout
    r = run([py, "-m", "sluice", "run", fashion_spec, "--stats-json",
             str(tmp_path / "s.json")], env=clean_env(), cwd=str(tmp_path))
    assert "pipeline fashion: 32 outputs, 2000 records" in r.stdout
    assert json.loads((tmp_path / "s.json").read_text())["outputs"] == 32

    wheels = tmp_path / "wheels"
    run([py, "-m", "pip", "wheel", "--no-build-isolation", "--no-index",
         "--no-deps", "-w", str(wheels), SOURCE_DIR], env=env,
        cwd=str(tmp_path))
    [whl] = list(wheels.glob("sluice-*.whl"))
    names = zipfile.ZipFile(whl).namelist()
    assert any(n.startswith("sluice/_sluice") and n.endswith(".so")
               for n in names), names
    assert {"sluice/__init__.py", "sluice/torch.py", "sluice/__main__.py",
            "sluice/py.typed", "sluice/_sluice.pyi"} <= set(names)


def test_python_m_sluice_errors(fashion_spec, tmp_path):
    """The same texts and exit codes as the driver (run from the build
    tree's package)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(open(fashion_spec).read().replace("take: 2000",
                                                     "tak: 2000"))
    py = [sys.executable, "-m", "sluice"]
    r = subprocess.run(py + ["check", str(bad)], capture_output=True,
                       text=True, timeout=60)
    cli = subprocess.run([SLUICE_BIN, "check", str(bad)],
                         capture_output=True, text=True, timeout=60)
    assert r.returncode == cli.returncode == 2
    assert "did you mean 'take'" in r.stderr
    assert r.stderr.splitlines()[0] == cli.stderr.splitlines()[0]
    r = subprocess.run(py + ["run", fashion_spec, "--threads", "-1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "threads must be >= 0" in r.stderr
    r = subprocess.run(py + ["tune", fashion_spec, "--seconds", "0.2",
                             "--cores", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "parallelism" in r.stdout or "prefetch" in r.stdout


def test_cmake_install_installs_the_package(tmp_path, fashion_spec):
    if not os.path.isfile(os.path.join(BUILD, "CMakeCache.txt")):
        pytest.skip("needs the CMake build tree")
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", BUILD, "--prefix", str(prefix),
         "--component", "python"])
    site = prefix / "lib" / ("python%d.%d" % sys.version_info[:2]) / \
        "site-packages"
    assert (site / "sluice" / "__init__.py").is_file()
    probe = ("import sluice; p = sluice.Pipeline(%r); "
             "print(sluice.__file__, sum(1 for _ in p))" % fashion_spec)
    r = run([sys.executable, "-c", probe],
            env=clean_env(PYTHONPATH=str(site)), cwd=str(tmp_path))
    f, n = r.stdout.split()
    assert f.startswith(str(site)) and n == "32"
