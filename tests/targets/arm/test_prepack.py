"""A kernel's constant weights packed once (targets.cpu.prepack): the packing split off runs
once, the per-call kernel on its packed buffer, and together they give numpy's result
exactly, with the per-call kernel executing fewer instructions than the whole; a split that
cannot be made is refused with the reason."""

import numpy as np
import pytest

from ir import Block
from ir.visitor import post_order_visit
from targets import cpu
from tensorize.engine import auto_tensorize
from tests.targets.arm.conftest import random_inputs
from tests.tensorize.schedule.kernels import conv2d_nhwc, gemm_int8


def _block_reads(func, name: str) -> bool:
    """True when some block of ``func`` declares a read of buffer ``name``."""
    found: set[str] = set()

    def visit(node) -> None:
        if isinstance(node, Block):
            found.update(r.buffer.name for r in node.reads)

    post_order_visit(func.body, visit)
    return name in found


# A one-row GEMV, a GEMM whose tiles pad B (17 x 33 x 65: 3 tiles of 12 columns over 33) and
# one that divides them.
@pytest.mark.parametrize("shape", [(1, 64, 128), (17, 33, 65), (16, 32, 64)])
def test_the_packed_weight_and_the_per_call_kernel_give_numpys_product(shape, registry):
    m, n, k = shape
    func = auto_tensorize(gemm_int8(m, n, k), "arm", registry=registry).func
    split = cpu.split_constants(func, ["B"])
    assert [p.name for p in split.pack.params] == ["B", *split.packed]
    assert [p.name for p in split.kernel.params] == ["A", *split.packed, "C"]
    assert not _block_reads(split.kernel, "B")
    inputs = random_inputs(gemm_int8(m, n, k), seed=sum(shape))
    pack = cpu.run(cpu.emit(split.pack, "arm", registry=registry), {"B": inputs["B"]})
    packed = {name: pack.outputs[name] for name in split.packed}
    per_call = cpu.run(cpu.emit(split.kernel, "arm", registry=registry),
                       {"A": inputs["A"], **packed})
    whole = cpu.run(cpu.emit(func, "arm", registry=registry), inputs)
    expected = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32)
    assert np.array_equal(per_call.outputs["C"], expected)
    assert np.array_equal(whole.outputs["C"], expected)
    # The packing left the per-call code: what it saved is what the pack executes, within
    # the few instructions of entry, exit and register allocation.
    assert per_call.instructions < whole.instructions
    saved = whole.instructions - per_call.instructions
    assert abs(saved - pack.instructions) < 0.1 * pack.instructions


@pytest.mark.slow  # a convolution under the emulator: over a second
def test_a_convolutions_weights_pack_once_and_the_result_is_exact(registry):
    func = auto_tensorize(conv2d_nhwc(8, 8, 8, 16), "arm", registry=registry).func
    split = cpu.split_constants(func, ["W"])
    inputs = random_inputs(conv2d_nhwc(8, 8, 8, 16), seed=3)
    pack = cpu.run(cpu.emit(split.pack, "arm", registry=registry), {"W": inputs["W"]})
    packed = {name: pack.outputs[name] for name in split.packed}
    per_call = cpu.run(cpu.emit(split.kernel, "arm", registry=registry),
                       {"I": inputs["I"], **packed})
    whole = cpu.run(cpu.emit(func, "arm", registry=registry), inputs)
    output = func.params[-1].name
    assert not _block_reads(split.kernel, "W")
    assert np.array_equal(per_call.outputs[output], _conv_reference(inputs["I"], inputs["W"]))
    assert np.array_equal(whole.outputs[output], per_call.outputs[output])


def _conv_reference(image: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """3x3, stride 1, zero padding 1, NHWC input and HWIO weights, in int64 numpy."""
    _, h, w, _ = image.shape
    padded = np.pad(image.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((1, h, w, weight.shape[-1]), np.int64)
    for dy in range(3):
        for dx in range(3):
            out += padded[:, dy:dy + h, dx:dx + w, :] @ weight[dy, dx].astype(np.int64)
    return out.astype(np.int32)


def test_a_name_that_is_not_a_parameter_is_refused(registry):
    func = auto_tensorize(gemm_int8(16, 32, 64), "arm", registry=registry).func
    with pytest.raises(cpu.EmitError, match=r"function gemm_int8: split_constants requires "
                       r"parameter names, got W; its parameters are A, B, C"):
        cpu.split_constants(func, ["W"])


def test_a_constant_the_function_writes_is_refused(registry):
    func = auto_tensorize(gemm_int8(16, 32, 64), "arm", registry=registry).func
    with pytest.raises(cpu.EmitError, match=r"requires constants the function only reads, "
                       r"got C, which it writes"):
        cpu.split_constants(func, ["B", "C"])


def test_a_function_with_no_stage_of_the_constants_alone_is_refused():
    # Untensorized, the one loop nest reads A and B together: nothing can run once.
    with pytest.raises(cpu.EmitError, match=r"function gemm_int8: no top-level stage that "
                       r"reads only the constants B .* nothing packs once"):
        cpu.split_constants(gemm_int8(16, 32, 64), ["B"])
