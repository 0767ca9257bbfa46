"""Any NPU a vendor describes in YAML runs: arrays from 2x2 to 128x128, square or not, both
dataflows, one to four banks, any bandwidth, and GEMM families of any tile shape the array
executes (k <= R, n <= C), zeroing their accumulator by a resetting variant or a fill
intrinsic. Each machine and its family are one YAML file in a temporary directory; a GEMM and
a convolution go through tensorize, validate (the tensorized IR on the host) and simulate, and
both must equal numpy exactly."""

from __future__ import annotations

import numpy as np
import pytest

from dataclasses import replace

import ir
from intrinsics import Registry, lowerer
from intrinsics.model import frozen_mapping
from ir import te
from ir.errors import IntrinsicSpecError
from simulator import Gemm, MachineConfig, Vec, VecOp
from targets import host, npu
from tensorize.engine import auto_tensorize
from tests.targets.npu.machines import Npu

# Each machine with the GEMM (m, n, k) and the convolution (size, channels, out channels)
# it runs: sizes the tiles divide, so that packing stays cheap on the host, except where a
# machine pads (the 2x2 and the tall-tile one); convolutions of 9 * channels reduction steps.
CASES = [
    (Npu("npu2x2", 2, 2, i=2, k=2, inp_rows=64, wgt_rows=16, acc_rows=64, banks=1,
         bytes_per_cycle=0.5), (5, 3, 5), (2, 2, 2)),
    (Npu("npu4x4", 4, 4, i=4, k=4), (8, 8, 8), (2, 4, 4)),
    (Npu("npu8x32", 8, 32, i=8, k=8, banks=4), (16, 64, 16), (4, 8, 32)),
    (Npu("npu16x16tall", 16, 16, i=32, k=16, double_buffered_weights=False), (63, 20, 40),
     (8, 16, 16)),
    # More rows than columns, output-stationary, 8-deep calls on a 32-row array, a fill.
    (Npu("npu32x16os", 32, 16, i=16, k=8, dataflow="output_stationary", zero="fill",
         bytes_per_cycle=2), (32, 32, 16), (4, 8, 16)),
    # One reduction step: the fill, then a single accumulating GEMM per tile.
    (Npu("npu32x32fill", 32, 32, i=32, k=32, zero="fill"), (32, 32, 32), (8, 32, 32)),
    (Npu("npu64x64", 64, 64, i=64, k=64, acc_rows=512, bytes_per_cycle=64), (64, 128, 128),
     (8, 64, 64)),
    # A 128-deep GEMM of 64 rows: 128 x 128 x 128 would exceed the descriptions' limit of
    # 2^20 iteration points per intrinsic (intrinsics/limits.py).
    (Npu("npu128x128", 128, 128, i=64, k=128, inp_rows=512, wgt_rows=256, acc_rows=512),
     (128, 128, 256), (8, 128, 128)),
]


def _i32(x: ir.Expr) -> ir.Expr:
    return ir.cast("int32", x)


def gemm(m: int, n: int, k: int) -> ir.PrimFunc:
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(_i32(A[i, rk]) * _i32(B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], "gemm")


def conv(size: int, channels: int, out_channels: int) -> ir.PrimFunc:
    """3x3 convolution, NHWC, stride 1, no padding."""
    I = te.placeholder((1, size + 2, size + 2, channels), "int8", "I")
    W = te.placeholder((3, 3, channels, out_channels), "int8", "W")
    rh, rw, rc = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw"), te.reduce_axis(channels, "rc")
    O = te.compute((1, size, size, out_channels), lambda n, h, w, co: te.sum(
        _i32(I[n, h + rh, w + rw, rc]) * _i32(W[rh, rw, rc, co]), axis=[rh, rw, rc]), "O")
    return te.create_prim_func([I, W, O], "conv")


def conv_reference(I: np.ndarray, W: np.ndarray) -> np.ndarray:
    size = I.shape[1] - 2
    out = np.zeros((1, size, size, W.shape[3]), np.int32)
    for rh in range(3):
        for rw in range(3):
            window = I[:, rh:rh + size, rw:rw + size, :].astype(np.int32)
            out += np.einsum("nhwc,co->nhwo", window, W[rh, rw].astype(np.int32))
    return out


