"""Every refusal of the arm backend: its type and what it says."""

import numpy as np
import pytest

from intrinsics import default_registry
from ir import script as T
from targets import cpu
from targets.arm.elf import load_object
from tensorize.engine.gemm_view import to_intrinsic_shape
from tensorize.engine.generic_schedule import schedule_generic
from tensorize.match import match_block
from tensorize.schedule import Schedule
from tests.targets.arm.conftest import kernel, tensorized
from tests.tensorize.engine.suite import suite


def test_i8mm_intrinsic_requires_the_feature(registry) -> None:
    func = tensorized("gemm_int8", intrinsic="arm_smmla").func
    with pytest.raises(cpu.EmitError, match=r"arm_smmla requires target feature \+i8mm"):
        cpu.emit(func, "arm", registry=registry)


def test_i8mm_kernel_without_qemu_is_refused_with_each_engines_reason(monkeypatch,
                                                                      registry) -> None:
    monkeypatch.setattr("targets.arm.qemu.shutil.which", lambda name: None)
    features = "+neon,+dotprod,+i8mm"
    k = cpu.emit(tensorized("gemm_int8", intrinsic="arm_smmla").func, "arm", features,
                 registry=registry)
    assert "smmla" in cpu.compile(k, "asm")
    engine, reason = cpu.engine_for(k)
    if engine is None:
        assert "unicorn: the emulator (unicorn) does not execute i8mm" in reason
        assert "qemu-user: qemu-user is not installed" in reason
        with pytest.raises(cpu.CpuRunError, match="does not execute i8mm"):
            cpu.run(k, {})


def test_non_contiguous_operand_tile_is_refused(registry) -> None:
    # The generic schedule leaves B's 4x4 tile as rows 64 bytes apart: sdot would read wrong
    # bytes, so the backend refuses it.
    sch = Schedule(suite()["gemm_int8"])
    registry = default_registry()
    intrinsic = registry.get("arm_sdot_lane")
    match = match_block(sch.func, "C", intrinsic, registry)[0]
    to_intrinsic_shape(sch, match)
    schedule_generic(sch, "C", intrinsic)
    with pytest.raises(cpu.EmitError, match="requires 16 contiguous int8 elements"):
        cpu.emit(sch.func, "arm", registry=registry)


def test_register_buffer_indexed_by_a_serial_loop_is_refused(registry) -> None:
    @T.prim_func
    def copy(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
        R = T.alloc_buffer((8,), "int32", scope="arm.neon")
        for i in range(8):
            with T.block("load"):
                vi = T.axis.spatial(8, i)
                R[vi] = A[vi]
        for i in range(8):
            with T.block("store"):
                vi = T.axis.spatial(8, i)
                B[vi] = R[vi]

    with pytest.raises(cpu.EmitError, match="register buffer R is indexed by"):
        cpu.emit(copy, "arm", registry=registry)


def test_non_elf_object_is_refused() -> None:
    with pytest.raises(cpu.CpuRunError, match="little-endian ELF64"):
        load_object(b"\x7fELF\x01\x01", 0x1000)


def test_wrong_input_shape_is_refused() -> None:
    with pytest.raises(cpu.CpuRunError, match=r"input A requires shape \(64, 64\)"):
        cpu.run(kernel("gemm_int8"), {"A": np.zeros((2, 2), np.int8)})


def test_unknown_output_kind_is_refused() -> None:
    with pytest.raises(cpu.EmitError, match="output 'asm' or 'obj'"):
        cpu.compile(kernel("gemm_int8"), "exe")
