"""bf16 and f16 outputs: `normalize: {dtype: ...}` and `cast: {dtype: ...}`
give, bit for bit, what torch's own f32 -> bfloat16 / float16 conversion
gives for the f32 values the same pipeline makes, over real decoded JPEGs
(fused decode+crop epilogue, separate steps, generated kernels or not) and
over edge values (NaN, +-inf, subnormals, ties, overflow); and the torch
Dataset hands them over as torch.bfloat16 / torch.float16 without a copy."""
import numpy as np
import pytest
import torch

import sluice
import sluice.torch

from conftest import DECODE, images_source, spec_yaml, write

HALF = {"bf16": torch.bfloat16, "f16": torch.float16}


def bits(t):
    """A bfloat16/float16 tensor's bits as uint16."""
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def torch_bits(x, dtype):
    return bits(torch.from_numpy(np.ascontiguousarray(x)).to(HALF[dtype]))


def assert_same_bits(ours, x, dtype):
    """`ours` (uint16 bits) against torch's conversion of f32 `x`. NaN in,
    NaN out: torch's NaN bits differ between its CPU paths (0xFFFF from its
    AVX2/AVX-512 loop, 0x7FC0 from its scalar code), so a NaN only has to
    be a NaN; every other value is compared bit for bit."""
    want = torch_bits(x, dtype)
    ours = np.asarray(ours).reshape(-1)
    want = want.reshape(-1)
    nan = np.isnan(np.asarray(x, dtype=np.float32).reshape(-1))
    exp = 0x7F80 if dtype == "bf16" else 0x7C00
    ours_nan = ((ours & 0x7FFF) > exp)
    assert (ours_nan == nan).all(), "NaN where the input is not, or not NaN"
    diff = np.nonzero((ours != want) & ~nan)[0]
    assert diff.size == 0, "%d of %d values differ, first at %d: %#06x vs " \
        "torch %#06x (f32 %r)" % (diff.size, ours.size, diff[0],
                                  ours[diff[0]], want[diff[0]],
                                  np.asarray(x).reshape(-1)[diff[0]])


def image_spec_text(root, dtype, tail=None):
    norm = "" if dtype == "f32" else ", dtype: %s" % dtype
    return spec_yaml("images", 3, images_source(root), [
        DECODE,
        "random_resized_crop: {field: image, size: [32, 32]}",
        "random_flip: {field: image, axis: width, p: 0.5}",
        "normalize: {field: image, mean: [123.675, 116.28, 103.53], "
        "std: [58.395, 57.12, 57.375]%s}" % norm] + ([tail] if tail else []) +
        ["select: [image, label]",
         "batch: {size: 8, drop_remainder: true}"])


def batches(spec, **kw):
    with sluice.Pipeline(spec, **kw) as p:
        return [b["image"] for b in p], p.output_type["image"]


# Each way the steps can run: generated kernels (the crop's epilogue left
# to a generated remap kernel), the hand-written epilogue fused into the
# crop (jit off), separate runtime steps.
WAYS = [
    ("CHW", {}),
    ("HWC", {}),
    ("CHW", {"jit": False}),
    ("HWC", {"jit": False}),
    ("CHW", {"disable_passes": ["sluice-fuse-crop-epilogue"]}),
    ("CHW", {"disable_passes": ["sluice-fuse-crop-epilogue",
                                "sluice-fuse-decode-crop"], "jit": False}),
    ("HWC", {"disable_passes": ["sluice-fuse-crop-epilogue"], "jit": False}),
]


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("layout,kw", WAYS)
def test_normalize_to_half_is_torch_conversion_of_f32(image_root, tmp_path,
                                                      dtype, layout, kw):
    tail = "transpose: {field: image, to: CHW}" if layout == "CHW" else ""
    f32 = write(tmp_path / "f32.yaml", image_spec_text(image_root, "f32",
                                                       tail))
    half = write(tmp_path / "half.yaml", image_spec_text(image_root, dtype,
                                                         tail))
    want, want_type = batches(f32)
    got, got_type = batches(half, **kw)
    assert got_type == want_type.replace("f32", dtype)
    assert len(got) == len(want) == 6
    for g, w in zip(got, want):
        assert g.dtype == (np.uint16 if dtype == "bf16" else np.float16)
        assert g.nbytes * 2 == w.nbytes
        assert_same_bits(g.view(np.uint16), w, dtype)
    # Real pictures, not a constant: many distinct values.
    assert len(np.unique(got[0].view(np.uint16))) > 200


def test_every_way_of_running_gives_the_same_bytes(image_root, tmp_path):
    spec = write(tmp_path / "bf16.yaml", image_spec_text(
        image_root, "bf16", "transpose: {field: image, to: CHW}"))
    ref, _ = batches(spec)
    for layout, kw in WAYS:
        if layout != "CHW" or not kw:
            continue
        other, _ = batches(spec, **kw)
        assert all(np.array_equal(a, b) for a, b in zip(ref, other)), kw


