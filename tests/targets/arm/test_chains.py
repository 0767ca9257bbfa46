"""The k loop's four-register loads chained through one pointer per buffer
(targets/cpu/chains.py): every load advances its pointer by a register, and the kernels stay
exact whatever number of k steps an iteration runs (4, or 2 where 4 does not divide k)."""

import re

import numpy as np
import pytest

from targets import cpu
from tensorize.engine import auto_tensorize
from tests.targets.arm.test_emit import _k_loop
from tests.tensorize.schedule.kernels import gemm_int8

_POST_INDEXED = re.compile(r"ld1\t\{ v\d+\.16b, v\d+\.16b, v\d+\.16b, v\d+\.16b \}, "
                           r"\[x\d+\], x\d+$")


# k 136: 34 steps of 4, two an iteration; k 128: 32 steps, four an iteration (fewer
# iterations, and LLVM unrolls the loop whole).
@pytest.mark.parametrize(("k", "steps"), [(136, 2), (128, 4)])
def test_each_load_advances_its_pointer_and_the_gemm_is_exact(k: int, steps: int, registry) -> None:
    func = gemm_int8(16, 16, k)
    kernel = cpu.emit(auto_tensorize(func, "arm", registry=registry).func, "arm", registry=registry)
    loop = _k_loop(cpu.compile(kernel, "asm"))
    assert sum(i.startswith("sdot") for i in loop) == 16 * steps
    loads = [i for i in loop if re.match(r"^(ld|st)", i)]
    # Two steps of A and of B a load; no add or mov moves a pointer.
    assert len(loads) == steps and all(_POST_INDEXED.match(i) for i in loads), loads
    assert not any(i.startswith(("add", "mov")) for i in loop), loop
    rng = np.random.default_rng(k)
    a = rng.integers(-128, 128, (16, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, 16), dtype=np.int8)
    result = cpu.run(kernel, {"A": a, "B": b})
    np.testing.assert_array_equal(result.outputs["C"],
                                  a.astype(np.int32) @ b.astype(np.int32))