def kernels(gemm_size: tuple[int, int, int], conv_size: tuple[int, int, int],
            rng: np.random.Generator):
    """(name, function, inputs, output, expected) of the case's GEMM and convolution."""
    m, n, k = gemm_size
    A = rng.integers(-128, 128, (m, k)).astype(np.int8)
    B = rng.integers(-128, 128, (k, n)).astype(np.int8)
    yield "gemm", gemm(m, n, k), {"A": A, "B": B}, "C", A.astype(np.int32) @ B.astype(np.int32)
    size, channels, out_channels = conv_size
    I = rng.integers(-128, 128, (1, size + 2, size + 2, channels)).astype(np.int8)
    W = rng.integers(-128, 128, (3, 3, channels, out_channels)).astype(np.int8)
    yield "conv", conv(size, channels, out_channels), {"I": I, "W": W}, "O", \
        conv_reference(I, W)


# The large arrays (8x32 with four banks, 64x64, 128x128) run in CI's slow pass; the default
# run keeps one machine of each other kind.
@pytest.mark.parametrize(("machine", "gemm_size", "conv_size"), [
    pytest.param(*case, id=case[0].name,
                 marks=[pytest.mark.slow] if case[0].name in ("npu8x32", "npu64x64",
                                                               "npu128x128") else [])
    for case in CASES])
def test_machine_from_yaml_runs_gemm_and_conv_exactly(machine, gemm_size, conv_size, tmp_path):
    path = machine.write(tmp_path)
    config = npu.load_machine(path)
    registry = npu.machine_registry(path)
    assert (config.array.rows, config.array.cols) == (machine.rows, machine.cols)
    gemm_name = f"{machine.name}_gemm"
    rng = np.random.default_rng(machine.rows * 131 + machine.cols)
    for kind, func, inputs, output, expected in kernels(gemm_size, conv_size, rng):
        result = auto_tensorize(func, "npu", registry=registry, config=config)
        assert [b.intrinsic for b in result.blocks if b.intrinsic] == [gemm_name], kind
        validated = host.run(result.func, inputs, lowerer(registry.get))
        np.testing.assert_array_equal(validated[output], expected, err_msg=kind)
        run = npu.run(result.func, inputs, config, lookup=registry.get)
        np.testing.assert_array_equal(run.outputs[output], expected, err_msg=kind)

        program = [i for s in run.stages if s.compiled for i in s.compiled.program]
        gemms = [i for i in program if isinstance(i, Gemm)]
        assert gemms and all(g.k == machine.k and g.rows % machine.i == 0 for g in gemms)
        # The accumulator tiles start at zero the way the family declares.
        fills = any(isinstance(i, Vec) and i.op is VecOp.FILL for i in program)
        resets = any(g.reset for g in gemms)
        assert (fills, resets) == ((True, False) if machine.zero == "fill" else (False, True))
        roofline = run.roofline(config)
        assert 0 < roofline.bound_cycles <= run.cycles
        assert 0 < run.macs <= config.array.rows * config.array.cols * run.cycles


def test_a_gemm_the_array_cannot_execute_is_refused_with_the_reason(tmp_path):
    path = Npu("deep", 8, 8, i=8, k=8).write(tmp_path)
    # The family runs on its own 8x8 array; the run is on an array of 4 rows.
    shallow = npu.load_machine(path).to_dict()
    shallow["array"]["rows"] = 4
    result = auto_tensorize(gemm(16, 8, 16), "npu", registry=npu.machine_registry(path),
                            config=MachineConfig.from_dict(shallow))
    (outcome,) = result.blocks
    assert outcome.intrinsic is None
    assert "requires k = 8 <= the array's 4 rows" in outcome.reason


def test_the_loader_and_the_schedule_refuse_a_family_without_zeroing_for_one_reason(tmp_path):
    path = Npu("nozero", 4, 4, i=4, k=4, zero="fill").write(tmp_path)
    family = npu.machine_registry(path).family("nozero")
    text = path.read_text().replace("    fill: {C: nozero_zero}\n", "")
    path.write_text(text)
    with pytest.raises(IntrinsicSpecError) as info:
        npu.machine_registry(path)
    (finding,) = info.value.findings
    assert "declares neither a resetting variant" in finding.message
    assert finding.loc.line == 1 + text[:text.index("nozero_gemm")].count("\n")
    # The schedule, handed the family without its fill past the loader, says the same.
    unchecked = replace(family, intrinsics=tuple(
        replace(i, fill=frozen_mapping({})) for i in family.intrinsics))
    result = auto_tensorize(gemm(8, 4, 8), "npu", registry=Registry([unchecked]),
                            config=npu.load_machine(path))
    assert result.blocks[0].reason.endswith(finding.message)
