"""A grouped NHWC convolution, the groups folded into the channels: its input is indexed by
the output channel (``o // 16 * 16 + rc``), the register tile's row, so the input's register
stage holds one panel a row. Those panels are loaded a k step at a time (one row's steps are
not one run an ld1x4 can fill), and the kernel runs exactly under the emulator (issue 22,
item 11)."""

import numpy as np
import pytest

from ir import script as T
from targets import cpu
from tensorize.engine import auto_tensorize, count_calls, cpu_schedule
from tensorize.engine.count import count_calls_by_block
from tests.targets.arm.conftest import random_inputs


@T.prim_func
def grouped(I: T.Buffer((1, 18, 18, 64), "int8"), W: T.Buffer((3, 3, 16, 64), "int8"),
            O: T.Buffer((1, 16, 16, 64), "int32")):
    for n, h, w, co, rh, rw, rc in T.grid(1, 16, 16, 64, 3, 3, 16):
        with T.block("conv"):
            vn, vh, vw, vco, vrh, vrw, vrc = T.axis.remap("SSSSRRR", [n, h, w, co, rh, rw, rc])
            with T.init():
                O[vn, vh, vw, vco] = 0
            O[vn, vh, vw, vco] += (T.cast(I[vn, vh + vrh, vw + vrw, vco // 16 * 16 + vrc],
                                          "int32") * T.cast(W[vrh, vrw, vrc, vco], "int32"))


def _reference(I: np.ndarray, W: np.ndarray) -> np.ndarray:
    out = np.zeros((1, 16, 16, 64), np.int64)
    for g in range(4):
        channels = slice(16 * g, 16 * g + 16)
        for rh in range(3):
            for rw in range(3):
                window = I[:, rh:rh + 16, rw:rw + 16, channels].astype(np.int64)
                out[..., channels] += np.einsum("nhwc,co->nhwo", window,
                                                W[rh, rw, :, channels].astype(np.int64))
    return out.astype(np.int32)


def _input_loads(func) -> dict[str, int]:
    return {name: n for (block, name), n in count_calls_by_block(func).items()
            if block.startswith("I_") and block.endswith("_arm_neon_o")}


def test_the_input_panel_of_each_row_is_loaded_a_step_at_a_time(registry) -> None:
    result = auto_tensorize(grouped, "arm", registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["arm_sdot_lane"]
    # One 4 x 4 panel a call: the row's panel is not shared, so nothing loads two steps.
    calls = count_calls(result.func)
    assert _input_loads(result.func) == {"arm_ld1_4x4_s8": calls["arm_sdot_lane"]}


@pytest.mark.slow
def test_the_grouped_convolution_runs_exactly_under_the_emulator(registry) -> None:
    inputs = random_inputs(grouped)
    run = cpu.run(cpu.emit(auto_tensorize(grouped, "arm", registry=registry).func, "arm",
                           registry=registry), inputs)
    np.testing.assert_array_equal(run.outputs["O"], _reference(inputs["I"], inputs["W"]))


@pytest.mark.slow  # in CI's slow pass, for the default run's time
def test_a_load_whose_tile_is_not_one_run_is_refused_and_the_next_taken(
        monkeypatch: pytest.MonkeyPatch, registry) -> None:
    # As the engine once did: every stage taken for one panel, so the k steps are grouped
    # and ld1x4 offered for the input's per-row stage, where its 2 x 8 x 4 tile is a row's
    # panels apart. The schedule refuses it (not the code generator) and loads 4 x 4 tiles.
    monkeypatch.setattr(cpu_schedule, "_stage_dims",
                        lambda sch, block, packed, factors, k: dict.fromkeys(packed, 1))
    result = auto_tensorize(grouped, "arm", registry=registry)
    assert set(_input_loads(result.func)) == {"arm_ld1_4x4_s8"}
    inputs = random_inputs(grouped, seed=1)
    run = cpu.run(cpu.emit(result.func, "arm", registry=registry), inputs)
    np.testing.assert_array_equal(run.outputs["O"], _reference(inputs["I"], inputs["W"]))
