"""Epilogues fused into the Hopper GEMM's store (targets/cuda/hopper_epilogue.py, taken by
tensorize/engine/cuda_hopper.py): the elementwise blocks after the GEMM (a bias, a ReLU, an
int8 requantisation, a float16 or bfloat16 narrowing) computed on the accumulator registers,
so the sums never reach global memory; run under the host emulation against the host
reference executor (integers exactly, floats within the narrowing's rounding), on sizes off
the tile and extreme values; compiled for sm_90a to wgmma and TMA copies with no spills."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import ir
from intrinsics import default_registry, lowerer
from ir import Buffer, BufferLoad, Var, dtypes, te
from ir.onnx.kernels import Requantisation, matmul_requantised
from targets import cuda, host
from targets.cuda.compile import cuobjdump_path, nvcc_path, resource_usage, sass_opcodes
from targets.cuda.emulate import COPY_MODES
from targets.cuda.errors import EmitError
from targets.cuda.hopper_epilogue import Epilogue
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_hopper import HOPPER_ARCH, hopper_kernel
from tests.targets.cuda.helpers import sized

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                               reason="no host C++ compiler to build the emulation")


def _float_gemm(m: int, n: int, k: int, dtype: str, out: str, relu: bool = True
                ) -> ir.PrimFunc:
    """A ``dtype`` GEMM into float32 sums, plus a float32 bias per column, a ReLU (with
    ``relu``) and a narrowing to ``out``: four blocks, as an ONNX importer writes them."""
    A = te.placeholder((m, k), dtype, "A")
    B = te.placeholder((k, n), dtype, "B")
    bias = te.placeholder((n,), "float32", "Bias")
    r = te.reduce_axis(k, "k")
    acc = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("float32", A[i, r]) * ir.cast("float32", B[r, j]), axis=r), "acc")
    biased = te.compute((m, n), lambda i, j: acc[i, j] + bias[j], "biased")
    active = te.compute((m, n), lambda i, j: ir.max_(biased[i, j], 0.0), "relu") \
        if relu else biased
    narrowed = te.compute((m, n), lambda i, j: ir.cast(out, active[i, j]), "narrowed")
    return te.create_prim_func([A, B, bias, narrowed], "gemm_bias_relu")


def _requantised(m: int, n: int, k: int) -> ir.PrimFunc:
    return matmul_requantised(m, k, n, Requantisation(zero_point=3, low=-100, high=120))


def _inputs(func: ir.PrimFunc, seed: int) -> dict[str, np.ndarray]:
    """Random operands with extreme rows and columns (int8's -128 and 127 throughout one row
    of A and one column of B; float operands at float16's largest products), a bias wide
    enough to push sums past int8 either way, and scales from tiny to saturating."""
    rng = np.random.default_rng(seed)
    inputs: dict[str, np.ndarray] = {}
    for param in func.params[:2]:
        dt = param.dtype.numpy
        if param.dtype.is_int:
            inputs[param.name] = rng.integers(-128, 128, param.shape).astype(dt)
        else:
            inputs[param.name] = rng.standard_normal(param.shape).astype(dt)
    a, b = inputs[func.params[0].name], inputs[func.params[1].name]
    a[0, :] = -128 if a.dtype == np.int8 else 8
    b[:, -1] = 127 if b.dtype == np.int8 else -8
    for param in func.params[2:-1]:
        if param.name == "Scale":
            scale = (rng.random(param.shape) * 4e-4).astype(np.float32)
            scale[:3] = (1.0, 1e-9, 3e-5)
            inputs[param.name] = scale
        elif param.dtype.is_int:
            inputs[param.name] = rng.integers(-(1 << 20), 1 << 20, param.shape).astype(
                param.dtype.numpy)
        else:
            inputs[param.name] = rng.standard_normal(param.shape).astype(param.dtype.numpy)
    return inputs


def _taken(func: ir.PrimFunc):
    registry = default_registry()
    result = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH)
    assert result.hopper.gemm is not None, result.hopper.reason
    return result, hopper_kernel(result.hopper.gemm, registry, func.name)


# The explicit mantissa bits of each narrowed float output.
MANTISSA = {"float16": 10, "bfloat16": 7}


def _check(output: dtypes.DType, got: np.ndarray, want: np.ndarray) -> None:
    """Integers exactly; a narrowed float within one unit of its last place (the emulation
    and the reference may sum in float32 in other orders, and the narrowing rounds)."""
    if output.is_int:
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                               rtol=2.0 ** -MANTISSA[output.name], atol=1e-6)


# ---- what the engine takes, and how ---------------------------------------------------------

def test_a_requantised_gemm_fuses_its_epilogue_and_never_stores_the_sums():
    func = _requantised(70, 130, 40)
    result, kernel = _taken(func)
    gemm = result.hopper.gemm
    assert gemm.operands.epilogue.blocks == ("biased", "requantised", "narrowed")
    assert gemm.describe().endswith("; blocks biased, requantised, narrowed fused into the "
                                    "consumers' store (computed on the accumulator registers, "
                                    "matmul's sums never stored)")
    # The sums are no buffer of the kernel: no C, no padded copy, no unpadding launch.
    assert [b.name for b in kernel.buffers] == ["A", "B", "Bias", "Scale", "narrowed", "A_k",
                                               "B_t"]
    assert kernel.outputs == ("narrowed",)
    assert [l.kernel for l in kernel.launches] == [
        "matmul_requantised_pack_b", "matmul_requantised_pack_a", "matmul_requantised_gemm"]
    # The host validates the tensorized IR, epilogue blocks included, against the kernel.
    inputs = _inputs(func, seed=1)
    np.testing.assert_array_equal(
        host.run(result.func, inputs, lowerer(default_registry().get))["narrowed"],
        host.run(func, inputs)["narrowed"])


@pytest.mark.slow
@needs_gxx
def test_the_fused_requantisation_is_exact_under_the_emulation():
    func = _requantised(70, 130, 40)
    _, kernel = _taken(func)
    inputs = _inputs(func, seed=2)
    want = host.run(func, inputs)["narrowed"]
    # Every output value from the low to the high bound occurs: saturation both ways.
    assert want.min() == -100 and want.max() == 120
    got = cuda.emulate(kernel, inputs, copies="at_issue")["narrowed"]
    np.testing.assert_array_equal(got, want)


def _int8_acc(m: int, n: int, k: int) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    r = te.reduce_axis(k, "k")
    return A, B, te.compute((m, n), lambda i, j: te.sum(
        ir.cast("int32", A[i, r]) * ir.cast("int32", B[r, j]), axis=r), "acc")


def _row_sums() -> ir.PrimFunc:
    A, B, acc = _int8_acc(64, 64, 64)
    j = te.reduce_axis(64, "j")
    total = te.compute((64,), lambda i: te.sum(acc[i, j], axis=j), "total")
    return te.create_prim_func([A, B, total], "row_sums")


def _transposed_epilogue() -> ir.PrimFunc:
    A, B, acc = _int8_acc(64, 64, 64)
    out = te.compute((64, 64), lambda i, j: acc[j, i] + 1, "out")
    return te.create_prim_func([A, B, out], "transposed")


@pytest.mark.parametrize("kernel, reason", [
    # The sums reduced along N after the GEMM: not elementwise.
    (_row_sums, ("requires one GEMM block, then only elementwise blocks reading its result "
                 "where it lies (fused into the consumers' store), got 2 blocks (acc, "
                 "total)")),
    # The sums read transposed: elementwise, but not where the store writes.
    (_transposed_epilogue, "block out requires reading acc at the element it stores"),
])
def test_an_epilogue_the_kernel_cannot_fuse_names_its_reason(kernel, reason):
    registry = default_registry()
    result = auto_tensorize(kernel(), "cuda", registry=registry, arch=HOPPER_ARCH)
    assert result.hopper.gemm is None
    assert result.hopper.reason.startswith("hopper schedule: ")
    assert reason in result.hopper.reason


@pytest.mark.parametrize("change, message", [
    ({"output": Buffer("Y", (70, 129), dtypes.int32)},
     ("requires the epilogue's output Y of 70 x 130 elements (unit dimensions aside), got "
      "shape (70, 129)")),
    ({"output": Buffer("Y", (70, 130), dtypes.int32, strides=(256, 1))},
     "requires Y dense in row-major order, got strides (256, 1)"),
    ({"value": "transposed"}, ("requires the epilogue to read C at its own element (row, "
                               "col), got col, row")),
    ({"inputs": ()}, "requires the epilogue's inputs to list Bias, got "),
    ({"value": "free"}, "requires the epilogue's value in row, col and batch alone, got x"),
    ({"output": Buffer("Y", (70, 130), dtypes.int8)},
     "requires the epilogue's value of Y's type int8, got int32"),
])
def test_an_epilogue_the_backend_cannot_emit_is_refused_by_name(change, message):
    row, col = Var("row"), Var("col")
    acc = Buffer("C", (70, 130), dtypes.int32)
    bias = Buffer("Bias", (130,), dtypes.int32)
    values = {"transposed": BufferLoad(acc, (col, row)),
              "free": BufferLoad(acc, (row, col)) + Var("x")}
    fields = {"row": row, "col": col,
              "value": BufferLoad(acc, (row, col)) + BufferLoad(bias, (col,)),
              "acc": acc, "output": Buffer("Y", (70, 130), dtypes.int32), "inputs": (bias,),
              "blocks": ("Y",), "batch": Var("batch")}
    fields |= {k: values.get(v, v) if isinstance(v, str) else v for k, v in change.items()}
    with pytest.raises(EmitError) as err:
        Epilogue(**fields).check(70, 130)
    assert message in str(err.value)


# ---- exact under the emulation (CI's slow pass: each build takes g++ seconds) ---------------

SLOW_CASES = [
    ("int8 requantised", lambda: _requantised(70, 130, 40)),
    ("int8 requantised, 128-wide", lambda: _requantised(65, 250, 96)),
    # int64 arithmetic and a rounding shift (floor division) after the bias.
    ("int8, int64 rounding shift", lambda: sized("matmul_requant_int8", m=70, n=130, k=64)),
    ("float16 to float16", lambda: _float_gemm(65, 130, 40, "float16", "float16")),
    ("bfloat16 to bfloat16", lambda: _float_gemm(100, 72, 64, "bfloat16", "bfloat16")),
    ("float8_e4m3 to float16", lambda: _float_gemm(64, 200, 96, "float8_e4m3", "float16",
                                                   relu=False)),
]


@pytest.mark.slow
@needs_gxx
@pytest.mark.parametrize("copies", COPY_MODES)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("name, build", SLOW_CASES, ids=[c[0] for c in SLOW_CASES])
def test_a_fused_epilogue_agrees_with_the_reference_executor(name, build, copies, reverse):
    func = build()
    _, kernel = _taken(func)
    inputs = _inputs(func, seed=7)
    output = func.params[-1]
    want = host.run(func, inputs)[output.name]
    got = cuda.emulate(kernel, inputs, copies=copies, reverse=reverse)[output.name]
    _check(output.dtype, got, want)


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found")
@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump not found (the sass extra)")
@pytest.mark.parametrize("build, opcode, store", [
    # Pairs of the narrow type (test_hopper_paired_store.py): 2 and 4 bytes a store.
    (lambda: _requantised(4096, 4096, 4096), "IGMMA", "STG.E.U16"),
    (lambda: _float_gemm(4096, 4096, 4096, "float16", "float16"), "HGMMA", "STG.E"),
])
def test_a_fused_epilogue_compiles_to_wgmma_and_narrow_stores_without_spills(build, opcode,
                                                                            store):
    func = build()
    _, kernel = _taken(func)
    (counts,) = [c for name, c in sass_opcodes(kernel, HOPPER_ARCH, modifiers=True).items()
                 if name.endswith("_gemm")]
    assert any(o.startswith(opcode) for o in counts) and any(
        o.startswith("UTMALDG") for o in counts), counts
    # The launch stores the narrow output alone: no 32-bit store of a sum.
    stores = {o: c for o, c in counts.items() if o.startswith("STG")}
    assert set(stores) == {store}, stores
    for resources in resource_usage(kernel, HOPPER_ARCH):
        assert resources.spill_stores == resources.spill_loads == 0, resources
