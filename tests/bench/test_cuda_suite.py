"""The parts of ``bench/bench_cuda.py --gpu-suite`` that need no GPU (``bench/cuda_suite.py``):
the plan, the fp16 tolerance rule and the int8 check, cuBLAS's arguments, the JSON record;
and that the bench imports without the modules the GPU machine lacks."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


suite = _load("cuda_suite")


def _fp32_sequential(a: np.ndarray, b: np.ndarray, dtype=np.float32) -> np.ndarray:
    """A @ B summed one k at a time in ``dtype``, as an accumulator register does."""
    c = np.zeros((a.shape[0], b.shape[1]), dtype)
    for k in range(a.shape[1]):
        c = (c + a[:, k:k + 1].astype(dtype) * b[k].astype(dtype)).astype(dtype)
    return c


def _fp16_case(k: int = 512):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((24, k)).astype(np.float16)
    b = rng.standard_normal((k, 40)).astype(np.float16)
    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
    return a, b, wide_a @ wide_b, np.abs(wide_a) @ np.abs(wide_b)


# ---- the plan ---------------------------------------------------------------------------------

def test_every_case_gets_the_default_and_a_tuned_kernel_per_family():
    cases = suite.suite_cases()
    plans = suite.plan_suite(cases)
    assert len(plans) == 3 * len(cases)
    for case in cases:
        mine = [p.intrinsic for p in plans if p.case == case]
        assert mine == [None, *suite.FAMILIES[case.dtype]]
    labels = [c.label for c in cases]
    assert len(set(labels)) == len(labels)


def test_the_suite_holds_square_skinny_and_odd_gemms_of_both_types():
    shapes = {(c.dtype, c.m, c.n, c.k) for c in suite.suite_cases()}
    for dtype in ("fp16", "int8"):
        assert {(dtype, m, 4096, 4096) for m in (1, 8, 64)} <= shapes
        assert (dtype, 1000, 1000, 1000) in shapes
        assert {(dtype, n, n, n) for n in (1024, 2048, 4096)} <= shapes
    assert ("fp16", 8192, 8192, 8192) in shapes and ("int8", 8192, 8192, 8192) not in shapes


# ---- the checks -------------------------------------------------------------------------------

def test_fp32_accumulation_in_any_order_is_inside_the_fp16_bound():
    a, b, reference, magnitude = _fp16_case()
    for got in (_fp32_sequential(a, b), _fp32_sequential(a[:, ::-1], b[::-1]),
                a.astype(np.float32) @ b.astype(np.float32)):
        check = suite.check_fp16(got, reference, magnitude, a.shape[1])
        assert check.ok and check.wrong == 0 and 0 < check.worst <= 1, check


def test_fp16_accumulation_falls_outside_the_bound():
    # The bound is in fp32's unit roundoff: a kernel summing in fp16 fails it.
    a, b, reference, magnitude = _fp16_case()
    check = suite.check_fp16(_fp32_sequential(a, b, np.float16), reference, magnitude, 512)
    assert not check.ok and check.wrong > 0 and check.worst > 1


def test_one_element_off_by_its_bound_or_never_written_fails():
    a, b, reference, magnitude = _fp16_case()
    got = a.astype(np.float32) @ b.astype(np.float32)
    off = got.copy()
    off[3, 7] += 3 * suite.fp16_bound(magnitude[3, 7], a.shape[1])
    check = suite.check_fp16(off, reference, magnitude, a.shape[1])
    assert (check.ok, check.wrong) == (False, 1) and 2 < check.worst < 4
    unwritten = got.copy()
    unwritten[0, 0] = np.nan
    check = suite.check_fp16(unwritten, reference, magnitude, a.shape[1])
    assert (check.ok, check.wrong) == (False, 1) and np.isnan(check.worst)
    assert check.describe().startswith("WRONG: 1 elements")


def test_the_bound_grows_with_k_in_fp32_unit_roundoff():
    assert suite.fp16_bound(1.0, 4096) == 4 * 4096 * 2.0 ** -24
    assert suite.fp16_bound(2.0, 1024) == 2 * suite.fp16_bound(1.0, 1024)


def test_int8_is_checked_exactly():
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (8, 300)).astype(np.int8)
    b = rng.integers(-128, 128, (300, 16)).astype(np.int8)
    want = a.astype(np.int64) @ b.astype(np.int64)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    check = suite.check_int8(want.astype(np.int32), reference)
    assert (check.ok, check.wrong, check.describe()) == (True, 0, "exact")
    got = want.astype(np.int32)
    got[5, 2] += 1
    check = suite.check_int8(got, reference)
    assert (check.ok, check.wrong, check.worst) == (False, 1, 1.0)


def test_an_int8_depth_that_could_wrap_int32_is_refused():
    suite.require_exact_int8(4096)
    with pytest.raises(ValueError, match="K \\* 2\\^14 < 2\\^31, got K = 131072"):
        suite.require_exact_int8(131072)


# ---- cuBLAS's arguments -----------------------------------------------------------------------

def _column_major(flat: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    """The rows x cols column-major matrix with leading dimension ``ld`` in ``flat``."""
    return np.array([[flat[i + j * ld] for j in range(cols)] for i in range(rows)])


def _gemm_ex(call, buffers: dict[str, np.ndarray]) -> np.ndarray:
    """What cublasGemmEx computes, C = op(X) @ op(Y) column-major, as the row-major C."""
    x_rows, x_cols = (call.rows, call.depth) if call.transa == "N" else (call.depth, call.rows)
    y_rows, y_cols = (call.depth, call.cols) if call.transb == "N" else (call.cols, call.depth)
    x = _column_major(buffers[call.x].ravel(), x_rows, x_cols, call.lda)
    y = _column_major(buffers[call.y].ravel(), y_rows, y_cols, call.ldb)
    c = (x if call.transa == "N" else x.T) @ (y if call.transb == "N" else y.T)
    flat = np.zeros(call.ldc * call.cols, c.dtype)
    for j in range(call.cols):
        flat[j * call.ldc:j * call.ldc + call.rows] = c[:, j]
    return flat.reshape(call.cols, call.ldc)[:, :call.rows]


@pytest.mark.parametrize("layout", ["NN", "TN"])
@pytest.mark.parametrize(("m", "n", "k"), [(3, 5, 7), (1, 6, 4)])
def test_gemm_ex_arguments_compute_the_row_major_product(layout, m, n, k):
    rng = np.random.default_rng(2)
    a = rng.integers(-9, 10, (m, k))
    b = rng.integers(-9, 10, (k, n))
    call = suite.gemm_ex_call(m, n, k, layout)
    got = _gemm_ex(call, {"A": a, "B": b, "B^T": np.ascontiguousarray(b.T)})
    np.testing.assert_array_equal(got, a @ b)


def test_int8_calls_cublas_in_its_tn_fast_path():
    call = suite.gemm_ex_call(64, 4096, 4096, suite.CUBLAS_LAYOUT["int8"])
    assert (call.transa, call.transb, call.x, call.lda, call.ldb) == ("T", "N", "B^T", 4096, 4096)
    with pytest.raises(ValueError, match="layout must be 'NN' or 'TN', got 'NT'"):
        suite.gemm_ex_call(1, 1, 1, "NT")


# ---- the record -------------------------------------------------------------------------------

def test_the_json_record_reads_back_with_non_finite_figures_as_null(tmp_path):
    path = tmp_path / "suite.json"
    record = {"device": {"sm_count": np.int64(132)},
              "rows": [{"case": suite.GemmCase("fp16", 1, 8, 8).label, "best_ms": 0.25,
                        "worst": float("nan"), "vs_cublas": float("inf")}],
              "plan": [suite.KernelPlan(suite.GemmCase("int8", 2, 3, 4), None)]}
    suite.write_json(path, record)
    back = json.loads(path.read_text())
    assert back["device"] == {"sm_count": 132}
    assert back["rows"] == [{"case": "fp16 1x8x8", "best_ms": 0.25, "worst": None,
                             "vs_cublas": None}]
    assert back["plan"] == [{"case": {"dtype": "int8", "m": 2, "n": 3, "k": 4},
                             "intrinsic": None}]


def test_times_summarise_as_best_and_median():
    assert suite.summary([3.0, 1.0, 2.0]) == {"best_ms": 1.0, "median_ms": 2.0, "runs": 3}
    assert suite.summary([4.0, 1.0, 2.0, 3.0]) == {"best_ms": 1.0, "median_ms": 2.5, "runs": 4}


# ---- what the GPU machine lacks ---------------------------------------------------------------

def test_the_bench_imports_without_unicorn_matplotlib_or_cupy():
    # A GPU machine runs the repository as it is, with no pip: the bench needs nothing beyond
    # the core install's numpy, llvmlite, pyyaml, ml_dtypes and threadpoolctl (and CuPy to
    # time). A None in sys.modules makes importing a module fail as if it were absent.
    blocked = ("unicorn", "matplotlib", "cupy", "onnxruntime", "dask", "hypothesis", "scipy")
    code = (f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"
            "import bench_cuda\nprint(bench_cuda.gpu_unavailable())")
    root = BENCH.parent
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=root, env={"PYTHONPATH": f"{root}:{BENCH}", "PATH": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ModuleNotFoundError: import of cupy halted")
