"""The NPU backend emits loops: a stage's program holds loop instructions whose expansion is
exactly the straight-line program walking every iteration would give, so it runs in the same
cycles; loops the emitter cannot prove regular are walked."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from intrinsics import default_registry
from ir import PrimFunc
from ir import script as T
from simulator import Loop, load_machine
from simulator.loops import expanded
from targets import npu
from targets.npu.emit import emit_stage
from tensorize.engine import auto_tensorize
from tensorize.engine.npu_traffic import NpuTiling
from tests.targets.npu.kernels import tiled_gemm
from tests.tensorize.engine.suite import SUITE

REGISTRY = default_registry()
CONFIG = load_machine()


def stages(func: PrimFunc) -> list[npu.CompiledStage]:
    """Every NPU stage of ``func``, compiled."""
    return [npu.compile_stage(s, CONFIG, REGISTRY.get)
            for s in npu.split_stages(func, REGISTRY.get) if s.on_npu]


def straight_line(compiled: npu.CompiledStage):
    """The stage emitted walking every loop, with the same placement."""
    return emit_stage(compiled.stage.stmt, REGISTRY.get, compiled.on_chip, compiled.dram,
                      CONFIG, loops=False)


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILDERS = {b.__name__: b for b in _load(SUITE, "loops_suite").BUILDERS}


def tensorized(name: str, tiling: NpuTiling | None = None, **sizes) -> PrimFunc:
    """Suite kernel ``name`` at ``sizes``, tensorized for the NPU (with ``tiling``, if
    given)."""
    return auto_tensorize(BUILDERS[name](**sizes), "npu", registry=REGISTRY, config=CONFIG,
                          tiling=tiling).func


@pytest.mark.parametrize(("name", "sizes"), [
    ("gemm_int8", {"m": 256, "n": 128, "k": 384}),
    ("gemm_int8_odd", {"m": 100, "n": 60, "k": 300}),
    ("batch_matmul_int8", {"batch": 4, "m": 32, "n": 32, "k": 256}),
    ("conv2d_nhwc_int8", {"batch": 1, "height": 14, "width": 14, "in_channels": 64,
                          "out_channels": 32}),
    ("matmul_requant_int8", {"m": 64, "n": 32, "k": 512}),
])
def test_loop_program_expands_to_the_straight_line_program(name, sizes):
    # One call's tile: the most loop iterations, so that the emitter folds loops.
    func = tensorized(name, NpuTiling(16), **sizes)
    for compiled in stages(func):
        flat = straight_line(compiled)
        assert expanded(compiled.program) == list(flat.instructions)
        assert compiled.calls == flat.calls
        assert any(isinstance(word, Loop) for word in compiled.program)
        assert len(compiled.program) < len(flat.instructions)


def test_loop_program_computes_exactly():
    func = tensorized("gemm_int8", m=128, n=64, k=512)
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (128, 512), dtype=np.int8)
    b = rng.integers(-128, 128, (512, 64), dtype=np.int8)
    run = npu.run(func, {"A": a, "B": b}, CONFIG, lookup=REGISTRY.get)
    np.testing.assert_array_equal(run.outputs["C"], a.astype(np.int32) @ b.astype(np.int32))


def test_program_size_follows_the_loop_nest_not_the_calls():
    # 1024^3: 262,144 GEMM calls, 266,240 DMA calls; 64 x 64 tile steps of three
    # instructions straight-line. As loops, the program holds the pipeline's prologue and
    # epilogue around two nested loops.
    (compiled,) = stages(tiled_gemm(1024, 1024, 1024, tm=1024))
    assert sum(compiled.calls.values()) == 262144 + 262144 + 4096 + 4096
    assert len(compiled.program) < 200
    assert sum(isinstance(word, Loop) for word in compiled.program) >= 3


def test_the_readme_gemm_keeps_its_cycles():
    example = _load(SUITE.parents[1] / "script" / "gemm_int8.py", "gemm_example")
    result = auto_tensorize(example.gemm_int8, "npu", registry=REGISTRY, config=CONFIG)
    zero = {"A": np.zeros((256, 256), np.int8), "B": np.zeros((256, 256), np.int8)}
    assert npu.run(result.func, zero, CONFIG, lookup=REGISTRY.get).cycles == 66698


# A stage adding an immediate to an accumulator tile 20 times: IMM is the immediate's
# expression in the loop variable k, COND a condition choosing 100 instead.
_ADD_IMM = '''
@T.prim_func
def add_k(C: T.Buffer((16, 16), "int32"), D: T.Buffer((16, 16), "int32")):
    acc = T.alloc_buffer((16, 16), "int32", scope="npu.acc")
    T.call_intrinsic("npu_load_acc", acc[0:16, 0:16], C[0:16, 0:16])
    for k in range(20):
        if COND:
            T.call_intrinsic("npu_vec_add_imm", acc[0:16, 0:16], 100)
        else:
            T.call_intrinsic("npu_vec_add_imm", acc[0:16, 0:16], IMM)
    T.call_intrinsic("npu_store_acc", D[0:16, 0:16], acc[0:16, 0:16])
'''


@pytest.mark.parametrize(("cond", "imm", "looped", "added"), [
    ("k < 0", "3", True, 60),               # the same instruction 20 times: one loop
    ("k < 0", "k", False, sum(range(20))),  # a different immediate each time: walked
    ("k == 9", "1", False, 100 + 19),       # what runs changes mid-loop: walked
    ("k == 0", "1", True, 100 + 19),        # ... or only in the first iterations: a loop
])
def test_loops_fold_only_where_every_iteration_repeats(cond, imm, looped, added):
    func = T.parse(_ADD_IMM.replace("COND", cond).replace("IMM", imm))
    c = np.arange(256, dtype=np.int32).reshape(16, 16)
    run = npu.run(func, {"C": c}, CONFIG, lookup=REGISTRY.get)
    np.testing.assert_array_equal(run.outputs["D"], c + added)
    (stage,) = [s.compiled for s in run.stages if s.compiled is not None]
    assert any(isinstance(word, Loop) for word in stage.program) == looped
    assert expanded(stage.program) == list(straight_line(stage).instructions)
    assert stage.calls["npu_vec_add_imm"] == 20
