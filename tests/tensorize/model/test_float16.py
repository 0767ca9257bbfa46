"""A float16 network on arm with +fp16fml: every Conv, MatMul and Gemm on FMLAL, each kernel
bit for bit against the hardware-order reference of its block and each layer within the
float16 tolerance of onnxruntime; a float32 network's checks as they were."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ir.onnx import import_model
from tensorize.model import run_model
from tensorize.model.check import compare, hardware_check
from tensorize.model.executors import CpuExecutor
from tensorize.runners import make_context
from tensorize.runners.cpu import run_emitted
from tests.docs.doc_tables import DocTable, figures_agree, table_rows
from tests.ir.onnx import models

ROOT = Path(__file__).resolve().parents[3]
FMLAL_ORDER = ("kernel exact against the hardware-order reference (ascending, round to "
               "nearest even, denormals kept) of arm_fmlal_lane; ")
KERNEL_OPS = ("Conv", "MatMul", "Gemm")


@pytest.fixture(scope="module")
def fp16_graph(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fp16")
    return import_model(models.save(models.small_fp16(), folder, "fp16.onnx"))


@pytest.fixture(scope="module")
def fp16_run(fp16_graph, registry):
    return run_model(fp16_graph, make_context(registry, "arm", features="+fp16fml"))


def test_every_float16_conv_and_matrix_product_runs_on_fmlal_exact(fp16_run):
    assert fp16_run.ok and fp16_run.tensorized == 4
    for record in fp16_run.records:
        if record["op"] not in KERNEL_OPS:
            assert record["placement"] == "host", record["name"]
            continue
        assert (record["placement"], record["intrinsic"]) == ("tensorized", "arm_fmlal_lane")
        assert record["check"].startswith(FMLAL_ORDER), record["check"]
        assert record["check"].endswith("of the largest value (tolerance 0.00390625)")
        assert record["instructions"] > record["calls"] > 0


def test_a_kernel_equals_numpy_s_float32_sum_in_ascending_k_bit_for_bit(fp16_graph, context):
    # conv2 (3x3, stride 2): FMLAL adds each exact float16 product to a float32 lane, one
    # rounding per k, k ascending over the window and then the input channels, as numpy's
    # float32 additions below do.
    executor = CpuExecutor(context("arm", features="+fp16fml"))
    conv2 = fp16_graph.layers[2]
    layer, outcome, (emitted, _) = executor.kernel_for(conv2)
    rng = np.random.default_rng(5)
    packed = layer.pack([rng.standard_normal((1, 8, 8, 8)).astype(np.float16)])
    sums = run_emitted(emitted, packed, 1).outputs[layer.func.params[-1].name]

    x, w = packed["X"].astype(np.float32), packed["W"].astype(np.float32)
    rows = np.stack([x[0, 2 * i:2 * i + 3, 2 * j:2 * j + 3, :].reshape(-1)
                     for i in range(4) for j in range(4)])
    columns = w.reshape(-1, w.shape[-1])
    want = np.zeros((rows.shape[0], columns.shape[1]), np.float32)
    for k in range(rows.shape[1]):
        want += rows[:, k:k + 1] * columns[k]
    assert np.array_equal(sums.reshape(want.shape).view(np.uint32), want.view(np.uint32))

    ok, text = hardware_check(layer.func, outcome, executor.ctx.registry, packed, sums)
    assert ok and text.startswith("kernel exact against the hardware-order reference")
    off = sums.copy()
    off[0, 1, 2, 3] = np.nextafter(off[0, 1, 2, 3], np.float32(np.inf))
    ok, text = hardware_check(layer.func, outcome, executor.ctx.registry, packed, off)
    assert not ok and text.startswith(f"kernel 1 of {sums.size} elements differ")
    assert "first at (0, 1, 2, 3)" in text


def test_a_block_the_reference_cannot_follow_keeps_the_tolerance_check_saying_why(
        fp16_graph, context):
    # A mapping the matcher does not find: the reference cannot tell the kernel's K order.
    executor = CpuExecutor(context("arm", features="+fp16fml"))
    layer, outcome, _ = executor.kernel_for(fp16_graph.layers[4])
    unknown = replace(outcome, mapping="M=(nothing)")
    packed = layer.pack([np.ones((1, 16, 16), np.float16)])
    sums = np.full((16, 8), 16.0, np.float32)
    ok, why = hardware_check(layer.func, unknown, executor.ctx.registry, packed, sums)
    assert ok and why == ("kernel not bit for bit: block 'matmul' (arm_fmlal_lane): no "
                          "mapping of arm_fmlal_lane the matcher finds is 'M=(nothing)'")
    wanted = np.full((1, 16, 8), 16.0, np.float16)
    ok, text = compare(wanted, wanted, (ok, why))
    assert ok and text.startswith(why + "; against onnxruntime: max error 0.00e+00")


def test_without_fp16fml_the_float16_kernels_run_on_the_host_saying_why(fp16_graph,
                                                                        context):
    run = run_model(fp16_graph, context("arm"))
    kernels = [r for r in run.records if r["op"] in KERNEL_OPS]
    assert run.ok and run.tensorized == 0
    for record in kernels:
        assert record["placement"] == "fallback"
        assert record["why_not"].endswith("arm_sdot_lane's C is int32")
        assert "kernel" not in record["check"]


def test_a_float32_network_keeps_its_float32_checks(tmp_path, context):
    graph = import_model(models.save(models.small_cnn(size=8), tmp_path, "cnn.onnx"))
    run = run_model(graph, context("arm", features="+fp16fml"))
    assert run.ok and run.tensorized == 0
    for record in run.records:
        assert record["check"].startswith("max error"), record
        assert record["check"].endswith("(tolerance 0.0001)")


FLOAT16_TABLE = DocTable(ROOT / "docs" / "models.md",
                         "| layer | op | intrinsic | calls | MACs | instructions | kernel "
                         "against the FMLAL order | against onnxruntime |", {})


def test_the_documented_float16_run_is_what_the_tool_prints(fp16_run):
    records = {r["name"]: r for r in fp16_run.records}
    rows = table_rows(FLOAT16_TABLE)
    assert [cells["layer"] for _, cells in rows] == [r["name"] for r in fp16_run.records]
    problems = []
    for number, cells in rows:
        record = records[cells["layer"]]
        check = record["check"]
        onnxruntime = float(check.rsplit("max error ", 1)[1].split()[0])
        printed = {"calls": (record["calls"],) if record["calls"] else (),
                   "MACs": (record["macs"],), "instructions": (record["instructions"],)
                   if record["instructions"] else (),
                   "against onnxruntime": (onnxruntime,)}
        problems += [f"models.md:{number}: {column} documents {cells[column]}, the tool "
                     f"prints {want}" for column, want in printed.items()
                     if not figures_agree(cells[column], want)]
        exact = "bit for bit" if check.startswith(FMLAL_ORDER) else "-"
        if cells["kernel against the FMLAL order"] != exact:
            problems.append(f"models.md:{number}: kernel check documents "
                            f"{cells['kernel against the FMLAL order']!r}, the tool {exact!r}")
    assert not problems, "\n".join(problems)


def test_the_documented_check_text_is_conv1_s(fp16_run):
    lines = FLOAT16_TABLE.path.read_text(encoding="utf-8").splitlines()
    start = lines.index("largest value. A tensorized float layer's check column reads, for conv1:")
    fence = lines.index("```text", start)
    assert lines[fence + 1] == fp16_run.records[0]["check"]
