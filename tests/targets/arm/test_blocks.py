"""The emulator reports where a kernel's instructions go: how often each basic block ran
(``Emulated.blocks``), which accounts for every instruction and every SDOT it counts."""

from targets.arm.elf import load_object
from targets.arm.unicorn import _dots, emulate
from targets.cpu.machine import compile as compile_kernel
from targets.cpu.run import aligned_zeros
from tests.targets.arm.conftest import kernel, random_inputs
from tests.tensorize.engine.suite import suite


def test_the_blocks_account_for_every_instruction_and_dot_product() -> None:
    built = kernel("gemm_int8")
    inputs = random_inputs(suite()["gemm_int8"])
    arrays = []
    for buffer in built.buffers:
        array = aligned_zeros(buffer.shape, buffer.dtype.numpy, built.cpu.alignment)
        if buffer.name in inputs:
            array[...] = inputs[buffer.name]
        arrays.append(array)
    obj = compile_kernel(built, "obj")
    result = emulate(obj, built.symbol, arrays, built.cpu.alignment)
    assert sum(size // 4 * runs for (_, size), runs in result.blocks.items()) == \
        result.instructions
    image = load_object(obj, 0)
    entry = image.symbols[built.symbol]
    dots = sum(_dots(bytes(image.data[entry + offset:entry + offset + size]))["sdot"] * runs
               for (offset, size), runs in result.blocks.items())
    assert dots == result.counted["sdot"] > 0
    # The k loop is the block run most often (once per iteration of every tile).
    hottest = max(result.blocks, key=result.blocks.get)
    assert _dots(bytes(image.data[entry + hottest[0]:entry + sum(hottest)]))["sdot"] > 0
