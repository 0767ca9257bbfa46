"""Every example kernel parses (from its file and through its decorator), verifies and
round-trips through the printer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import ir
from ir import PrimFunc, dtypes
from ir import script as T
from ir.printer import print_node
from ir.verify import verify

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "script"
NAMES = ("matmul_relu", "gemm_int8", "batch_matmul", "conv2d_nhwc", "conv2d_nchw", "dense_bias",
         "gemm_odd", "batch_matmul_bf16", "batch_matmul_fp16", "dense_bf16", "dense_fp16",
         "conv2d_nhwc_bf16", "conv2d_nhwc_fp16")
# (parameter shapes and dtypes, number of blocks) per kernel, from its description.
EXPECTED = {
    "matmul_relu": ([((128, 128), "float32")] * 3, 2),
    "gemm_int8": ([((256, 256), "int8"), ((256, 256), "int8"), ((256, 256), "int32")], 1),
    "batch_matmul": ([((4, 64, 64), "float32")] * 3, 1),
    "conv2d_nhwc": ([((1, 56, 56, 64), "int8"), ((3, 3, 64, 64), "int8"),
                     ((1, 56, 56, 64), "int32")], 2),
    "conv2d_nchw": ([((1, 32, 28, 28), "float32"), ((64, 32, 3, 3), "float32"),
                     ((1, 64, 14, 14), "float32")], 2),
    "dense_bias": ([((64, 256), "float32"), ((128, 256), "float32"), ((128,), "float32"),
                    ((64, 128), "float32")], 2),
    "gemm_odd": ([((100, 36), "int8"), ((36, 60), "int8"), ((100, 60), "int32")], 1),
    **{f"batch_matmul_{s}": ([((4, 64, 64), t)] * 2 + [((4, 64, 64), "float32")], 1)
       for s, t in (("bf16", "bfloat16"), ("fp16", "float16"))},
    **{f"dense_{s}": ([((64, 256), t), ((128, 256), t), ((64, 128), "float32")], 1)
       for s, t in (("bf16", "bfloat16"), ("fp16", "float16"))},
    **{f"conv2d_nhwc_{s}": ([((1, 14, 14, 32), t), ((3, 3, 32, 32), t),
                             ((1, 14, 14, 32), "float32")], 2)
       for s, t in (("bf16", "bfloat16"), ("fp16", "float16"))},
}


def load(name: str) -> PrimFunc:
    kernels = T.load_file(EXAMPLES / f"{name}.py")
    assert list(kernels) == [name]
    return kernels[name]


def count_blocks(func: PrimFunc) -> int:
    found: list[ir.Block] = []
    ir.post_order_visit(func.root.body,
                        lambda n: found.append(n) if isinstance(n, ir.Block) else None)
    return len(found)


@pytest.mark.parametrize("name", NAMES)
def test_example_parses_with_its_described_signature(name):
    func = load(name)
    verify(func)
    params, blocks = EXPECTED[name]
    assert [(p.shape, p.dtype) for p in func.params] == [
        (shape, dtypes.dtype(dt)) for shape, dt in params]
    assert count_blocks(func) == blocks


@pytest.mark.parametrize("name", NAMES)
def test_example_roundtrips(name):
    func = load(name)
    text = print_node(func)
    parsed = T.parse(text)
    ir.assert_structural_equal(func, parsed)
    assert print_node(parsed) == text


@pytest.mark.parametrize("name", NAMES)
def test_decorator_and_file_loading_agree(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ir.assert_structural_equal(getattr(module, name), load(name))
