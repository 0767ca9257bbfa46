"""What the CPU code generator emits from a target's description: template alignment proven
or refused, rows of A broadcast from memory, buffers laid out aligned, the description's
strings escaped in the IR text."""

import dataclasses
import re

import numpy as np
import pytest
from llvmlite import ir as ll

from intrinsics import Registry, default_registry
from ir import script as T
from targets import cpu
from targets.cpu import templates
from targets.cpu.run import aligned_zeros
from tensorize.schedule import Schedule
from tests.targets.arm.conftest import kernel as arm_kernel
from tests.targets.cpu.conftest import kernel


def _zero_and_store(offset: int):
    """Zero 16 int32 lanes of a ZMM register and store them at ``A[offset:offset + 16]``,
    both through x86 intrinsics."""

    @T.prim_func
    def store(A: T.Buffer((48,), "int32")):
        R = T.alloc_buffer((16,), "int32", scope="x86.zmm")
        for i in range(16):
            with T.block("zero"):
                vi = T.axis.spatial(16, i)
                R[vi] = 0
        for i in range(16):
            with T.block("store"):
                vi = T.axis.spatial(16, i)
                A[vi + offset] = R[vi]

    sch = Schedule(store, default_registry())
    sch.tensorize(sch.get_loops(sch.get_block("zero"))[0], "x86_zero_16_s32")
    sch.tensorize(sch.get_loops(sch.get_block("store"))[0], "x86_store_16_s32")
    return sch.func


def test_an_aligned_store_is_emitted_with_the_templates_alignment(registry) -> None:
    stores = [line for line in cpu.emit(_zero_and_store(16), "x86",
                                        registry=registry).llvm_ir.splitlines()
              if "store <16 x i32>" in line]
    assert len(stores) == 1 and stores[0].endswith("align 64")


def test_a_store_the_address_of_which_is_not_aligned_is_refused(registry) -> None:
    with pytest.raises(cpu.EmitError, match=r"operand dst of x86_store_16_s32 requires an "
                       r"address aligned to 64 bytes \(its template's 'align 64'\), got one "
                       r"aligned to 16"):
        cpu.emit(_zero_and_store(4), "x86", registry=registry)


def test_a_row_of_a_is_one_word_broadcast_to_every_lane() -> None:
    ir_text = kernel("gemm_u8s8").llvm_ir
    assert "load i32, ptr" in ir_text
    assert "shufflevector <16 x i32>" in ir_text
    assert 'call <16 x i32> @"llvm.x86.avx512.vpdpbusd.512"' in ir_text


def test_the_runner_aligns_every_buffer() -> None:
    for shape in ((3, 5), (1,), (7, 9, 11)):
        array = aligned_zeros(shape, np.int8, 64)
        assert array.shape == shape and array.ctypes.data % 64 == 0 and not array.any()


def test_an_unknown_target_is_refused_naming_the_cpu_targets(registry) -> None:
    with pytest.raises(Exception, match="target 'npu' requires a family with a 'cpu:' "
                                        "section to be a CPU target; the CPU targets are "
                                        "arm, x86"):
        cpu.emit(_zero_and_store(16), "npu", registry=registry)


def test_a_multi_register_load_template_returns_the_struct_of_its_registers() -> None:
    parsed = templates.parse(
        "ld", "{dst} = call [4 x <16 x i8>] @llvm.aarch64.neon.ld1x4.v16i8.p0(ptr {src})")
    assert (parsed.kind, parsed.result, parsed.registers) == ("call", "dst", 4)
    assert parsed.result_type == ll.LiteralStructType([ll.VectorType(ll.IntType(8), 16)] * 4)
    assert parsed.args == ((ll.PointerType(), "src"),)


def test_the_gemm_loads_four_k_steps_of_a_and_b_with_two_ld1x4_each() -> None:
    # The arm family's ld1x4 fills two of the 8 x 8 tile's four k steps of A and of B (64
    # bytes each) in one instruction (tests/targets/arm/test_run.py runs this kernel
    # exactly), each buffer's loads chained through one pointer (targets/cpu/chains.py).
    ir = arm_kernel("gemm_int8").llvm_ir
    assert ir.count('call {<16 x i8>, <16 x i8>, <16 x i8>, <16 x i8>} '
                    '@"llvm.aarch64.neon.ld1x4.v16i8.p0"') == 4
    assert sorted(re.findall(r'%"(\w+)\.chain" = phi', ir)) == ["A_reindex", "B_reindex"]


def _with_cpu(**fields: str) -> Registry:
    """The default registry with the x86 description's cpu fields replaced, as Python code
    (not a description file, whose check would refuse them) could build it."""
    families = []
    for family in default_registry().families:
        if family.target == "x86" and family.cpu is not None:
            family = dataclasses.replace(family, cpu=dataclasses.replace(family.cpu, **fields))
        families.append(family)
    return Registry(families)


def test_a_triple_with_a_quote_and_a_line_break_stays_inside_its_ir_string() -> None:
    triple = 'x86_64-unknown-linux-gnu"\n!llvm.ident = !{!0}'
    kernel_ir = cpu.emit(_zero_and_store(16), "x86", registry=_with_cpu(triple=triple)).llvm_ir
    assert 'target triple = "x86_64-unknown-linux-gnu\\22\\0A!llvm.ident = !{!0}"' in kernel_ir
    assert "\n!llvm.ident" not in kernel_ir


def test_a_tune_cpu_with_a_quote_stays_inside_its_ir_string() -> None:
    tune = 'znver4" "target-features"="+amx-tile'
    registry = _with_cpu(tune_cpus=("x86-64", tune))
    kernel_ir = cpu.emit(_zero_and_store(16), "x86", registry=registry, tune_cpu=tune).llvm_ir
    assert '"tune-cpu"="znver4\\22 \\22target-features\\22=\\22+amx-tile"' in kernel_ir
