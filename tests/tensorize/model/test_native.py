"""The network compiled for x86 and called as one function: every tensorized layer a native
kernel compiled once, the outputs equal onnxruntime's, and the timing taking turns."""

from __future__ import annotations

import numpy as np
import pytest

from ir.onnx import import_model
from targets import cpu
from targets.cpu.loaded import LoadedKernel
from tensorize.engine import auto_tensorize
from tensorize.model import random_inputs
from tensorize.model.native import compile_network, time_interleaved
from tensorize.model.reference import reference_session
from tests.ir.onnx import models
from tests.tensorize.schedule.kernels import gemm_int8


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    folder = tmp_path_factory.mktemp("native")
    return import_model(models.save(models.quantize(models.small_cnn(size=16), folder),
                                    folder, "cnn_int8.onnx"))


def test_the_compiled_network_gives_onnxruntimes_outputs(cnn, context):
    ctx = context("x86")
    network = compile_network(cnn, ctx)
    # Every convolution and matrix product of this network tensorizes on x86.
    assert network.native == sum(layer.func is not None for layer in cnn.layers) == 3
    names = [info.name for info in cnn.outputs]
    session = reference_session(cnn)
    for seed in (0, 1):  # a second call on other inputs: nothing left over from the first
        inputs = random_inputs(cnn, seed)
        ours = network(inputs)
        theirs = dict(zip(names, session.run(names, inputs)))
        for name in names:
            np.testing.assert_array_equal(ours[name], theirs[name])


def test_a_loaded_kernel_runs_again_on_new_inputs(registry, context):
    ctx = context("x86")
    func = auto_tensorize(gemm_int8(32, 48, 64), "x86", registry=registry).func
    loaded = LoadedKernel(cpu.emit(func, "x86", ctx.features, registry=registry))
    rng = np.random.default_rng(0)
    for _ in range(2):
        a = rng.integers(0, 256, (32, 64)).astype(np.int8)
        b = rng.integers(-128, 128, (64, 48), dtype=np.int8)
        # Whatever the arrays hold from before (here: random bytes), the kernel writes
        # every element it reads first.
        for array in loaded._arrays.values():
            array.view(np.uint8)[...] = rng.integers(0, 256, array.nbytes, dtype=np.uint8
                                                     ).reshape(array.view(np.uint8).shape)
        out = loaded({"A": a, "B": b})["C"]
        np.testing.assert_array_equal(out, a.astype(np.int32) @ b.astype(np.int32))


def test_timings_take_turns():
    order = []
    timings = time_interleaved({"a": lambda: order.append("a"),
                                "b": lambda: order.append("b")}, 3)
    assert order == ["a", "b"] * 3
    assert all(len(t.seconds) == len(t.cpu_seconds) == 3 for t in timings.values())
    assert timings["a"].best == min(timings["a"].seconds) <= timings["a"].median


def test_a_loaded_kernel_copies_again_what_may_have_changed(registry, context):
    ctx = context("x86")
    func = auto_tensorize(gemm_int8(16, 32, 64), "x86", registry=registry).func
    loaded = LoadedKernel(cpu.emit(func, "x86", ctx.features, registry=registry))
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (16, 64), dtype=np.int8)
    writable = rng.integers(-128, 128, (64, 32), dtype=np.int8)
    frozen = writable.copy()
    frozen.setflags(write=False)
    for b in (writable, frozen):
        first = loaded({"A": a, "B": b})["C"].copy()
        np.testing.assert_array_equal(first, a.astype(np.int32) @ b.astype(np.int32))
    # A writable array changed in place is copied again; a read-only one cannot change.
    writable += 1
    np.testing.assert_array_equal(loaded({"A": a, "B": writable})["C"],
                                  a.astype(np.int32) @ writable.astype(np.int32))
    np.testing.assert_array_equal(loaded({"A": a, "B": frozen})["C"],
                                  a.astype(np.int32) @ frozen.astype(np.int32))
