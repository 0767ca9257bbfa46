"""What the arm backend emits: sdot in a register-blocked k loop, packing stages, features."""

import re

import numpy as np

from intrinsics import default_registry, lowerer
from targets import cpu, host
from tensorize.engine import auto_tensorize
from tensorize.engine.cpu_tune import choose_tune_cpu
from tests.targets.arm.conftest import assembly, kernel, tensorized
from tests.targets.cpu.conftest import s8u8_gemm


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
    assert default_registry().cpu("arm").default_features == "+neon,+dotprod"
    assert kernel("gemm_int8").features == "+neon,+dotprod"
    assert tensorized("gemm_int8").tensorized[0].intrinsic == "arm_sdot_lane"


def test_llvm_ir_calls_the_sdot_intrinsic() -> None:
    assert 'call <4 x i32> @"llvm.aarch64.neon.sdot.v4i32.v16i8"' in kernel("gemm_int8").llvm_ir


def test_k_loop_is_sdot_by_element_with_accumulators_in_registers() -> None:
    loop = _k_loop(assembly("gemm_int8"))
    dots = [i for i in loop if i.startswith("sdot")]
    # An 8 x 8 register tile: 16 accumulators, each updated once per k step; four k steps
    # per iteration.
    assert len(dots) == 4 * 16
    assert len({i.split(",")[0] for i in dots}) == 16
    assert all(re.search(r"\.4b\[[0-3]\]$", i) for i in dots)
    # Register blocking: the accumulators are never loaded or stored inside the k loop, and
    # the only memory traffic is the packed A and B tiles of the four steps (128 bytes
    # each), each two four-register loads (ld1x4) that advance their pointer by a register
    # (targets/cpu/chains.py): no add, 70 instructions for 64 sdot.
    memory = [i for i in loop if re.match(r"^(ld|st)", i)]
    assert len(memory) == 4 and all(
        re.match(r"ld1\t\{ v\d+\.16b, v\d+\.16b, v\d+\.16b, v\d+\.16b \}, \[x\d+\], x\d+$", i)
        for i in memory), memory
    assert len(loop) == 70, loop
    accumulators = {i.split()[1].rstrip(",") for i in dots}
    assert len(accumulators) == 16


def test_kernel_buffers_include_the_packing_stages() -> None:
    names = [b.name for b in kernel("gemm_int8").buffers]
    assert names[:3] == ["A", "B", "C"]
    assert {"A_reindex", "B_reindex"} <= set(names)
    assert not any(b.scope == "arm.neon" for b in kernel("gemm_int8").buffers)


def test_object_is_elf_for_aarch64() -> None:
    obj = cpu.compile(kernel("conv1x1_int8"), "obj")
    assert obj[:4] == b"\x7fELF"
    assert int.from_bytes(obj[18:20], "little") == 183  # EM_AARCH64


def test_turning_i8mm_on_picks_the_matrix_multiply_where_it_costs_less() -> None:
    # By the shared count (tile_cost): a 4 x 4 tile of SMMLA does 512 MACs a k step in 24
    # instructions, an 8 x 2 tile of SDOT 256 in 20; the packing costs about the same.
    with_i8mm = tensorized("gemm_int8", "+neon,+dotprod,+i8mm")
    assert [b.intrinsic for b in with_i8mm.tensorized] == ["arm_smmla"]
    # Where only i8mm fits (u8 x s8), it is used.
    mixed = tensorized("gemm_u8s8", "+neon,+dotprod,+i8mm")
    assert [b.intrinsic for b in mixed.tensorized] == ["arm_usmmla"]


def test_the_matrix_multiply_is_register_blocked(registry) -> None:
    smmla = tensorized("gemm_int8", "+neon,+dotprod,+i8mm", "arm_smmla")
    # The kernel the runner runs: tuned for the scheduling model that executes it in the
    # fewest instructions (with generic, LLVM hoists the loads and spills accumulators).
    tuned, _ = choose_tune_cpu(smmla.func, "arm", "+neon,+dotprod,+i8mm", registry=registry)
    asm = cpu.compile(tuned, "asm")
    calls = [line.split() for line in asm.splitlines() if line.startswith("\tsmmla\t")]
    # A 4 x 4 tile of 2 x 2 accumulators (8 rows by 8 columns): 16 registers accumulate,
    # the k loop's body (unrolled by LLVM here) whole tiles of 16.
    assert len({ops[1] for ops in calls}) == 16
    assert len(calls) % 16 == 0


def test_s8u8_swaps_the_operands_onto_usmmla(registry) -> None:
    func = s8u8_gemm(16, 24, 32)
    result = auto_tensorize(func, "arm", features="+neon,+dotprod,+i8mm", registry=registry)
    (outcome,) = result.tensorized
    assert outcome.intrinsic == "arm_usmmla" and "A=B B=A" in outcome.mapping
    rng = np.random.default_rng(0)
    inputs = {"A": rng.integers(-128, 128, (16, 32), dtype=np.int8),
              "B": rng.integers(0, 256, (32, 24), dtype=np.uint8)}
    got = host.run(result.func, inputs, lowerer(default_registry().get))["C"]
    np.testing.assert_array_equal(got, inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32))
    assert "usmmla" in cpu.compile(cpu.emit(result.func, "arm", "+neon,+dotprod,+i8mm",
                                            registry=registry), "asm")
