"""Host copies folded into the NPU's transfers (targets/npu/remap.py): which copies fold,
the rows a transfer of a folded intermediate moves (checked against the copy itself, run in
numpy), and whole kernels whose im2col, weight reshape and unpadding the DMA does instead of
the host, exact against the host reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from intrinsics import default_registry
from ir import te
from ir.onnx import kernels
from simulator import Load, Mem, Store, load_machine
from targets import host, npu
from targets.npu.memory import InDram
from targets.npu.remap import RemapRefused, copy_remaps, expand, foldable, runs
from tensorize.engine import auto_tensorize

REGISTRY = default_registry()
CONFIG = load_machine()
QUANT = kernels.Requantisation(3)


def conv(n=1, c=16, size=6, out=16, kernel=3, stride=1, pad=1):
    return kernels.ConvShape(n, c, size, size, out, (kernel, kernel), (stride, stride),
                             (pad,) * 4, (1, 1), 1)


def rows_kernel(shape: kernels.ConvShape, tile: int = 16):
    """The implicit form of ``shape`` padded to ``tile`` (as a layer pads it)."""
    oh, ow = shape.out_hw
    up = lambda v: max(-(-v // tile) * tile, 2)  # noqa: E731
    k = shape.kernel[0] * shape.kernel[1] * shape.c
    return kernels.conv_rows_requantised(shape, up(shape.n * oh * ow), up(k),
                                         up(shape.out_channels), QUANT)


def copy_stage(func):
    """The host stages of ``func`` tensorized for the NPU, and the split."""
    result = auto_tensorize(func, "npu", registry=REGISTRY, config=CONFIG)
    stages = npu.split_stages(result.func, REGISTRY.get)
    return result, stages


def test_an_im2col_a_weight_reshape_and_an_unpadding_are_recognised():
    func = kernels.conv2d(conv(c=16, size=8, out=16), "int8")
    _, stages = copy_stage(func)
    found = {s.label: [(r.via.name, r.to.name, r.gather) for r in copy_remaps(s.stmt, s.label)]
             for s in stages if not s.on_npu}
    assert found["X_reindex"] == [("X_reindex", "X", True)]
    assert found["W_reindex"] == [("W_reindex", "W", True)]
    # The unpacking reads mixed-radix rows and writes whole indices: both readings exist,
    # and foldable takes the one whose intermediate is the program's.
    assert ("conv_reindex", "conv", False) in found["conv_reindex"]
    folds = foldable(stages, func.params)
    (program,) = folds
    assert {b.name for b in folds[program]} == {"X_reindex", "W_reindex", "conv_reindex"}


def test_a_computing_block_is_no_copy():
    a = te.placeholder((4, 4), "int8", "A")
    doubled = te.compute((4, 4), lambda i, j: a[i, j] + a[i, j], "doubled")
    func = te.create_prim_func([a, doubled], "double")
    assert copy_remaps(func.body.block.body, "doubled") == []


def test_a_guarded_copy_covers_up_to_its_bounds():
    func = rows_kernel(conv(size=7, c=16, out=16))  # 49 rows padded to 64
    _, stages = copy_stage(func)
    (im2col,) = [s for s in stages if s.label == "im2col"]
    (remap,) = copy_remaps(im2col.stmt, "im2col")
    assert remap.gather and remap.covered == (49, 144)


def gathered(remap, starts_rows, cols, to_array):
    """What the transfers of ``runs`` put in the rows of a region: each run's rows read from
    ``to_array`` (flat) at its offsets, or zeros."""
    flat = to_array.reshape(-1)
    out = []
    for run in starts_rows:
        for r in range(run.rows):
            if run.start is None:
                out.append(np.zeros(cols, flat.dtype))
            else:
                at = run.start + r * run.stride
                out.append(flat[at:at + cols])
    return np.stack(out)


@settings(max_examples=8, deadline=None)
@given(size=st.integers(3, 9), c=st.sampled_from([16, 32]), kernel=st.sampled_from([1, 3]),
       stride=st.sampled_from([1, 2]), row=st.integers(0, 200), rows=st.integers(1, 40),
       column_block=st.integers(0, 20))
def test_the_runs_of_a_region_read_what_the_copy_writes(size, c, kernel, stride, row, rows,
                                                        column_block):
    shape = conv(c=c, size=size, kernel=kernel, stride=stride, pad=kernel // 2)
    func = rows_kernel(shape)
    _, stages = copy_stage(func)
    (im2col,) = [s for s in stages if s.label == "im2col"]
    (remap,) = copy_remaps(im2col.stmt, "im2col")
    a_rows, depth = remap.via.shape
    row, column = row % a_rows, (column_block * 16) % depth
    rows = min(rows, a_rows - row)
    x = np.random.default_rng(size * c + row).integers(-128, 128, func.params[0].shape,
                                                       dtype=np.int8)
    # The copy itself, on the host: the kernel run up to its im2col.
    a = host.run(_copy_only(func, im2col), [x])["im2col"]
    found = runs(remap, row * depth + column, depth, rows, 16)
    assert sum(r.rows for r in found) == rows
    assert all(r.start is None or r.rows == 1 or r.stride > 0 for r in found)
    np.testing.assert_array_equal(gathered(remap, found, 16, x),
                                  a[row:row + rows, column:column + 16])


def _copy_only(func, stage):
    """A function of the kernel's input computing only its im2col."""
    from ir.function import PrimFunc, make_root

    x = func.params[0]
    im2col = next(b for b in stage.buffers if b.name == "im2col")
    return PrimFunc("im2col_only", (x, im2col), make_root(stage.stmt))


