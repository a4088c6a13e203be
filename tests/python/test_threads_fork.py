"""The module under threads and fork, as a training script uses it: close()
from another thread while one iterates, two threads making their first
next() at once, and a child forked after the parent iterated. Each case runs
in a fresh interpreter (a subprocess with a timeout), so a crash (heap
corruption, SIGSEGV) or a hang (a deadlock) fails the test instead of taking
pytest down or stalling CI; the static state these bugs lived in is also
fresh there."""
import os
import subprocess
import sys
import textwrap

from conftest import FASHION

SPEC = """
pipeline: fashion_threads
seed: 5
source:
  idx:
    images: {f}/t10k-images-idx3-ubyte.gz
    labels: {f}/t10k-labels-idx1-ubyte.gz
steps:
  - random_crop: {{field: image, size: [28, 28], padding: 2}}
  - normalize: {{field: image, mean: 72.94, std: 90.02}}
  - shuffle: {{buffer: 500}}
  - batch: {{size: 32}}
epochs: 1
budget: {{cores: 2, memory: 256MiB}}
""".format(f=FASHION)


def run_script(tmp_path, body, timeout=120):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    script = tmp_path / "case.py"
    script.write_text("import os, sys, threading, time\nimport sluice\n"
                      "SPEC = %r\n" % str(spec) + textwrap.dedent(body))
    try:
        r = subprocess.run([sys.executable, str(script)], capture_output=True,
                           text=True, timeout=timeout, env=os.environ)
    except subprocess.TimeoutExpired as e:
        raise AssertionError("hung for %d s (a deadlock): %s" %
                             (timeout, e.stderr)) from None
    assert r.returncode == 0, "exit %d\nstdout:\n%s\nstderr:\n%s" % (
        r.returncode, r.stdout, r.stderr)
    return r.stdout


def test_close_while_another_thread_iterates(tmp_path):
    # Before: close() stopped the runtime under the iterating thread
    # ("free(): invalid size", SIGSEGV). Now the iterating thread gets a
    # PipelineError saying the pipeline was closed, and nothing crashes.
    out = run_script(tmp_path, """
        for trial in range(8):
            p = sluice.Pipeline(SPEC, epochs=-1, jit=False)
            seen = []
            errors = []
            def consume():
                try:
                    for b in p:
                        seen.append(b["image"].shape[0])
                except sluice.PipelineError as e:
                    errors.append(str(e))
            t = threading.Thread(target=consume)
            t.start()
            while len(seen) < 3 + trial:
                time.sleep(0.001)
            p.close()
            t.join(60)
            assert not t.is_alive(), "the iterating thread did not stop"
            assert all(n == 32 for n in seen)
            # Either it was waiting for an output (the error) or between
            # two (the next call found the pipeline stopped).
            assert all("closed" in e for e in errors), errors
            p.close()  # twice is fine
        print("closed ok")
        """)
    assert "closed ok" in out


def test_two_threads_first_next_at_once(tmp_path):
    # Before: the first next() of the process looked up Python's main thread
    # in a function-local static while holding the GIL; a second thread
    # entering it waited on the static's guard with the GIL held: deadlock.
    out = run_script(tmp_path, """
        a = sluice.Pipeline(SPEC, jit=False)
        b = sluice.Pipeline(SPEC, jit=False)
        shared = sluice.Pipeline(SPEC, jit=False)
        go = threading.Barrier(4)
        got = []
        def first(p):
            go.wait()
            got.append(next(p)["image"].shape)
        ts = [threading.Thread(target=first, args=(p,))
              for p in (a, b, shared, shared)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not any(t.is_alive() for t in ts), "deadlocked"
        assert len(got) == 4, got
        # One pipeline from two threads: every batch once, none lost.
        rest = []
        def drain():
            for x in shared:
                rest.append(x["label"].copy())
        ts = [threading.Thread(target=drain) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not any(t.is_alive() for t in ts)
        assert 2 + len(rest) == 10000 // 32 + 1, len(rest)
        print("threads ok")
        """)
    assert "threads ok" in out


def test_fork_after_iterating(tmp_path):
    # Before: a child forked after the parent iterated hung on the inherited
    # pipeline (its workers exist only in the parent) and on a new one. Now
    # the inherited one raises a clear error and a new one runs.
    out = run_script(tmp_path, """
        p = sluice.Pipeline(SPEC, jit=False)
        first = [next(p)["label"].copy() for _ in range(3)]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            msg = []
            try:
                next(p)
                msg.append("inherited: no error")
            except sluice.PipelineError as e:
                msg.append("inherited: " + str(e))
            q = sluice.Pipeline(SPEC, jit=False)
            n = sum(1 for _ in q)
            msg.append("new: %d batches" % n)
            os.write(w, "\\n".join(msg).encode())
            os._exit(0)
        os.close(w)
        deadline = time.time() + 90
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.time() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise SystemExit("the forked child hung")
            time.sleep(0.05)
        child = os.read(r, 65536).decode()
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        print(child)
        # The parent's pipeline goes on where it was.
        rest = sum(1 for _ in p)
        assert 3 + rest == 10000 // 32 + 1, rest
        print("parent ok")
        """)
    assert "inherited: sluice: error: this Pipeline was made in process" in out
    assert "which then forked; it cannot run in the child" in out
    assert "new: %d batches" % (10000 // 32 + 1) in out
    assert "parent ok" in out
