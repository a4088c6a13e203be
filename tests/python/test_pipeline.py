"""sluice.Pipeline: iteration, zero-copy outputs, the budget account of held
batches, check(), per-epoch reshuffle, strings, seeds and schedules."""
import gc
import json

import numpy as np
import pytest

import sluice
from conftest import batches_equal, write


def test_iterates_all_batches_with_types(image_spec):
    p = sluice.Pipeline(image_spec)
    assert p.output_type == {"path": "string[8]", "image": "f32[8,3,32,32]",
                             "label": "i64[8]"}
    assert len(p) == 2 * (48 // 8)
    got = list(p)
    assert len(got) == 12
    for b in got:
        assert b["image"].shape == (8, 3, 32, 32)
        assert b["image"].dtype == np.float32
        assert b["label"].dtype == np.int64
        assert set(b["label"].tolist()) <= {0, 1, 2}
    # Each epoch covers 48 distinct files.
    for e in range(2):
        paths = [s for b in got[6 * e:6 * e + 6] for s in b["path"].tolist()]
        assert len(set(paths)) == 48


def test_strings_are_object_arrays_of_str(image_spec):
    b = next(iter(sluice.Pipeline(image_spec)))
    assert b["path"].dtype == object
    assert all(isinstance(s, str) and s.endswith(".jpg") for s in b["path"])


def test_bytes_fields_are_object_arrays_of_bytes(image_root, tmp_path):
    spec = write(tmp_path / "raw.yaml", """
        pipeline: raw
        source:
          files: {glob: %s/class0/*.jpg}
        steps:
          - batch: {size: 4}
        """ % image_root)
    b = next(iter(sluice.Pipeline(spec)))
    assert b["data"].dtype == object and b["data"].shape == (4,)
    assert all(isinstance(x, bytes) and x[:2] == b"\xff\xd8" for x in b["data"])


def test_zero_copy_base_is_runtime_buffer(image_spec):
    p = sluice.Pipeline(image_spec)
    b = next(p)
    img = b["image"]
    assert isinstance(img.base, sluice.Buffer)
    assert img.base.address == img.__array_interface__["data"][0]
    assert img.base.nbytes == img.nbytes
    # A fresh batch belongs to Python alone: writable.
    assert img.flags.writeable
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(img)
    assert t.data_ptr() == img.base.address


def test_held_batches_count_in_budget(image_spec):
    p = sluice.Pipeline(image_spec)
    assert p.held_bytes == 0
    a = next(p)
    one = p.held_bytes
    assert one >= a["image"].nbytes + a["label"].nbytes
    b = next(p)
    assert p.held_bytes >= 2 * a["image"].nbytes
    del a, b
    gc.collect()
    assert p.held_bytes == 0
    assert "outputs held by the caller" in str(p.stats())


def test_arrays_outlive_the_pipeline(image_spec):
    p = sluice.Pipeline(image_spec)
    b = next(p)
    ref = b["image"].copy()
    p.close()
    del p
    gc.collect()
    assert np.array_equal(b["image"], ref)


def test_deterministic_and_reshuffles_each_epoch(image_spec):
    a = list(sluice.Pipeline(image_spec, threads=1))
    b = list(sluice.Pipeline(image_spec, threads=2))
    assert all(batches_equal(x, y) for x, y in zip(a, b))
    order0 = [s for x in a[:6] for s in x["path"].tolist()]
    order1 = [s for x in a[6:] for s in x["path"].tolist()]
    assert sorted(order0) == sorted(order1)
    assert order0 != order1


def test_first_epoch_equals_that_epoch_of_a_full_run(image_spec):
    full = list(sluice.Pipeline(image_spec))
    second = list(sluice.Pipeline(image_spec, first_epoch=1))
    assert len(second) == 6
    assert all(batches_equal(x, y) for x, y in zip(full[6:], second))


def test_seed_override_changes_order(image_spec):
    a = next(iter(sluice.Pipeline(image_spec, seed=1)))
    b = next(iter(sluice.Pipeline(image_spec, seed=2)))
    c = next(iter(sluice.Pipeline(image_spec, seed=1)))
    assert batches_equal(a, c)
    assert not batches_equal(a, b)


def test_schedule_dict_keeps_output(image_spec):
    a = list(sluice.Pipeline(image_spec, epochs=1))
    b = list(sluice.Pipeline(image_spec, epochs=1,
                             schedule={"default": {"prefetch": 3},
                                       "decode_image": {"parallelism": 1}}))
    assert all(batches_equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError, match="did you mean 'decode_image'"):
        sluice.Pipeline(image_spec, schedule={"decode_imag": {"prefetch": 1}})


def test_check_returns_typed_stages(image_spec):
    stages = sluice.check(image_spec)
    assert [s["op"] for s in stages] == [
        "image_folder", "decode_image", "random_resized_crop", "random_flip",
        "normalize", "transpose", "select", "shuffle", "batch"]
    assert stages[0]["type"] == {"path": "string", "data": "bytes",
                                 "label": "i64"}
    assert stages[-1]["type"]["image"] == "f32[8,3,32,32]"
    assert stages[1]["line"] == 6 and stages[1]["col"] == 5


def test_fashion_mnist_batches(fashion_spec):
    n = 0
    for b in sluice.Pipeline(fashion_spec):
        assert b["image"].dtype == np.float32
        n += b["image"].shape[0]
    assert n == 2000


def test_tune_returns_the_report_and_a_replayable_schedule(fashion_spec,
                                                          tmp_path):
    report = sluice.tune(fashion_spec, cores=2, seconds=0.3,
                         report_dir=str(tmp_path / "report"))
    assert isinstance(report, dict)
    assert "schedule_yaml" in report and "schedule:" in report["schedule_yaml"]
    on_disk = json.loads((tmp_path / "report" / "report.json").read_text())
    assert {k: v for k, v in report.items() if k != "schedule_yaml"}.keys() \
        == on_disk.keys()
    sched = tmp_path / "schedule.yaml"
    sched.write_text(report["schedule_yaml"])
    a = list(sluice.Pipeline(fashion_spec))
    b = list(sluice.Pipeline(fashion_spec, schedule=str(sched)))
    assert len(a) == len(b) and all(batches_equal(x, y) for x, y in zip(a, b))
    with pytest.raises(sluice.SpecError):
        sluice.tune(str(tmp_path / "missing.yaml"))


def test_schedule_auto_is_tuned_and_changes_no_byte(fashion_spec, tmp_path,
                                                   monkeypatch):
    """A spec saying `schedule: auto` is profiled and solved through the
    autotuner's library call, as `sluice run` does; the chosen schedule is
    visible and the outputs equal those of fixed schedules."""
    monkeypatch.delenv("SLUICE_NO_AUTOTUNE", raising=False)
    spec = write(tmp_path / "auto.yaml",
                 open(fashion_spec).read() + "schedule: auto\n")
    tuned = sluice.Pipeline(spec)
    assert tuned.autotuned
    assert tuned.schedule, tuned.schedule
    for step, knobs in tuned.schedule.items():
        assert set(knobs) <= {"parallelism", "prefetch", "cache"}, knobs
    assert tuned.schedule_explanation
    got = list(tuned)
    fixed = list(sluice.Pipeline(spec, schedule={
        "default": {"parallelism": 1, "prefetch": 1}}))
    defaults = list(sluice.Pipeline(spec, schedule={}))
    assert len(got) == len(fixed) == len(defaults) == 32
    assert all(batches_equal(x, y) for x, y in zip(got, fixed))
    assert all(batches_equal(x, y) for x, y in zip(got, defaults))
    # The chosen schedule replays without profiling again.
    again = sluice.Pipeline(spec, schedule=tuned.schedule)
    assert not again.autotuned and again.schedule == tuned.schedule
    # Not tuned: a spec without `schedule: auto`, schedule={}, or
    # SLUICE_NO_AUTOTUNE=1 (as for `sluice run`); schedule="auto" asks for
    # it on any spec.
    assert not sluice.Pipeline(fashion_spec).autotuned
    assert sluice.Pipeline(fashion_spec, schedule="auto").autotuned
    monkeypatch.setenv("SLUICE_NO_AUTOTUNE", "1")
    off = sluice.Pipeline(spec)
    assert not off.autotuned and off.schedule == {}
    assert off.schedule_explanation == ""


def test_torch_dataset_tunes_once(fashion_spec, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import sluice.torch
    monkeypatch.delenv("SLUICE_NO_AUTOTUNE", raising=False)
    spec = write(tmp_path / "auto.yaml",
                 open(fashion_spec).read() + "schedule: auto\n")
    ds = sluice.torch.Dataset(spec)
    first = ds.pipeline()
    assert first.autotuned
    chosen = first.schedule
    n = len(ds)
    assert len(list(ds)) == n and len(list(ds)) == n
    ds.set_epoch(5)  # out of order: the pipeline restarts, not re-tuned
    assert len(list(ds)) == n
    assert ds.pipeline() is first and first.schedule == chosen


def test_stubs_match_the_module():
    """The .pyi stubs an editor completes from name exactly the extension's
    public classes, functions, methods and properties (with the same keyword
    arguments for the constructors and functions), and each of those has a
    docstring."""
    import ast
    import os
    import inspect
    from sluice import _sluice
    stub = ast.parse(open(os.path.join(os.path.dirname(_sluice.__file__),
                                       "_sluice.pyi")).read())
    classes = {n.name: n for n in stub.body if isinstance(n, ast.ClassDef)}
    funcs = {n.name: n for n in stub.body if isinstance(n, ast.FunctionDef)}
    public = {k for k in vars(_sluice) if not k.startswith("_")}
    assert public == set(classes) | set(funcs)

    def kwargs(fn):
        a = fn.args
        return [x.arg for x in a.args + a.kwonlyargs if x.arg != "self"]

    for name, fn in funcs.items():
        obj = getattr(_sluice, name)
        assert obj.__doc__ and len(obj.__doc__) > 40, name
        for arg in kwargs(fn):
            assert arg in obj.__doc__.split("\n", 1)[0], (name, arg)
    for name, cls in classes.items():
        obj = getattr(_sluice, name)
        assert obj.__doc__, name
        members = {n.name: n for n in cls.body
                   if isinstance(n, ast.FunctionDef)}
        real = {k for k, v in vars(obj).items() if not k.startswith("_")
                or k in ("__init__", "__iter__", "__next__", "__len__",
                         "__enter__", "__exit__")}
        if issubclass(obj, Exception):
            real.discard("__init__")
        elif "__init__" in real:
            try:
                obj()
            except TypeError as e:
                if "No constructor defined" in str(e):
                    real.discard("__init__")  # made by the module only
        assert set(members) == real, (name, set(members) ^ real)
        for m in members:
            attr = inspect.getattr_static(obj, m)
            doc = getattr(attr, "__doc__", None)
            if m not in ("__iter__", "__enter__", "__exit__"):
                assert doc, (name, m)
        if "__init__" in members:
            sig = obj.__init__.__doc__.split("\n", 1)[0]
            for arg in kwargs(members["__init__"]):
                assert arg + ":" in sig, (name, arg, sig)


def test_schedule_auto_caches_inside_a_fused_stage(tmp_path, monkeypatch):
    """cast+map+normalize+random_crop+random_flip is one fused random stage;
    `schedule: auto` prices a cache after normalize (the plan split there)
    as `sluice run` does, chooses it for 3 epochs of a costly map, and the
    outputs are those of the fused plan without a cache."""
    monkeypatch.delenv("SLUICE_NO_AUTOTUNE", raising=False)
    monkeypatch.delenv("SLUICE_NO_CACHE_SPLIT", raising=False)
    spec = write(tmp_path / "prefix.yaml", """
        pipeline: prefix
        seed: 5
        source:
          idx:
            images: /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz
            labels: /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz
        steps:
          - cast: {field: image, dtype: f32}
          - map: {field: image, expr: "sqrt(abs(sin(x) * cos(x / 3) + exp(-x / 255) * log(x + 1)))"}
          - normalize: {field: image, mean: 0.5, std: 0.25}
          - random_crop: {field: image, size: [24, 24]}
          - random_flip: {field: image, axis: width}
          - batch: {size: 500}
        epochs: 3
        budget: {cores: 2, memory: 512MiB}
        schedule: auto
        """)
    tuned = sluice.Pipeline(spec)
    assert tuned.autotuned
    assert tuned.schedule.get("cast+map+normalize", {}).get("cache") in (
        "memory", "disk"), tuned.schedule_explanation
    assert "cache point inside fused" in tuned.schedule_explanation
    got = list(tuned)
    plain = list(sluice.Pipeline(spec, schedule={}))
    assert len(got) == len(plain) == 60
    assert all(batches_equal(x, y) for x, y in zip(got, plain))
    # The chosen schedule replays the same split without profiling.
    again = sluice.Pipeline(spec, schedule=tuned.schedule)
    assert not again.autotuned
    assert all(batches_equal(x, y) for x, y in zip(list(again), plain))


@pytest.fixture(scope="session")
def expr_spec(tmp_path_factory):
    """A CSV with negative, missing and out-of-range cells, a filter and a map
    expression: steps the code generator compiles to kernels."""
    d = tmp_path_factory.mktemp("expr")
    rng = np.random.default_rng(9)
    with open(d / "rows.csv", "w") as f:
        for i in range(700):
            cells = ["" if rng.random() < 0.1 else "%.4f" % v
                     for v in rng.normal(0, 50, 4)]
            f.write("%d,%s,%d\n" % (int(rng.integers(-1, 3)), ",".join(cells),
                                    int(rng.integers(0, 1 << 30))))
    return write(d / "expr.yaml", """
        pipeline: expr
        source:
          csv:
            files: %s/rows.csv
            columns:
              - {name: label, type: i64}
              - {name: dense, type: f32, count: 4}
              - {name: id, type: i64}
        steps:
          - filter: {where: "label >= 0 && id %% 7 != 3"}
          - fill_missing: {field: dense, value: 0}
          - map: {field: dense, expr: "log(max(x, 0) + 1) * 2 - 0.5"}
          - hash_bucket: {field: id, buckets: 1000}
          - batch: {size: 64}
        epochs: 2
        budget: {cores: 2}
        """ % d)


@pytest.mark.parametrize("which", ["expr", "images"])
def test_generated_kernels_same_bytes_as_cli(which, expr_spec, image_spec,
                                             tmp_path, monkeypatch):
    """Pipeline compiles the plan `sluice run` runs, generated kernels
    included (``kernels`` counts them); jit=False and SLUICE_NO_JIT=1 run
    the runtime's own kernels. All three, and the CLI, give the same bytes."""
    import glob
    import subprocess
    from conftest import SLUICE_BIN, batches_equal
    spec = expr_spec if which == "expr" else image_spec
    monkeypatch.delenv("SLUICE_NO_JIT", raising=False)
    p = sluice.Pipeline(spec)
    assert p.kernels > 0
    jit = list(p)
    off = sluice.Pipeline(spec, jit=False)
    assert off.kernels == 0
    assert len(jit) > 2 and len(list(off)) == len(jit)
    off = list(sluice.Pipeline(spec, jit=False))
    assert all(batches_equal(a, b) for a, b in zip(jit, off))
    monkeypatch.setenv("SLUICE_NO_JIT", "1")
    env_off = sluice.Pipeline(spec)
    assert env_off.kernels == 0
    assert all(batches_equal(a, b) for a, b in zip(jit, env_off))
    monkeypatch.delenv("SLUICE_NO_JIT")
    r = subprocess.run([SLUICE_BIN, "run", spec, "--quiet", "--sink",
                        "npy:%s" % (tmp_path / "cli")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    field = "dense" if which == "expr" else "image"
    cli = [np.load(f) for f in
           sorted(glob.glob(str(tmp_path / "cli" / ("*.%s.npy" % field))))]
    assert len(cli) == len(jit)
    assert all(c.tobytes() == b[field].tobytes() for c, b in zip(cli, jit))