def edge_values():
    """f32 values where the rounding to 16 bits is delicate."""
    specials = np.array([
        0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan,
        3.4028235e38, -3.4028235e38,  # f32 max: overflows both
        3.3961775e38,  # rounds up to bf16 inf
        65504.0, 65519.0, 65520.0, -65520.0,  # f16 max, last below inf, inf
        1e-40, -1e-45, 1.17549435e-38, 1.1754942e-38,  # f32 subnormals
        6.1035156e-05, 6.0975552e-05, 5.9604645e-08, 2.9802322e-08,
        2.9802326e-08, 1e-8,  # f16 smallest normal, subnormals, half-ulp
        1.00390625, 1.01171875, 1.0078125, 1.0009765625,  # ties
        1.0004883, 1.0014648, -1.00390625, 255.5, -2.1179039, 2.64,
    ], dtype=np.float32)
    payloads = np.array([0x7F800001, 0xFF800001, 0x7FC00000, 0xFFC12345,
                         0x7FA00000, 0x7F80FFFF, 0x007FFFFF, 0x80000001,
                         0x3F808000, 0x3F818000, 0x3F807FFF, 0x477FEFFF,
                         0x477FF000, 0x7F7F8000, 0x7F7F7FFF],
                        dtype=np.uint32).view(np.float32)
    rng = np.random.default_rng(7)
    random_bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(
        np.uint32).view(np.float32)
    # Every rounding case near 1 for both widths: low 16 bits all ways.
    low = (np.uint32(0x3F800000) | np.arange(0, 1 << 16, 7,
                                             dtype=np.uint32)).view(np.float32)
    return np.concatenate([specials, payloads, random_bits, low])


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("jit", [True, False])
def test_cast_edge_values_match_torch(tmp_path, dtype, jit):
    x = edge_values()
    np.save(tmp_path / "x.npy", x.reshape(-1, 1))
    spec = write(tmp_path / "cast.yaml", """
        pipeline: cast
        source:
          npy: {files: %s/x.npy, field: x}
        steps:
          - cast: {field: x, dtype: %s}
          - batch: {size: 4096}
        """ % (tmp_path, dtype))
    with sluice.Pipeline(spec, jit=jit) as p:
        assert (p.kernels > 0) == jit
        got = np.concatenate([b["x"].view(np.uint16).reshape(-1) for b in p])
    assert got.size == x.size
    assert_same_bits(got, x, dtype)


def test_bf16_nan_keeps_its_sign_and_payload_top(tmp_path):
    """sluice's own NaN rule (torch's differs between its code paths): the
    top half of the NaN, made quiet."""
    x = np.array([0x7F800001, 0xFFC12345, 0x7FA00000, 0x7FC00000],
                 dtype=np.uint32).view(np.float32)
    np.save(tmp_path / "x.npy", x)
    spec = write(tmp_path / "nan.yaml", """
        pipeline: nan
        source:
          npy: {files: %s/x.npy, field: x}
        steps:
          - cast: {field: x, dtype: bf16}
          - batch: {size: 4}
        """ % tmp_path)
    for jit in (True, False):
        with sluice.Pipeline(spec, jit=jit) as p:
            got = next(p)["x"]
        assert [hex(v) for v in got] == ["0x7fc0", "0xffc1", "0x7fe0",
                                         "0x7fc0"]


def test_dataset_hands_over_bfloat16_without_a_copy(image_root, tmp_path):
    spec = write(tmp_path / "bf16.yaml", image_spec_text(
        image_root, "bf16", "transpose: {field: image, to: CHW}"))
    f32 = write(tmp_path / "f32.yaml", image_spec_text(
        image_root, "f32", "transpose: {field: image, to: CHW}"))
    ds = sluice.torch.Dataset(spec)
    bases = []
    convert = ds._convert

    def spy(batch):
        bases.append(batch["image"].base.address)
        return convert(batch)

    ds._convert = spy
    got = [b["image"] for b in ds]
    assert got[0].dtype == torch.bfloat16
    assert got[0].shape == (8, 3, 32, 32)
    assert got[0].data_ptr() == bases[0]
    want = [b["image"] for b in sluice.torch.Dataset(f32)]
    for g, w in zip(got, want):
        assert torch.equal(g, w.to(torch.bfloat16))
    # f16 is numpy's own float16: from_numpy gives torch.float16.
    f16 = write(tmp_path / "f16.yaml", image_spec_text(
        image_root, "f16", "transpose: {field: image, to: CHW}"))
    b = next(iter(sluice.torch.Dataset(f16)))
    assert b["image"].dtype == torch.float16


def test_map_on_bf16_is_refused_with_a_way_out(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((4, 2), np.float32))
    spec = write(tmp_path / "map.yaml", """
        pipeline: m
        source:
          npy: {files: %s/x.npy, field: x}
        steps:
          - cast: {field: x, dtype: bf16}
          - map: {field: x, expr: "x * 2"}
        """ % tmp_path)
    with pytest.raises(Exception) as e:
        sluice.Pipeline(spec)
    msg = str(e.value)
    assert "map.yaml:6" in msg and "bf16" in msg and "cast" in msg, msg