def test_a_row_partly_inside_the_copy_is_refused():
    # 3 input channels: a 16-column block of a 3x3 window's 27 columns crosses the window's
    # rows (not consecutive in X) and its end (partly padding).
    func = rows_kernel(conv(c=3, size=6, out=16))
    _, stages = copy_stage(func)
    (im2col,) = [s for s in stages if s.label == "im2col"]
    (remap,) = copy_remaps(im2col.stmt, "im2col")
    with pytest.raises(RemapRefused, match="im2col"):
        runs(remap, 16, remap.via.shape[1], 4, 16)


def test_expand_sends_uncovered_rows_to_zeros_or_the_discard_area():
    func = rows_kernel(conv(size=7, c=16, out=16))
    _, stages = copy_stage(func)
    (im2col,) = [s for s in stages if s.label == "im2col"]
    (remap,) = copy_remaps(im2col.stmt, "im2col")
    depth = remap.via.shape[1]
    places = {remap.to: InDram(remap.to, 0, remap.to.size),
              remap.via: InDram(remap.via, 1 << 20, remap.via.size)}
    # Rows 40..63 of the padded 64: 40..48 are pixels, 49..63 padding.
    load = Load(mem=Mem.INP, sram=0, rows=24, cols=16, dram=(1 << 20) + 40 * depth, stride=depth)
    out = expand([load], places, {remap.via: remap}, zeros=5000, discard=6000)
    assert sum(i.rows for i in out) == 24
    assert out[-1].dram == 5000 and out[-1].stride == 0 and out[-1].rows == 15
    assert all(i.dram < remap.to.size for i in out[:-1])
    store = Store(sram=0, rows=24, cols=16, dram=(1 << 20) + 40 * depth, stride=depth)
    remap_store = type(remap)(remap.via, remap.to, False, remap.indices, remap.offset,
                              remap.covered, remap.label)
    (*_, last) = expand([store], places, {remap.via: remap_store}, zeros=5000, discard=6000)
    assert last.dram == 6000 and last.stride == 16 and last.rows == 15


@pytest.mark.parametrize("shape", [
    conv(size=8, c=16, out=32),                      # 3x3, image rows of 8 pixels
    conv(size=7, c=32, out=16, stride=2),            # 4x4 outputs: 16 rows, stride 2
    conv(size=5, c=16, out=16, kernel=1, pad=0),     # 25 rows padded to 32
    conv(n=2, size=4, c=16, out=16),                 # a batch of two images
])
def test_an_implicit_gemm_runs_exactly_with_every_copy_in_the_dma(shape):
    func = rows_kernel(shape)
    result, _ = copy_stage(func)
    plan = npu.plan(result.func, CONFIG, lookup=REGISTRY.get)
    assert [s.stage.label for s in plan.stages if s.compiled is None] == []
    (compiled,) = [s.compiled for s in plan.stages if s.compiled is not None]
    assert compiled.folded == ("im2col",)
    rng = np.random.default_rng(7)
    inputs = {p.name: rng.integers(-128, 128, p.shape, dtype=np.int8)
              for p in func.params[:2]}
    inputs["Bias"] = rng.integers(-5000, 5000, func.params[2].shape, dtype=np.int32)
    inputs["Scale"] = rng.uniform(1e-4, 1e-2, func.params[3].shape).astype(np.float32)
    out = npu.execute(plan, inputs).outputs[func.params[-1].name]
    expected = host.run(func, [inputs[p.name] for p in func.params[:4]]
                        + [np.zeros(func.params[-1].shape, np.int8)])[func.params[-1].name]
    np.testing.assert_array_equal(out, expected)


