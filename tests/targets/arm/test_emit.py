"""What the arm backend emits: sdot in a register-blocked k loop, packing stages, features."""

import re

from targets import arm
from tests.targets.arm.conftest import assembly, kernel, tensorized


def _k_loop(asm: str) -> list[str]:
    """The instructions of the basic block holding sdot (the k loop's body, from its label
    to its backward branch)."""
    lines = [l.strip() for l in asm.splitlines()]
    blocks, current = [], []
    for line in lines:
        if re.match(r"^\.LBB\d+_\d+:", line):
            blocks.append(current)
            current = []
        elif line and not line.startswith((".", "//", "@")):
            current.append(line)
            if line.startswith(("b.", "b\t", "cbz", "cbnz", "tbz", "tbnz")):
                blocks.append(current)
                current = []
    blocks.append(current)
    return next(b for b in blocks if any(i.startswith("sdot") for i in b))


def test_default_features_are_neon_and_dotprod() -> None:
    assert arm.DEFAULT_FEATURES == "+neon,+dotprod"
    assert tensorized("gemm_int8").tensorized[0].intrinsic == "arm_sdot_lane"


def test_llvm_ir_calls_the_sdot_intrinsic() -> None:
    assert 'call <4 x i32> @"llvm.aarch64.neon.sdot.v4i32.v16i8"' in kernel("gemm_int8").llvm_ir


def test_k_loop_is_sdot_by_element_with_accumulators_in_registers() -> None:
    loop = _k_loop(assembly("gemm_int8"))
    dots = [i for i in loop if i.startswith("sdot")]
    # An 8 x 8 register tile: 16 accumulators, each updated once per k step; two k steps
    # per iteration.
    assert len(dots) == 2 * 16
    assert len({i.split(",")[0] for i in dots}) == 16
    assert all(re.search(r"\.4b\[[0-3]\]$", i) for i in dots)
    # Register blocking: the accumulators are never loaded or stored inside the k loop, and
    # the only memory traffic is the packed A and B tiles (32 bytes each per k step).
    memory = [i for i in loop if re.match(r"^(ld|st)", i)]
    assert all(i.startswith("ldp\tq") or i.startswith("ldr\tq") for i in memory), memory
    assert not any(i.startswith("st") for i in loop)
    accumulators = {i.split()[1].rstrip(",") for i in dots}
    assert len(accumulators) == 16


def test_kernel_buffers_include_the_packing_stages() -> None:
    names = [b.name for b in kernel("gemm_int8").buffers]
    assert names[:3] == ["A", "B", "C"]
    assert {"A_reindex", "B_reindex"} <= set(names)
    assert not any(b.scope == "arm.neon" for b in kernel("gemm_int8").buffers)


def test_object_is_elf_for_aarch64() -> None:
    obj = arm.compile(kernel("conv1x1_int8"), "obj")
    assert obj[:4] == b"\x7fELF"
    assert int.from_bytes(obj[18:20], "little") == 183  # EM_AARCH64
