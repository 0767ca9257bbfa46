"""i8mm kernels (SMMLA, USMMLA), which unicorn does not execute, run under qemu-user as a
static executable built here, exact against the host reference; without qemu they are
refused with the reason."""

import struct

import numpy as np
import pytest

from intrinsics import default_registry
from targets import cpu, host
from targets.arm.qemu import build_executable, qemu_binary
from tensorize.engine import auto_tensorize
from tests.targets.arm.conftest import random_inputs, tensorized
from tests.tensorize.engine.suite import suite
from tests.tensorize.schedule.kernels import gemm_int8

I8MM = "+neon,+dotprod,+i8mm"
# Each case starts qemu-user on a static executable: CI runs them in its slow pass.
pytestmark = pytest.mark.slow
needs_qemu = pytest.mark.skipif(qemu_binary() is None, reason="qemu-user "
                                "(qemu-aarch64-static) is not installed: apt-get install "
                                "qemu-user-static")


def _run_exactly(func, tensorized_func, seed: int = 0) -> cpu.CpuRun:
    kernel = cpu.emit(tensorized_func, "arm", I8MM, registry=default_registry())
    inputs = random_inputs(func, seed)
    run = cpu.run(kernel, inputs)
    for name, value in host.run(func, inputs).items():
        np.testing.assert_array_equal(run.outputs[name], value)
    return run


@needs_qemu
@pytest.mark.parametrize(("name", "intrinsic"), [
    ("gemm_int8", "arm_smmla"), ("gemm_u8s8", "arm_usmmla"), ("gemm_int8_odd", "arm_smmla"),
    ("conv2d_nhwc_int8", "arm_smmla"), ("batch_matmul_int8", "arm_smmla")])
def test_i8mm_suite_kernel_runs_under_qemu_exactly(name: str, intrinsic: str, registry) -> None:
    result = tensorized(name, features=I8MM, intrinsic=intrinsic)
    assert [b.intrinsic for b in result.tensorized] == [intrinsic]
    mnemonic = intrinsic.removeprefix("arm_")
    assert f"\t{mnemonic}\t" in cpu.compile(cpu.emit(result.func, "arm", I8MM, registry=registry),
                                            "asm")
    run = _run_exactly(suite()[name], result.func)
    assert run.engine == "qemu-user" and run.instructions is None


@needs_qemu
@pytest.mark.parametrize("shape", [(15, 16, 17), (16, 31, 33), (17, 33, 65), (31, 17, 15)])
def test_smmla_gemm_of_any_size_runs_under_qemu_exactly(shape, registry) -> None:
    func = gemm_int8(*shape)
    result = auto_tensorize(func, "arm", features=I8MM, intrinsic="arm_smmla", registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["arm_smmla"]
    assert _run_exactly(func, result.func, seed=2).engine == "qemu-user"


def test_a_run_that_stops_early_is_an_error_with_what_it_wrote(monkeypatch, registry) -> None:
    # An "emulator" that exits 1 at once: the run fails, never reads zeros as outputs.
    monkeypatch.setattr("targets.arm.qemu.shutil.which", lambda name: "/bin/false")
    kernel = cpu.emit(tensorized("gemm_int8", features=I8MM, intrinsic="arm_smmla").func,
                      "arm", I8MM, registry=registry)
    if cpu.engine_for(kernel)[0] == "qemu-user":
        with pytest.raises(cpu.CpuRunError, match=r"exit status 1; it wrote 0 of \d+ bytes"):
            cpu.run(kernel, random_inputs(suite()["gemm_int8"]))


def test_without_qemu_an_i8mm_kernel_is_refused_with_the_install_hint(monkeypatch,
                                                                      registry) -> None:
    monkeypatch.setattr("targets.arm.qemu.shutil.which", lambda name: None)
    kernel = cpu.emit(tensorized("gemm_u8s8", features=I8MM).func, "arm", I8MM, registry=registry)
    engine, reason = cpu.engine_for(kernel)
    if engine is None:
        assert "qemu-user: qemu-user is not installed" in reason
        assert "apt-get install qemu-user-static" in reason
        with pytest.raises(cpu.CpuRunError, match="qemu-user is not installed"):
            cpu.run(kernel, {})


def test_the_executable_is_a_static_aarch64_elf_holding_the_buffers(registry) -> None:
    kernel = cpu.emit(tensorized("gemm_u8s8", features=I8MM).func, "arm", I8MM, registry=registry)
    arrays = [np.full(b.shape, 7, b.dtype.numpy) for b in kernel.buffers]
    executable, addresses = build_executable(cpu.compile(kernel, "obj"), kernel.symbol,
                                             arrays, kernel.cpu.alignment)
    e_type, e_machine, _, entry = struct.unpack_from("<HHIQ", executable, 16)
    assert executable[:4] == b"\x7fELF" and (e_type, e_machine) == (2, 183)
    assert len(addresses) == len(arrays) + 1
    assert all(a % kernel.cpu.alignment == 0 for a in addresses)
    base = 0x40_0000
    first = addresses[0] - base
    assert executable[first:first + arrays[0].nbytes] == arrays[0].tobytes()
    assert base < entry < addresses[0]
