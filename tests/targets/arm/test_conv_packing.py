"""A convolution's im2col view is packed in two stages: the view as a plain copy (its rows
the fused output pixels), then a copy indexed by the block's own iterators that takes the
tiled layout, so every packing stage is walked in whole tiles. Run exactly under the
emulator, and under qemu-user with SMMLA."""

import numpy as np
import pytest

from intrinsics import default_registry
from targets import cpu, host
from targets.arm.qemu import qemu_binary
from tensorize.engine import auto_tensorize
from tests.targets.arm.conftest import random_inputs
from tests.tensorize.engine.suite import suite

I8MM = "+neon,+dotprod,+i8mm"


def _stages(func) -> dict[str, tuple[int, ...]]:
    return {b.name: b.shape for b in cpu.emit(func, "arm", I8MM,
                                              registry=default_registry()).buffers}


@pytest.mark.parametrize("intrinsic", ["arm_sdot_lane", "arm_smmla"])
def test_the_im2col_view_stays_plain_and_a_second_copy_is_tiled(intrinsic, registry) -> None:
    func = suite()["conv2d_nhwc_int8"]
    result = auto_tensorize(func, "arm", features=I8MM, intrinsic=intrinsic, registry=registry)
    stages = _stages(result.func)
    # 2 x 8 x 8 output pixels by a 3 x 3 x 16 window: the view is their 128 x 144 matrix.
    assert stages["pad_reindex"] == (128, 144)
    assert len(stages["pad_reindex_reindex"]) == 4


def test_the_convolution_runs_exactly_under_the_emulator(registry) -> None:
    func = suite()["conv2d_nhwc_int8"]
    inputs = random_inputs(func)
    run = cpu.run(cpu.emit(auto_tensorize(func, "arm", registry=registry).func, "arm",
                           registry=registry), inputs)
    for name, expected in host.run(func, inputs).items():
        np.testing.assert_array_equal(run.outputs[name], expected)


@pytest.mark.skipif(qemu_binary() is None, reason="qemu-user (qemu-aarch64-static) is not "
                    "installed: apt-get install qemu-user-static")
def test_the_smmla_convolution_runs_exactly_under_qemu(registry) -> None:
    func = suite()["conv2d_nhwc_int8"]
    chosen = auto_tensorize(func, "arm", features=I8MM, registry=registry)
    assert [b.intrinsic for b in chosen.tensorized] == ["arm_smmla"]
    inputs = random_inputs(func, seed=2)
    run = cpu.run(cpu.emit(chosen.func, "arm", I8MM, registry=registry), inputs)
    for name, expected in host.run(func, inputs).items():
        np.testing.assert_array_equal(run.outputs[name], expected)
