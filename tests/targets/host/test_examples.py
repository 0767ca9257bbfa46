"""Every example kernel, in its TE and script forms, against numpy references written here."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import ir
from targets import host
from tests.targets.host.kernels import EXAMPLE_NAMES, script_kernel, te_builder

RNG = np.random.default_rng(20240601)


def _conv_nhwc(I: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Stride 1, padding 1, HWIO weights; exact in int64."""
    padded = np.pad(I.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    _, height, width, _ = I.shape
    out = np.zeros((1, height, width, W.shape[3]), np.int64)
    for rh in range(W.shape[0]):
        for rw in range(W.shape[1]):
            window = padded[:, rh:rh + height, rw:rw + width, :]
            out += np.einsum("nhwc,co->nhwo", window, W[rh, rw].astype(np.int64))
    return out.astype(np.int32)


def _conv_nchw(I: np.ndarray, W: np.ndarray, stride: int = 2, pad: int = 1) -> np.ndarray:
    """OIHW weights, in float64."""
    padded = np.pad(I.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kernel = W.shape[2]
    out_h = (padded.shape[2] - kernel) // stride + 1
    out_w = (padded.shape[3] - kernel) // stride + 1
    out = np.zeros((1, W.shape[0], out_h, out_w))
    for rh in range(kernel):
        for rw in range(kernel):
            window = padded[:, :, rh:rh + stride * out_h:stride, rw:rw + stride * out_w:stride]
            out += np.einsum("nchw,oc->nohw", window, W[:, :, rh, rw].astype(np.float64))
    return out


REFERENCES: dict[str, Callable[..., np.ndarray]] = {
    "matmul_relu": lambda A, B: np.maximum(A.astype(np.float64) @ B, 0),
    "gemm_int8": lambda A, B: A.astype(np.int32) @ B.astype(np.int32),
    "gemm_odd": lambda A, B: A.astype(np.int32) @ B.astype(np.int32),
    "batch_matmul": lambda A, B: np.einsum("bik,bkj->bij", A.astype(np.float64), B),
    "dense_bias": lambda X, W, b: X.astype(np.float64) @ W.T.astype(np.float64) + b,
    "conv2d_nhwc": _conv_nhwc,
    "conv2d_nchw": _conv_nchw,
}


def _random(buffer: ir.Buffer) -> np.ndarray:
    dt = buffer.dtype
    if dt.is_int:
        return RNG.integers(dt.min, dt.max + 1, buffer.shape).astype(dt.numpy)
    return RNG.standard_normal(buffer.shape).astype(dt.numpy)


def _check(func: ir.PrimFunc, name: str) -> None:
    inputs = [_random(p) for p in func.params[:-1]]
    out = host.run(func, inputs)[func.params[-1].name]
    expected = REFERENCES[name](*inputs)
    if out.dtype.kind in "iu":
        np.testing.assert_array_equal(out, expected)
    else:
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_te_example_matches_numpy(name: str) -> None:
    _check(te_builder(name)(), name)


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_script_example_matches_numpy(name: str) -> None:
    _check(script_kernel(name), name)


@pytest.mark.parametrize(("name", "sizes"), [
    ("gemm_int8", {"m": 15, "n": 17, "k": 33}),
    ("gemm_odd", {"m": 31, "n": 16, "k": 1}),
    ("batch_matmul", {"batch": 3, "m": 17, "n": 15, "k": 31}),
    ("matmul_relu", {"m": 33, "n": 1, "k": 16}),
    ("dense_bias", {"m": 15, "n": 33, "k": 17}),
    ("conv2d_nhwc", {"height": 15, "width": 17, "in_channels": 3, "out_channels": 16}),
    ("conv2d_nchw", {"in_channels": 3, "height": 17, "width": 15, "out_channels": 5}),
])
def test_odd_sizes_match_numpy(name: str, sizes: dict[str, int]) -> None:
    _check(te_builder(name)(**sizes), name)
