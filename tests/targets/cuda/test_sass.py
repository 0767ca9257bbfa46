"""targets.cuda.sass: whether the first MMA after each barrier of the k loop waits for an
LDSM issued after the barrier, read from hand-written SASS (independent of nvcc), and on
the compiled sm_80 GEMMs (slow)."""

from __future__ import annotations

import pytest

from intrinsics import default_registry
from targets import cuda
from targets.cuda.compile import cuobjdump_path, sass_drains
from targets.cuda.sass import BarrierDrains, barrier_drains
from tensorize.engine import auto_tensorize
from tests.targets.cuda.helpers import sized


def _sass(*lines: str) -> str:
    """``lines`` as cuobjdump prints a function's instructions, 16 bytes apart from 0."""
    return "\n".join(f"        /*{16 * n:04x}*/                   {line} ;"
                     for n, line in enumerate(lines))


# The simple form: the barrier, the prefetch's copies, then this step's fragment loads,
# which the first HMMA reads (A in R132..R135, B in R136..R137).
DRAINS = _sass(
    "DEPBAR.LE SB0, 0x2",
    "BAR.SYNC.DEFER_BLOCKING 0x0",
    "LDGSTS.E.BYPASS.128 [R229], [R226.64]",
    "LDSM.16.M88.4 R132, [R212]",
    "LDSM.16.MT88.2 R136, [R200]",
    "HMMA.16816.F32 R80, R132, R136, R80",
    "HMMA.16816.F32 R84, R132, R138, R84",
    "@P0 BRA 0x0",
    "EXIT")
# Double-buffered: the first HMMAs after the barrier read fragments loaded before it; the
# loads after it fill the other copy (R140.., R148..), read by no HMMA until the back edge.
NO_DRAIN = _sass(
    "LDSM.16.M88.4 R156, [R210]",
    "LDSM.16.MT88.2 R142, [R196]",
    "DEPBAR.LE SB0, 0x2",
    "BAR.SYNC.DEFER_BLOCKING 0x0",
    "LDSM.16.M88.4 R144, [R212+0x2800]",
    "HMMA.16816.F32 R84, R156, R142, R84",
    "LDSM.16.MT88.2 R148, [R200+0xe000]",
    "HMMA.16816.F32 R88, R144, R148, R88",
    "@P0 BRA 0x0",
    "EXIT")


def test_a_first_mma_reading_a_fragment_loaded_after_the_barrier_drains():
    assert barrier_drains("k", DRAINS) == BarrierDrains("k", 1, (0x10,))
    assert barrier_drains("k", DRAINS).describe() == (
        "drains at 1 of 1 barrier(s) (its first MMA waits for an LDSM issued after BAR.SYNC)")


def test_a_first_mma_reading_fragments_loaded_before_the_barrier_does_not():
    # Only the first MMA after the barrier counts: the second one here waits on R144.
    drains = barrier_drains("k", NO_DRAIN)
    assert drains == BarrierDrains("k", 1, ())
    assert not drains.drains and drains.describe() == "no drain at its 1 barrier(s)"


@pytest.mark.parametrize(("mma", "drains"), [
    # HMMA.16816's A is 4 registers: R140 covers the LDSM.2's R142.
    ("HMMA.16816.F32 R80, R140, R100, R80", True),
    # Its B is 2: R140..R141 misses R142..R143.
    ("HMMA.16816.F32 R80, R100, R140, R80", False),
    # An m16n8k32 8-bit IMMA's B is 2 registers too, an m16n8k16 one's A 2 and B 1.
    ("IMMA.16832.S8.S8 R80, R100.ROW, R141.COL, R80", True),
    ("IMMA.16816.S8.S8 R80, R140.ROW, R100.COL, R80", False),
    ("IMMA.16816.S8.S8 R80, R100.ROW, R141.COL, R80", False),
])
def test_operands_are_as_wide_as_their_shape_and_type(mma, drains):
    text = _sass("BAR.SYNC.DEFER_BLOCKING 0x0", "LDSM.16.MT88.2 R142, [R196]", mma,
                 "@P0 BRA 0x0", "EXIT")
    assert barrier_drains("k", text).drains is drains


def test_the_walk_goes_round_the_back_edge_and_stops_at_the_next_barrier():
    # The barrier ends the loop: its first MMA is the loop's first instruction, reading the
    # LDSM after the barrier.
    wrapped = _sass("HMMA.16816.F32 R80, R132, R100, R80", "IADD3 R1, R1, 0x1, RZ",
                    "BAR.SYNC.DEFER_BLOCKING 0x0", "LDSM.16.M88.4 R132, [R212]",
                    "@P0 BRA 0x0", "EXIT")
    assert barrier_drains("k", wrapped).drained == (0x20,)
    # Between two barriers with no MMA, nothing waits.
    idle = _sass("BAR.SYNC.DEFER_BLOCKING 0x0", "LDSM.16.M88.4 R132, [R212]",
                 "BAR.SYNC.DEFER_BLOCKING 0x0", "HMMA.16816.F32 R80, R100, R104, R80",
                 "@P0 BRA 0x0", "EXIT")
    assert barrier_drains("k", idle) == BarrierDrains("k", 2, ())


def test_barriers_outside_the_k_loop_are_not_counted():
    # The loop is 0x40-0x70: the head's barrier, loads and MMA before it are not counted.
    text = _sass("BAR.SYNC.DEFER_BLOCKING 0x0", "LDSM.16.M88.4 R132, [R212]",
                 "HMMA.16816.F32 R80, R132, R100, R80", "NOP",
                 "HMMA.16816.F32 R80, R100, R104, R80", "BAR.SYNC.DEFER_BLOCKING 0x0",
                 "LDSM.16.M88.4 R132, [R212]", "@P0 BRA 0x40", "EXIT")
    assert barrier_drains("k", text) == BarrierDrains("k", 1, ())


def _gemm(name: str, intrinsic: str, double_fragments: bool) -> cuda.CudaKernel:
    """GEMM ``name`` at 4096^3 through ``intrinsic`` in the engine's tiling, 4 stages (a
    k loop of many steps, which nvcc keeps a loop)."""
    func = auto_tensorize(sized(name, m=4096, n=4096, k=4096), "cuda", intrinsic=intrinsic,
                          registry=default_registry()).func
    return cuda.emit(func, default_registry(), stages=4, double_fragments=double_fragments)


@pytest.mark.slow
@pytest.mark.skipif(cuda.nvcc_path() is None or cuobjdump_path() is None,
                    reason="nvcc and cuobjdump (the CUDA toolkit, or the sass extra) needed")
@pytest.mark.parametrize(("name", "intrinsic"), [("gemm_fp16", "mma_m16n8k16_f16f16_f32"),
                                                 ("gemm_int8", "mma_m16n8k32_s8s8_s32")])
def test_the_sm_80_k_loop_does_not_drain_at_its_barriers(name, intrinsic):
    for double_fragments in (True, False):
        kernel = _gemm(name, intrinsic, double_fragments)
        (launch,) = [l for l in kernel.launches if l.tensorized]
        (drains,) = [d for d in sass_drains(kernel, "sm_80") if d.kernel == launch.kernel]
        # The loop is unrolled by its 4 stages: one barrier per step.
        assert drains.barriers == 4
        # Double-buffered, no first MMA waits on a fragment load after the barrier; the
        # simple form drains at every one.
        assert len(drains.drained) == (0 if double_fragments else 4)
