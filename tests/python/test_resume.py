"""Checkpoint and resume: state_dict() mid-epoch, load_state_dict() on a new
pipeline gives exactly the batches the first would have produced next (by
replay for pipelines with a shuffle buffer, by position for sources read by
position), the same through `sluice run --save-state/--resume`, and a job
checkpointed at world size 4 resuming at 3 sees every remaining record once."""
import glob
import json
import os
import re
import subprocess

import numpy as np
import pytest

import sluice
from conftest import (SLUICE_BIN, batches_equal, fashion_source, spec_yaml,
                      write)


@pytest.fixture(scope="session")
def idx_spec(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    return write(d / "idx.yaml", spec_yaml(
        "fashion_positional", 4, fashion_source("shuffle: true"), [
            "random_crop: {field: image, size: [28, 28], padding: 2}",
            "batch: {size: 100}"], epochs=2))


def resume_after(spec, k, **kw):
    p = sluice.Pipeline(spec, **kw)
    head = [next(p) for _ in range(k)]
    state = p.state_dict()
    q = sluice.Pipeline(spec, **kw)
    q.load_state_dict(state)
    return head, state, list(q)


@pytest.mark.parametrize("k", [1, 4, 6, 9])
def test_replay_resume_is_bit_identical(image_spec, k):
    full = list(sluice.Pipeline(image_spec))
    head, state, rest = resume_after(image_spec, k)
    assert state["position_start"] == -1  # a shuffle buffer: replay
    assert len(json.dumps(state)) < 1024
    assert len(head) + len(rest) == len(full)
    assert all(batches_equal(a, b) for a, b in zip(full, head + rest))


@pytest.mark.parametrize("k", [1, 5, 12, 13, 20])
def test_positional_resume_is_bit_identical(positional_spec, k):
    full = list(sluice.Pipeline(positional_spec))
    assert len(full) == 24
    head, state, rest = resume_after(positional_spec, k)
    assert state["position_start"] >= 0
    assert all(batches_equal(a, b) for a, b in zip(full, head + rest))
    assert len(head) + len(rest) == len(full)


@pytest.mark.parametrize("which", ["replay", "positional"])
def test_state_of_a_resumed_pipeline_before_any_batch(which, image_spec,
                                                      positional_spec):
    spec = image_spec if which == "replay" else positional_spec
    full = list(sluice.Pipeline(spec))
    head, state, _ = resume_after(spec, 3)
    q = sluice.Pipeline(spec)
    q.load_state_dict(state)
    again = q.state_dict()  # nothing delivered yet: the same place
    r = sluice.Pipeline(spec)
    r.load_state_dict(again)
    assert all(batches_equal(a, b) for a, b in zip(full[3:], list(r)))


def test_source_shuffle_reshuffles_each_epoch(positional_spec):
    full = list(sluice.Pipeline(positional_spec))
    e0 = [p for b in full[:12] for p in b["path"].tolist()]
    e1 = [p for b in full[12:] for p in b["path"].tolist()]
    assert sorted(e0) == sorted(e1) and len(set(e0)) == 48
    assert e0 != e1
    assert e0 != sorted(e0)


def test_state_of_another_pipeline_is_refused(image_spec, positional_spec):
    p = sluice.Pipeline(image_spec)
    next(p)
    state = p.state_dict()
    q = sluice.Pipeline(positional_spec)
    with pytest.raises(sluice.PipelineError, match="another pipeline"):
        q.load_state_dict(state)
    with pytest.raises(ValueError, match="not a sluice pipeline state"):
        sluice.Pipeline(image_spec).load_state_dict({"epoch": 1})
    r = sluice.Pipeline(image_spec)
    next(r)
    with pytest.raises(ValueError, match="before the first batch"):
        r.load_state_dict(state)


def test_replay_state_needs_the_same_share(image_spec):
    p = sluice.Pipeline(image_spec, rank=0, world_size=2)
    next(p)
    state = p.state_dict()
    q = sluice.Pipeline(image_spec, rank=0, world_size=3)
    with pytest.raises(sluice.PipelineError, match="cannot continue at rank"):
        q.load_state_dict(state)


def records(batches):
    """(label, image bytes) of every record of `batches`, as a sorted list."""
    out = []
    for b in batches:
        img = b["image"]
        for i in range(img.shape[0]):
            out.append((int(b["label"][i]), img[i].tobytes()))
    return sorted(out)


@pytest.mark.parametrize("which", ["images", "idx"])
def test_world_size_4_resumes_at_3(which, positional_spec, idx_spec):
    spec = positional_spec if which == "images" else idx_spec
    k = 2 if which == "images" else 10
    full = list(sluice.Pipeline(spec, rank=0, world_size=1))
    per_epoch = len(full) // 2
    ref0, ref1 = records(full[:per_epoch]), records(full[per_epoch:])

    # 4 ranks, each stops after k batches and saves its state.
    seen, states = [], []
    for r in range(4):
        p = sluice.Pipeline(spec, rank=r, world_size=4)
        seen += [next(p) for _ in range(k)]
        states.append(p.state_dict())
    # Every rank saved the same positions (they checkpoint in lockstep).
    assert len({(s["position_start"], s["rows"]) for s in states}) == 1
    # 3 ranks continue from any rank's state.
    after0, after1 = [], []
    for r in range(3):
        q = sluice.Pipeline(spec, rank=r, world_size=3)
        q.load_state_dict(states[r])
        for b in q:
            (after0 if q.epoch == 0 else after1).append(b)
    assert records(seen + after0) == ref0  # each record once, bit-identical
    assert records(after1) == ref1         # the next epoch at W'=3 too


def test_ranks_read_disjoint_shares(positional_spec):
    shares = [[p for b in sluice.Pipeline(positional_spec, epochs=1, rank=r,
                                          world_size=3)
               for p in b["path"].tolist()] for r in range(3)]
    allp = [p for s in shares for p in s]
    assert len(allp) == 48 and len(set(allp)) == 48


ENV_SCRIPT = r"""
import json, sys, sluice
p = sluice.Pipeline(sys.argv[1], epochs=1)
print(json.dumps([x for b in p for x in b["path"].tolist()]))
"""


@pytest.mark.parametrize("env", [{"RANK": "1", "WORLD_SIZE": "3"},
                                 {"JOB_COMPLETION_INDEX": "1",
                                  "WORLD_SIZE": "3"}])
def test_rank_from_environment(positional_spec, tmp_path, env):
    script = write(tmp_path / "env.py", ENV_SCRIPT)
    e = {k: v for k, v in os.environ.items()
         if k not in ("RANK", "WORLD_SIZE", "JOB_COMPLETION_INDEX")}
    e.update(env)
    out = subprocess.run(["/usr/bin/python3", script, positional_spec],
                         env=e, capture_output=True, text=True, check=True)
    want = [x for b in sluice.Pipeline(positional_spec, epochs=1, rank=1,
                                       world_size=3)
            for x in b["path"].tolist()]
    assert json.loads(out.stdout) == want


def npy_outputs(d):
    files = sorted(glob.glob(os.path.join(d, "*.image.npy")))
    return [np.load(f) for f in files]


@pytest.mark.parametrize("which", ["replay", "positional"])
def test_cli_save_state_and_resume(which, image_spec, positional_spec,
                                   tmp_path):
    spec = image_spec if which == "replay" else positional_spec
    env = dict(os.environ, NO_COLOR="1")

    def run(*args):
        r = subprocess.run([SLUICE_BIN, "run", spec, "--quiet"] + list(args),
                           capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
        return r

    run("--sink", "npy:%s" % (tmp_path / "full"))
    state = tmp_path / "state.json"
    run("--stop-after", "5", "--save-state", str(state),
        "--sink", "npy:%s" % (tmp_path / "a"))
    assert state.stat().st_size < 1024
    saved = json.loads(state.read_text())
    assert saved["outputs"] == 5 and saved["epoch"] == 0
    run("--resume", str(state), "--sink", "npy:%s" % (tmp_path / "b"))
    full = npy_outputs(tmp_path / "full")
    parts = npy_outputs(tmp_path / "a") + npy_outputs(tmp_path / "b")
    assert len(parts) == len(full)
    assert all(x.tobytes() == y.tobytes() for x, y in zip(full, parts))
    bad = subprocess.run([SLUICE_BIN, "run", spec, "--resume",
                          str(tmp_path / "none.json")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "cannot read the state file" in bad.stderr


def test_torch_dataset_state_dict(positional_spec):
    torch = pytest.importorskip("torch")
    import sluice.torch
    ds = sluice.torch.Dataset(positional_spec)
    ds.set_epoch(1)
    full = list(ds)
    ds.set_epoch(1)  # the next iteration would run epoch 2
    it = iter(ds)
    head = [next(it) for _ in range(3)]
    state = ds.state_dict()
    ds2 = sluice.torch.Dataset(positional_spec)
    ds2.load_state_dict(state)
    rest = list(ds2)
    assert len(head) + len(rest) == len(full) == 12
    assert all(torch.equal(a["image"], b["image"])
               for a, b in zip(full, head + rest))


def with_distributed(spec, tmp_path, block):
    """`spec` plus a `distributed:` block, written next to the original so
    its relative paths still resolve."""
    text = open(spec).read() + "distributed: %s\n" % block
    path = os.path.join(os.path.dirname(spec), "dist-%s.yaml" % tmp_path.name)
    with open(path, "w") as f:
        f.write(text)
    return path


def paths(pipe):
    return [x for b in pipe for x in b["path"].tolist()]


def test_rank_and_world_size_from_the_spec(positional_spec, tmp_path):
    spec = with_distributed(positional_spec, tmp_path,
                            "{rank: 2, world_size: 3}")
    want = paths(sluice.Pipeline(positional_spec, epochs=1, rank=2,
                                 world_size=3))
    p = sluice.Pipeline(spec, epochs=1)
    assert (p.rank, p.world_size) == (2, 3)
    assert paths(p) == want
    # The call overrides the spec, value by value.
    p = sluice.Pipeline(spec, epochs=1, rank=0)
    assert (p.rank, p.world_size) == (0, 3)
    assert paths(p) == paths(
        sluice.Pipeline(positional_spec, epochs=1, rank=0, world_size=3))
    assert paths(sluice.Pipeline(spec, epochs=1, rank=0, world_size=1)) == \
        paths(sluice.Pipeline(positional_spec, epochs=1))
    types = sluice.check(spec)
    assert types[-1]["name"] == "batch"


def test_spec_ranks_beat_the_environment(positional_spec, tmp_path):
    spec = with_distributed(positional_spec, tmp_path, "{world_size: 3}")
    script = write(tmp_path / "env.py", ENV_SCRIPT)
    e = {k: v for k, v in os.environ.items()
         if k not in ("RANK", "WORLD_SIZE", "JOB_COMPLETION_INDEX")}
    # world_size from the spec (3, not $WORLD_SIZE's 8), the rank from $RANK.
    e.update({"RANK": "1", "WORLD_SIZE": "8"})
    out = subprocess.run(["/usr/bin/python3", script, spec],
                         env=e, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == paths(
        sluice.Pipeline(positional_spec, epochs=1, rank=1, world_size=3))
    # A rank from the environment that the spec's world size cannot take:
    # the message says where each value came from.
    e["RANK"] = "5"
    bad = subprocess.run(["/usr/bin/python3", script, spec],
                         env=e, capture_output=True, text=True)
    assert bad.returncode != 0
    assert ("ValueError: rank 5 is out of range for world size 3 (rank from "
            "$RANK, world size from %s:" % spec) in bad.stderr


def test_spec_rank_errors(positional_spec, tmp_path):
    spec = with_distributed(positional_spec, tmp_path, "{rank: 3}")
    with pytest.raises(ValueError, match=r"rank 3 is out of range for world "
                       r"size 2 \(rank from .*:\d+:\d+, world size from "
                       r"world_size="):
        sluice.Pipeline(spec, world_size=2)
    bad = with_distributed(positional_spec, tmp_path / "x",
                           "{rank: 1.5, world_size: 0}")
    with pytest.raises(sluice.SpecError) as e:
        sluice.Pipeline(bad)
    msg = str(e.value)
    assert "'distributed.rank' must be an integer, got '1.5'" in msg
    assert "'distributed.world_size' must be at least 1, got 0" in msg
    assert re.search(r"dist-x\.yaml:\d+:\d+: error", msg)


def test_spec_cli_and_python_agree_on_every_rank(positional_spec, tmp_path):
    """Rank r of 3 reads the same batches, bit for bit, whether the share
    comes from the Python call, the spec's `distributed:`, `sluice run
    --rank/--world-size` or torchrun's RANK/WORLD_SIZE; the three shares
    together hold every record of the epoch exactly once."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "JOB_COMPLETION_INDEX")}
    env["NO_COLOR"] = "1"

    def cli(spec, out, *args, extra_env=None):
        r = subprocess.run([SLUICE_BIN, "run", spec, "--quiet", "--epochs",
                            "1", "--sink", "npy:%s" % out] + list(args),
                           capture_output=True, text=True,
                           env=dict(env, **(extra_env or {})))
        assert r.returncode == 0, r.stderr
        index = json.loads((out / "index.json").read_text())
        assert index["complete"] is True
        return [(np.load(out / ("%06d.image.npy" % i)),
                 np.load(out / ("%06d.label.npy" % i)))
                for i in range(index["count"])]

    every = []
    for r in range(3):
        want = list(sluice.Pipeline(positional_spec, epochs=1, rank=r,
                                    world_size=3))
        assert want, "rank %d got no batch" % r
        spec = with_distributed(positional_spec, tmp_path / str(r),
                                "{rank: %d, world_size: 3}" % r)
        got = list(sluice.Pipeline(spec, epochs=1))
        assert len(got) == len(want)
        assert all(batches_equal(a, b) for a, b in zip(want, got))
        for outs in (cli(positional_spec, tmp_path / ("flags%d" % r),
                         "--rank", str(r), "--world-size", "3"),
                     cli(spec, tmp_path / ("spec%d" % r)),
                     cli(positional_spec, tmp_path / ("env%d" % r),
                         extra_env={"RANK": str(r), "WORLD_SIZE": "3"})):
            assert len(outs) == len(want)
            for (image, label), b in zip(outs, want):
                assert image.tobytes() == b["image"].tobytes()
                assert label.tobytes() == b["label"].tobytes()
        every += [p for b in want for p in b["path"].tolist()]
    assert len(every) == 48 and len(set(every)) == 48
