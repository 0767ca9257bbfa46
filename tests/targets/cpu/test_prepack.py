"""The weights packed once on x86 (targets.cpu.prepack is target-independent): the packing
split off runs natively (where this host can), the per-call kernel on its packed buffer,
exact against numpy."""

import numpy as np

from targets import cpu
from tensorize.engine import auto_tensorize
from tests.targets.cpu.conftest import gemm_inputs, run_here, u8s8_gemm


def test_the_packed_weight_and_the_per_call_kernel_give_numpys_product(registry):
    func = auto_tensorize(u8s8_gemm(4, 32, 64), "x86", registry=registry).func
    split = cpu.split_constants(func, ["B"])
    assert "B" not in [p.name for p in split.kernel.params]
    inputs = gemm_inputs(4, 32, 64)
    pack = run_here(cpu.emit(split.pack, "x86", registry=registry), {"B": inputs["B"]})
    packed = {name: pack.outputs[name] for name in split.packed}
    call = run_here(cpu.emit(split.kernel, "x86", registry=registry),
                    {"A": inputs["A"], **packed})
    expected = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32)
    np.testing.assert_array_equal(call.outputs["C"], expected)