def test_a_refused_gather_leaves_its_copy_on_the_host_and_stays_exact():
    func = rows_kernel(conv(c=3, size=6, out=16))
    result, _ = copy_stage(func)
    plan = npu.plan(result.func, CONFIG, lookup=REGISTRY.get)
    assert [s.stage.label for s in plan.stages if s.compiled is None] == ["im2col"]
    rng = np.random.default_rng(3)
    inputs = {p.name: rng.integers(-128, 128, p.shape, dtype=np.int8)
              for p in func.params[:2]}
    inputs["Bias"] = np.zeros(func.params[2].shape, np.int32)
    inputs["Scale"] = np.full(func.params[3].shape, 1e-3, np.float32)
    out = npu.execute(plan, inputs).outputs[func.params[-1].name]
    expected = host.run(func, [inputs[p.name] for p in func.params[:4]]
                        + [np.zeros(func.params[-1].shape, np.int8)])[func.params[-1].name]
    np.testing.assert_array_equal(out, expected)


def test_rows_stored_into_a_padded_image_go_out_one_image_row_at_a_time():
    # A 1x1 convolution of a 12 x 12 image (144 rows) whose output is the interior of the
    # 14 x 14 padded input of a 3x3 convolution after it: the scatter folds into the
    # stores, each run one image row of 12 pixels, and the halo (here 77, the pack's fill)
    # is left as it was.
    shape = conv(size=12, kernel=1, pad=0)
    base = rows_kernel(shape)
    func = kernels.stored_in_image(base, (1, 12, 12), (14, 14))
    result = auto_tensorize(func, "npu", registry=REGISTRY, config=CONFIG)
    planned = npu.plan(result.func, CONFIG, lookup=REGISTRY.get)
    (stage,) = planned.stages
    assert stage.compiled is not None and "Image" in stage.compiled.folded
    stores = [i for i in stage.compiled.program if isinstance(i, Store)]
    assert stores and all(s.rows <= 12 for s in stores)
    rng = np.random.default_rng(5)
    inputs = {"X": rng.integers(-128, 128, (1, 12, 12, 16), dtype=np.int8),
              "B": rng.integers(-128, 128, (16, 16), dtype=np.int8),
              "Bias": rng.integers(-900, 900, 16).astype(np.int32),
              "Scale": rng.uniform(1e-3, 0.05, 16).astype(np.float32)}
    halo = np.full((1, 14, 14, 16), 77, np.int8)
    image = npu.execute(planned, {**inputs, "Image": halo}).outputs["Image"]
    expected = host.run(base, inputs)[base.params[-1].name]
    assert np.array_equal(image[0, :12, :12].reshape(144, 16), expected)
    assert (image[0, 12:] == 77).all() and (image[0, :, 12:] == 77).all()


def test_a_depthwise_layers_windows_and_channels_go_through_its_transfers():
    # Depthwise 3x3 over 14 x 14 x 32 as two groups of 16 channels: its loads gather each
    # tap's 16 channels from the padded image, and its stores lay the groups' channels side
    # by side as the next layer reads them, (n, h, w, groups, 16), the bytes of (n, h, w, c).
    shape = kernels.ConvShape(1, 32, 14, 14, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 32)
    base = kernels.grouped_conv_rows_requantised(shape, 208, 144, 16, QUANT)
    func = kernels.stored_in_image(base, (1, 14, 14), (14, 14))
    result = auto_tensorize(func, "npu", registry=REGISTRY, config=CONFIG)
    planned = npu.plan(result.func, CONFIG, lookup=REGISTRY.get)
    (stage,) = planned.stages
    assert stage.compiled is not None and set(stage.compiled.folded) == {"im2col", "Image"}
    rng = np.random.default_rng(9)
    inputs = {"X": rng.integers(-128, 128, (1, 16, 16, 32), dtype=np.int8),
              "B": rng.integers(-128, 128, (2, 144, 16), dtype=np.int8),
              "Bias": rng.integers(-900, 900, (2, 16)).astype(np.int32),
              "Scale": rng.uniform(1e-3, 0.05, (2, 16)).astype(np.float32)}
    image = npu.execute(planned, inputs).outputs["Image"]
    expected = host.run(base, inputs)[base.params[-1].name]  # groups x rows x 16
    assert image.shape == (1, 14, 14, 2, 16)
    assert np.array_equal(image.reshape(196, 2, 16).transpose(1, 0, 2), expected[:, :196])
