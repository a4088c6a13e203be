"""Hostile arguments and states from Python: every bad argument names
itself (not pybind11's "Unable to cast Python instance to C++ type"), a
state whose counts this pipeline cannot have produced is refused with the
field (before, rows=2**62 silently skipped the epoch), and a schedule dict
cannot put a cache after a random step (epoch 2 would replay epoch 1)."""
import numpy as np
import pytest

import sluice
from conftest import fashion_source, spec_yaml, write


@pytest.fixture(scope="module")
def fmnist_spec(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    return write(d / "fm.yaml", spec_yaml("fm", 3, fashion_source(), [
        "take: 400",
        "random_crop: {field: image, size: [24, 24], padding: 2}",
        "shuffle: {buffer: 100}",
        "batch: {size: 200}"], epochs=2))


@pytest.mark.parametrize("kwargs, error, text", [
    ({"epochs": "two"}, TypeError, "epochs must be an integer, got str 'two'"),
    ({"epochs": 2.0}, TypeError, "epochs must be an integer, got float 2.0"),
    ({"seed": -1}, ValueError, "seed must be in [0, 2^64), got -1"),
    ({"seed": 2**64}, ValueError, "seed must be in [0, 2^64), got 18446744073709551616"),
    ({"seed": "7"}, TypeError, "seed must be an integer, got str '7'"),
    ({"memory": 10**30}, ValueError,
     "memory (bytes) must be >= 1 (and below 2^63), got 1000000000000000000000000000000"),
    ({"memory": 0}, ValueError, "memory (bytes) must be >= 1"),
    ({"rank": "0", "world_size": 2}, TypeError, "rank must be an integer, got str '0'"),
    ({"world_size": 2**70}, ValueError, "world_size must be >= 1 (and below 2^63)"),
    ({"schedule": {"random_crop": {"parallelism": "2"}}}, TypeError,
     "schedule['random_crop']['parallelism'] must be an integer, got str '2'"),
    ({"schedule": {"random_crop": {"prefetch": -1}}}, ValueError,
     "schedule['random_crop']['prefetch'] must be >= 0"),
    ({"schedule": {"take": {"cache": 1}}}, TypeError,
     "schedule['take']['cache'] must be 'memory', 'disk' or 'none', got 1"),
])
def test_bad_argument_names_itself(fmnist_spec, kwargs, error, text):
    with pytest.raises(error) as e:
        sluice.Pipeline(fmnist_spec, **kwargs)
    assert text in str(e.value)
    assert "Unable to cast" not in str(e.value)


def test_tune_cores_names_itself(fmnist_spec):
    with pytest.raises(TypeError, match="cores must be an integer, got str"):
        sluice.tune(fmnist_spec, cores="2")


def test_schedule_dict_cannot_cache_after_a_random_step(fmnist_spec):
    for step in ("random_crop", "shuffle", "batch"):
        for kind in ("memory", "disk"):
            with pytest.raises(sluice.PipelineError) as e:
                sluice.Pipeline(fmnist_spec,
                                schedule={step: {"cache": kind}})
            assert ("cannot cache after '%s': 'random_crop'" % step) in str(e.value)
            assert "cache after 'take'" in str(e.value)
    with pytest.raises(sluice.PipelineError, match="'default'|cannot cache"):
        sluice.Pipeline(fmnist_spec, schedule={"default": {"cache": "memory"}})
    with pytest.raises(sluice.PipelineError, match="cannot cache after 'batch'"):
        sluice.Pipeline(fmnist_spec, schedule={"batch": {"cache": "disk"}})
    # Where the message says it may go, a cache gives the uncached outputs,
    # and epoch 2 is not a replay of epoch 1.
    plain = [b["image"].copy() for b in sluice.Pipeline(fmnist_spec)]
    cached = [b["image"].copy() for b in
              sluice.Pipeline(fmnist_spec, schedule={"take": {"cache": "memory"}})]
    assert len(plain) == len(cached) == 4
    assert all(np.array_equal(a, b) for a, b in zip(plain, cached))
    assert not np.array_equal(cached[0], cached[2])


def test_no_cache_after_a_source_that_shuffles(positional_spec):
    with pytest.raises(sluice.PipelineError) as e:
        sluice.Pipeline(positional_spec,
                        schedule={"batch": {"cache": "memory"}})
    assert "reads in a new random order every epoch" in str(e.value)


def test_impossible_state_counts_are_refused(positional_spec, fmnist_spec):
    p = sluice.Pipeline(positional_spec)
    next(p)
    state = p.state_dict()
    assert state["position_start"] >= 0 and state["rows"] == 4
    for key, value, text in [
            ("rows", 2**62, '"rows" is 4611686018427387904'),
            ("position_start", 10**12, '"position_start" is 1000000000000'),
            ("epoch", 99, '"epoch" is 99, but the pipeline runs 2 epochs')]:
        bad = dict(state, **{key: value})
        with pytest.raises(sluice.PipelineError) as e:
            sluice.Pipeline(positional_spec).load_state_dict(bad)
        assert "does not fit this pipeline: " in str(e.value)
        assert text in str(e.value)
    for key, value, text in [
            ("rows", 2**64, '"rows" must be an integer below 2^63'),
            ("rows", -5, '"rows" must be >= -1, got -5'),
            ("rows", True, '"rows" must be an integer'),
            ("seed", "x1", '"seed" must be a string of decimal digits')]:
        with pytest.raises(ValueError, match="not a sluice pipeline state") as e:
            sluice.Pipeline(positional_spec).load_state_dict(dict(state, **{key: value}))
        assert text in str(e.value)
    # Replay states: outputs past the epoch's 2 outputs.
    q = sluice.Pipeline(fmnist_spec)
    next(q)
    replay = q.state_dict()
    assert replay["outputs"] == 1
    with pytest.raises(sluice.PipelineError) as e:
        sluice.Pipeline(fmnist_spec).load_state_dict(dict(replay, outputs=10**15))
    assert '"outputs" says 1000000000000000 outputs of epoch 0 were delivered, ' \
           'but an epoch has 2' in str(e.value)
    # The state as saved still resumes.
    r = sluice.Pipeline(fmnist_spec)
    r.load_state_dict(replay)
    assert len(list(r)) == 3
