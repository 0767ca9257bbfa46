"""The NPU backend end to end: hand-tensorized kernels, emitted, simulated, checked."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from ir import script as T
from ir.errors import ExecutionError
from simulator import Gemm, Load, Store, simulate
from targets import host, npu
from tests.targets.npu.kernels import tiled_gemm

RNG = np.random.default_rng(7)


def int8(*shape):
    return RNG.integers(-128, 128, shape).astype(np.int8)


@pytest.mark.parametrize(("m", "n", "k", "tm"), [(64, 64, 64, 64), (32, 48, 80, 16),
                                                 (128, 16, 16, 32)])
def test_tiled_gemm_is_exact(m, n, k, tm, registry, machine):
    A, B = int8(m, k), int8(k, n)
    result = npu.run(tiled_gemm(m, n, k, tm), {"A": A, "B": B}, machine, lookup=registry.get)
    np.testing.assert_array_equal(result.outputs["C"], A.astype(np.int32) @ B.astype(np.int32))


def test_every_call_is_counted(registry, machine):
    result = npu.run(tiled_gemm(64, 32, 48, 32), {"A": int8(64, 48), "B": int8(48, 32)},
                     machine, lookup=registry.get)
    tiles = (64 // 32) * (32 // 16)
    assert result.calls == {"npu_load_inp": tiles * 3 * 2, "npu_load_wgt": tiles * 3,
                            "npu_gemm_reset": tiles * 2, "npu_gemm": tiles * 2 * 2,
                            "npu_store_acc": tiles * 2}


def test_continuing_tiles_merge_into_tall_instructions(registry, machine):
    compiled = npu.run(tiled_gemm(64, 16, 32, 64),
                       {"A": int8(64, 32), "B": int8(32, 16)},
                       machine, lookup=registry.get).stages[0].compiled
    gemms = [i for i in compiled.program if isinstance(i, Gemm)]
    loads = [i for i in compiled.program if isinstance(i, Load) and i.mem.name == "INP"]
    stores = [i for i in compiled.program if isinstance(i, Store)]
    assert [g.rows for g in gemms] == [64, 64]
    assert [l.rows for l in loads] == [64, 64]
    assert [s.rows for s in stores] == [64]


def test_buffers_alternate_between_two_copies(registry, machine):
    compiled = npu.run(tiled_gemm(64, 32, 64, 64),
                       {"A": int8(64, 64), "B": int8(64, 32)},
                       machine, lookup=registry.get).stages[0].compiled
    inp_rows = [i.sram for i in compiled.program if isinstance(i, Load) and i.mem.name == "INP"]
    assert len(set(inp_rows)) == 2 and inp_rows[0] != inp_rows[1]
    assert compiled.single_copy == ()


def test_tokens_balance_on_every_channel(registry, machine):
    compiled = npu.run(tiled_gemm(64, 64, 64, 32),
                       {"A": int8(64, 64), "B": int8(64, 64)},
                       machine, lookup=registry.get).stages[0].compiled
    count = {}
    for insn in compiled.program:
        q = int(insn.queue)
        for flag, (src, dst) in (("push_next", (q, q + 1)), ("push_prev", (q, q - 1)),
                                 ("pop_prev", (q - 1, q)), ("pop_next", (q + 1, q))):
            if getattr(insn.deps, flag):
                count.setdefault((src, dst), [0, 0])[flag.startswith("pop")] += 1
    assert count and all(pushes == pops for pushes, pops in count.values())


def test_double_buffering_overlaps_loads_with_compute(registry, machine):
    """With two copies the load of the next tile runs during the current GEMMs, so the run
    takes fewer cycles than the same program kept in one copy of each buffer."""
    func = tiled_gemm(128, 64, 128, 64)
    inputs = {"A": int8(128, 128), "B": int8(128, 64)}
    double = npu.run(func, inputs, machine, lookup=registry.get).stages[0].sim.cycles
    config, lookup = machine, registry.get
    single = npu.compile_stage(npu.split_stages(func, lookup)[0], config, lookup,
                               single_copy=True)
    image = np.zeros(single.dram_bytes, np.uint8)
    assert simulate(single.program, config, image, functional=False).cycles > double


INTERLEAVED = '''
@T.prim_func
def f(A: T.Buffer((16, 32), "int8"), B: T.Buffer((32, 16), "int8"),
      C: T.Buffer((16, 16), "int32")):
    A_inp = T.alloc_buffer((32, 16), "int8", scope="npu.inp")
    B_wgt = T.alloc_buffer((32, 16), "int8", scope="npu.wgt")
    C_acc = T.alloc_buffer((16, 16), "int32", scope="npu.acc")
    T.call_intrinsic("npu_load_inp", A_inp[0:16, 0:16], A[0:16, 0:16])
    T.call_intrinsic("npu_load_inp", A_inp[16:32, 0:16], A[0:16, 16:32])
    T.call_intrinsic("npu_load_wgt", B_wgt[0:16, 0:16], B[0:16, 0:16])
    T.call_intrinsic("npu_gemm_reset", A_inp[0:16, 0:16], B_wgt[0:16, 0:16], C_acc[0:16, 0:16])
    T.call_intrinsic("npu_load_wgt", B_wgt[16:32, 0:16], B[16:32, 0:16])
    T.call_intrinsic("npu_gemm", A_inp[16:32, 0:16], B_wgt[16:32, 0:16], C_acc[0:16, 0:16])
    T.call_intrinsic("npu_gemm", A_inp[0:16, 0:16], B_wgt[0:16, 0:16], C_acc[0:16, 0:16])
    T.call_intrinsic("npu_store_acc", C[0:16, 0:16], C_acc[0:16, 0:16])
'''


def test_interleaved_reuse_falls_back_to_one_copy(registry, machine):
    """Weights reloaded between GEMMs that read an older tile again cannot alternate."""
    A, B = int8(16, 32), int8(32, 16)
    result = npu.run(T.parse(INTERLEAVED), {"A": A, "B": B}, machine, lookup=registry.get)
    assert "B_wgt" in result.stages[0].compiled.single_copy
    expected = A.astype(np.int32) @ B.astype(np.int32) + A[:, :16].astype(np.int32) @ B[:16]
    np.testing.assert_array_equal(result.outputs["C"], expected)


def test_operand_rows_must_be_contiguous_on_chip(registry, machine):
    text = INTERLEAVED.replace('A_inp = T.alloc_buffer((32, 16)', 'A_inp = T.alloc_buffer((16, 32)')
    text = text.replace("A_inp[16:32, 0:16]", "A_inp[0:16, 16:32]")
    with pytest.raises(ExecutionError, match="operand dst of npu_load_inp requires its rows "
                                             "contiguous in A_inp .16 elements apart., got 32"):
        npu.run(T.parse(text), {"A": int8(16, 32), "B": int8(32, 16)}, machine,
                lookup=registry.get)


def test_host_stage_runs_before_the_npu_stage(registry, machine):
    """A packing stage without intrinsics runs on the host and feeds the NPU stage."""
    gemm = tiled_gemm(32, 16, 16, 32)
    A_t = T.parse('''
@T.prim_func
def f(At: T.Buffer((16, 32), "int8"), A: T.Buffer((32, 16), "int8")):
    for i, j in T.grid(32, 16):
        with T.block("transpose"):
            vi, vj = T.axis.remap("SS", [i, j])
            A[vi, vj] = At[vj, vi]
''')
    A_buf = gemm.params[0]
    pack = ir.replace_buffers(A_t.root.body, {A_t.params[1]: A_buf})
    At = A_t.params[0]
    body = ir.seq(pack, gemm.root.body)
    func = ir.PrimFunc("packed", (At, *gemm.params[1:], A_buf),
                       ir.make_root(body, gemm.allocs))
    at, b = int8(16, 32), int8(16, 16)
    result = npu.run(func, {"At": at, "B": b}, machine, lookup=registry.get)
    assert [s.on_npu for s in result.stages] == [False, True]
    np.testing.assert_array_equal(result.outputs["C"], at.T.astype(np.int32) @ b.astype(np.int32))


def test_plain_store_in_an_npu_stage_is_refused(registry, machine):
    func = T.parse('''
@T.prim_func
def f(A: T.Buffer((16, 16), "int8"), C: T.Buffer((16, 16), "int32")):
    A_inp = T.alloc_buffer((16, 16), "int8", scope="npu.inp")
    C_acc = T.alloc_buffer((16, 16), "int32", scope="npu.acc")
    for o in range(1):
        T.call_intrinsic("npu_load_inp", A_inp[0:16, 0:16], A[0:16, 0:16])
        for i in range(16):
            with T.block("scale"):
                vi = T.axis.spatial(16, i)
                C[vi, 0] = T.cast(A[vi, 0], "int32") * 2
''')
    with pytest.raises(ExecutionError, match="block 'scale' stores to C with a plain statement"):
        npu.run(func, {"A": int8(16, 16)}, machine, lookup=registry.get)


def test_buffers_too_big_for_the_scratchpad_are_refused(registry, machine):
    with pytest.raises(ExecutionError, match="cannot hold A_inp 4096 rows"):
        npu.run(tiled_gemm(4096, 16, 16, 4096), {"A": int8(4096, 16), "B": int8(16, 16)},
                machine, lookup=registry.get)


def test_results_match_the_host_run_of_the_same_ir(registry, machine):
    """The host executor runs the same tensorized function with intrinsics lowered to their
    semantics: both must agree exactly."""
    from intrinsics import default_registry, lowerer

    func = tiled_gemm(32, 32, 32, 32)
    inputs = {"A": int8(32, 32), "B": int8(32, 32)}
    on_host = host.run(func, inputs, lowerer(default_registry().get))
    on_npu = npu.run(func, inputs, machine, lookup=registry.get)
    np.testing.assert_array_equal(on_npu.outputs["C"], on_host["C"])


@pytest.mark.parametrize("config", [None, "intrinsics/npu.yaml"])
def test_the_machine_comes_from_the_caller(config, registry):
    # No default machine below the edge, and no path read here: npu.load_machine reads one.
    with pytest.raises(TypeError, match="npu.plan requires config, the machine"):
        npu.run(tiled_gemm(16, 16, 16, 16), {}, config, lookup=registry.get)
