"""Kernels whose names generated code cannot hold as they are, run exactly on every backend.

The names (kernel, buffers, block, iterators): C++ keywords (``asm``, ``int``, ``register``,
``new``, a block ``class``), CUDA's built-ins (``threadIdx``, ``blockIdx``), macros of the
headers (``NULL``, ``INT_MAX``, ``EOF``), a type the kernels use (``half``), names that clash
once sanitised (``a b`` and ``a_b``), names the emitters introduce (``tz_tid``, ``status``,
``entry``) and non-ASCII names (``größe``, ``Ärger``). Each kernel is tensorized for and run
on the host, the NPU, arm and x86 (where an engine here runs them) and CUDA (the emulation
with g++; nvcc compiles it), against numpy exactly. The generated code holds the mangled
identifiers (:mod:`targets.identifiers`), all ASCII; results and reports keep the user's
names.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

import numpy as np
import pytest

from intrinsics import default_registry
import ir
from ir import script as T
from ir import te
from targets import cpu, cuda, host, npu
from targets.cuda.cexpr import string_literal
from targets.identifiers import mangle
from tensorize.engine import auto_tensorize

SIZE = 32
SCRIPT = '''
@T.prim_func
def {func}({a}: T.Buffer(({n}, {n}), "{a_dtype}"), {b}: T.Buffer(({n}, {n}), "int8"),
        {c}: T.Buffer(({n}, {n}), "int32")):
    for {i}, {j}, {k} in T.grid({n}, {n}, {n}):
        with T.block("{block}"):
            vi, vj, vk = T.axis.remap("SSR", [{i}, {j}, {k}])
            with T.init():
                {c}[vi, vj] = 0
            {c}[vi, vj] += T.cast({a}[vi, vk], "int32") * T.cast({b}[vk, vj], "int32")
'''


def _script(**names: str) -> Callable[[str], ir.PrimFunc]:
    def build(a_dtype: str) -> ir.PrimFunc:
        func = T.parse(SCRIPT.format(n=SIZE, a_dtype=a_dtype, **names))
        assert isinstance(func, ir.PrimFunc)
        return func
    return build


def _te(func: str, a: str, b: str, c: str, k: str) -> Callable[[str], ir.PrimFunc]:
    def build(a_dtype: str) -> ir.PrimFunc:
        A = te.placeholder((SIZE, SIZE), a_dtype, a)
        B = te.placeholder((SIZE, SIZE), "int8", b)
        rk = te.reduce_axis(SIZE, k)
        C = te.compute((SIZE, SIZE), lambda i, j: te.sum(
            ir.cast("int32", A[i, rk]) * ir.cast("int32", B[rk, j]), axis=rk), c)
        return te.create_prim_func([A, B, C], func)
    return build


KERNELS = {
    "keywords": _script(func="asm", a="asm", b="int", c="threadIdx", i="blockIdx", j="new",
                        k="register", block="class"),
    "unicode": _script(func="größe", a="größe", b="B", c="Ärger", i="i", j="jö", k="k",
                       block="Ç"),
    "clashes": _te(func="entry", a="a b", b="a_b", c="tz_tid", k="status"),
    "macros": _te(func="EOF", a="NULL", b="half", c="INT_MAX", k="stdin"),
}


def _case(name: str, a_dtype: str = "int8") -> tuple[ir.PrimFunc, dict, str, np.ndarray]:
    """The kernel, inputs by the user's names, its output's name and the exact product."""
    func = KERNELS[name](a_dtype)
    a_param, b_param, c_param = func.params
    rng = np.random.default_rng(7)
    low = 0 if a_dtype == "uint8" else -128
    a = rng.integers(low, low + 256, (SIZE, SIZE)).astype(a_dtype)
    b = rng.integers(-128, 128, (SIZE, SIZE)).astype(np.int8)
    expected = a.astype(np.int32) @ b.astype(np.int32)
    return func, {a_param.name: a, b_param.name: b}, c_param.name, expected


def _tensorized(func: ir.PrimFunc, target: str, config=None) -> ir.PrimFunc:
    """``func`` tensorized for ``target`` (``config``: the machine, for the NPU)."""
    result = auto_tensorize(func, target, registry=default_registry(), config=config)
    assert result.tensorized, f"nothing tensorized for {target}"
    return result.func


def _user_names(func: ir.PrimFunc) -> list[str]:
    """The names a user gave that are not identifiers as they are."""
    names = [func.name, *(p.name for p in func.params)]
    return [n for n in names if mangle(n) != n]


@pytest.mark.parametrize("name", KERNELS)
def test_host(name):
    func, inputs, output, expected = _case(name)
    assert _user_names(func)
    text = host.emit_llvm(func)
    assert text.isascii()
    assert f"@\"tensorize_{mangle(func.name)}\"" in text
    np.testing.assert_array_equal(host.run(func, inputs)[output], expected)


@pytest.mark.parametrize("name", KERNELS)
def test_npu(name, registry, machine):
    func, inputs, output, expected = _case(name)
    run = npu.run(_tensorized(func, "npu", machine), inputs, machine, lookup=registry.get)
    np.testing.assert_array_equal(run.outputs[output], expected)
    for stage in run.stages:
        if stage.compiled is not None:
            assembly = stage.compiled.assembly
            assert assembly.isascii()
            assert not any(n in assembly for n in _user_names(func) if len(n) > 2)


def _cpu(name: str, target: str, a_dtype: str) -> None:
    func, inputs, output, expected = _case(name, a_dtype)
    kernel = cpu.emit(_tensorized(func, target), target, registry=default_registry())
    assert kernel.symbol == f"tensorize_{mangle(func.name)}"
    assert kernel.llvm_ir.splitlines()[0] == f'; ModuleID = "{mangle(func.name)}"'
    for param in func.params:
        assert f'ptr noalias %"{mangle(param.name)}"' in kernel.llvm_ir
    engine, why = cpu.engine_for(kernel)
    if engine is None:
        pytest.skip(why)
    np.testing.assert_array_equal(cpu.run(kernel, inputs).outputs[output], expected)


@pytest.mark.parametrize("name", KERNELS)
def test_arm(name):
    _cpu(name, "arm", "int8")


@pytest.mark.parametrize("name", KERNELS)
def test_x86(name):
    # VPDPBUSD multiplies unsigned by signed bytes.
    _cpu(name, "x86", "uint8")


def test_arm_llvm_ir_is_ascii(registry):
    func = _case("unicode")[0]
    assert cpu.emit(_tensorized(func, "arm"), "arm", registry=registry).llvm_ir.isascii()


def test_x86_llvm_ir_is_ascii(registry):
    func = _case("unicode", "uint8")[0]
    assert cpu.emit(_tensorized(func, "x86"), "x86", registry=registry).llvm_ir.isascii()


def _cuda_kernel(name: str) -> tuple[cuda.CudaKernel, ir.PrimFunc, dict, str, np.ndarray]:
    func, inputs, output, expected = _case(name)
    tensorized = _tensorized(func, "cuda")
    kernel = cuda.emit(tensorized, default_registry())
    assert kernel.source.isascii()
    assert kernel.name == mangle(func.name)
    assert kernel.params[:3] == tuple(mangle(p.name) for p in func.params)
    # The emulation reports a shared buffer by the user's name.
    for buffer in tensorized.allocs:
        if buffer.scope == "shared":
            assert string_literal(buffer.name) in kernel.source
    return kernel, func, inputs, output, expected


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="no host C++ compiler to build the emulation")
@pytest.mark.slow
@pytest.mark.parametrize("name", KERNELS)
def test_cuda_emulated(name):
    kernel, func, inputs, output, expected = _cuda_kernel(name)
    np.testing.assert_array_equal(cuda.emulate(kernel, inputs)[output], expected)


@pytest.mark.skipif(cuda.nvcc_path() is None, reason="no nvcc")
@pytest.mark.slow
@pytest.mark.parametrize("name", KERNELS)
def test_cuda_nvcc(name):
    kernel = _cuda_kernel(name)[0]
    ptx = cuda.compile(kernel, "sm_80")
    for launch in kernel.launches:
        assert f".entry {launch.kernel}(".encode() in ptx
