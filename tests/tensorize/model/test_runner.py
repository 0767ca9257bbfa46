"""The model runner: a small network run layer by layer on host, npu and arm, every layer
checked against onnxruntime, one record per layer in the report's schema."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ir.onnx import import_model
from tensorize.model import run_model
from tensorize.model.report import validate_records
from tests.ir.onnx import models
from tensorize.model.executors import run_on_host


@pytest.fixture(scope="module")
def cnn_int8(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cnn")
    qdq = models.quantize(models.small_cnn(size=16), folder)
    return import_model(models.save(qdq, folder, "cnn_int8.onnx"))


def test_host_float_network_within_tolerance(tmp_path, context):
    graph = import_model(models.save(models.small_cnn(), tmp_path, "cnn.onnx"))
    run = run_model(graph, context("host", seed=3))
    validate_records(run.records)
    assert run.ok and run.tensorized == 0
    assert all(r["check"].startswith("max error") for r in run.records)
    assert {r["placement"] for r in run.records} == {"host"}
    assert run.totals["macs"] == graph.macs > 0 and run.roofline is None


def test_host_qdq_network_exact(cnn_int8, context):
    seen = []
    run = run_model(cnn_int8, context("host"),
                    progress=lambda i, n, layer, rec: seen.append(i))
    assert run.ok and seen == list(range(len(cnn_int8.layers)))
    assert [r["check"] for r in run.records[:-1]] == ["exact"] * (len(run.records) - 1)
    assert len(run.notes) == len(run.records)


def test_npu_tensorizes_convolutions_exact(cnn_int8, context):
    run = run_model(cnn_int8, context("npu"))
    validate_records(run.records)
    assert run.ok
    convs = [r for r in run.records if r["op"].startswith("QDQ Conv")]
    assert len(convs) == 2
    for conv in convs:
        assert conv["placement"] == "tensorized" and conv["intrinsic"] == "npu_gemm"
        assert conv["calls"] > 0 and conv["cycles"] > 0 and conv["dram_bytes"] > 0
        assert 0 < conv["utilisation"] <= 1 and conv["bound"] in ("compute", "memory")
        assert conv["check"] == "exact"
    hosted = [r for r in run.records if r["placement"] == "host"]
    assert hosted and all(r["why_not"] for r in hosted)
    assert run.roofline == {"peak_macs_per_cycle": 256, "dram_bytes_per_cycle": 32.0}
    assert run.totals["tensorized"] >= 2 and run.totals["cycles"] == sum(
        r["cycles"] for r in run.records if r["cycles"])


def test_npu_records_name_each_figure_apart(cnn_int8, context, machine):
    run = run_model(cnn_int8, context("npu"))
    ridge = 256 / 32.0
    assert run.machine["name"] == machine.name and run.machine["rows"] == 16
    for record in run.records:
        assert record["tool_s"] > 0
        if record["placement"] != "tensorized":
            assert record["executed_macs"] is None and record["sim_s"] is None
            continue
        # Executed MACs: every npu_gemm call is a full 16x16x16 tile, padding included; a
        # layer on the vector unit executes none on the array.
        if record["intrinsic"].startswith("npu_gemm"):
            assert record["executed_macs"] == record["calls"] * 16 * 16 * 16 >= record["macs"]
            assert record["pad"] == round(1 - record["macs"] / record["executed_macs"], 4)
        else:
            assert record["executed_macs"] is None and record["pad"] is None
            assert record["macs"] == 0
        # Simulated time is the cycles at the machine's clock; the tool's time is its own.
        assert record["sim_s"] == pytest.approx(record["cycles"] / (machine.clock_mhz * 1e6))
        assert record["run_s"] is None
        # The bound is the side of the ridge the layer's own roofline point lies on.
        if not record["macs"]:
            assert record["bound"] is None
            continue
        intensity = record["macs"] / record["dram_bytes"]
        assert record["intensity"] == pytest.approx(intensity)
        assert record["bound"] == ("memory" if intensity < ridge else "compute")
    assert run.totals["sim_s"] == pytest.approx(run.totals["cycles"] / (machine.clock_mhz * 1e6))


def test_npu_float_network_falls_back_with_reason(tmp_path, context):
    graph = import_model(models.save(models.small_cnn(size=8), tmp_path, "cnn.onnx"))
    run = run_model(graph, context("npu"))
    assert run.ok and run.tensorized == 0
    conv = next(r for r in run.records if r["op"] == "Conv")
    assert conv["placement"] == "fallback" and "float32" in conv["why_not"]


def test_arm_counts_instructions_exact(cnn_int8, context):
    run = run_model(cnn_int8, context("arm"))
    assert run.ok
    convs = [r for r in run.records if r["op"] == "QDQ Conv"]
    assert all(r["placement"] == "tensorized" and r["instructions"] > 0 for r in convs)
    # An sdot computes 4 x 4 MACs: the executed work, padding included.
    assert all(r["executed_macs"] == 16 * r["calls"] >= r["macs"] for r in convs)
    assert run.machine == {"kind": "cpu", "name": "arm", "features": "+neon,+dotprod"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "mobilenetv2", "bert_layer"])
def test_example_networks_exact_on_npu(tmp_path, name, context):
    from tensorize.model import networks

    built = networks.quantize(getattr(networks, name)(**networks.SMALL[name]))
    run = run_model(import_model(models.save(built, tmp_path, f"{name}.onnx")), context("npu"))
    assert run.ok, [r["check"] for r in run.records if "MISMATCH" in r["check"]]
    assert run.tensorized > 0


def test_x86_compiles_each_epilogue_into_its_kernel(cnn_int8, context):
    run = run_model(cnn_int8, context("x86"))
    assert run.ok
    convs = [(r, note) for r, note in zip(run.records, run.notes) if r["op"] == "QDQ Conv"]
    assert convs
    for conv, note in convs:
        if conv["placement"] == "tensorized":
            assert conv["intrinsic"].startswith("x86_") and conv["run_s"] > 0
            assert "bias and requantisation compiled into the kernel" in note
        else:  # a host without AVX-512 VNNI cannot run the kernel, and says so
            assert "not runnable here" in conv["why_not"]


def test_uint8_variant_matches_the_int8_kernel(cnn_int8):
    import numpy as np

    conv = next(layer for layer in cnn_int8.layers if layer.op == "QDQ Conv")
    variant, = conv.variants
    assert variant.func.params[0].dtype.name == "uint8"
    x = np.random.default_rng(5).integers(-128, 128, conv.input_shapes[0]).astype(np.int8)
    assert np.array_equal(run_on_host(conv, [x]), run_on_host(variant, [x]))


def test_a_convolution_with_one_output_pixel_is_tensorized(tmp_path, context):
    # 3x3 input, 3x3 window, no padding: one output pixel, which the kernel computes with
    # one more column (dropped again) so the GEMM keeps a row iterator.
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="last")]
    float_model = models.model(nodes, [("x", TensorProto.FLOAT, [1, 8, 3, 3])],
                               [("y", TensorProto.FLOAT, [1, 16, 1, 1])],
                               [models.weights(rng, "w", (16, 8, 3, 3))])
    graph = import_model(models.save(models.quantize(float_model, tmp_path), tmp_path,
                                     "pixel.onnx"))
    run = run_model(graph, context("npu"))
    conv = next(r for r in run.records if r["op"] == "QDQ Conv")
    assert conv["placement"] == "tensorized" and conv["check"] == "exact"
    assert conv["macs"] == 16 * 8 * 3 * 3 and run.ok


@pytest.fixture(scope="module")
def npu_fused_and_not(cnn_int8, context):
    return run_model(cnn_int8, context("npu")), run_model(cnn_int8, context("npu"),
                                                          fusion=False)


def test_npu_runs_each_layer_epilogue_on_the_vector_unit(npu_fused_and_not):
    run, _ = npu_fused_and_not
    assert run.ok
    fused = {r["name"]: note for r, note in zip(run.records, run.notes)
             if r["op"].startswith(("QDQ Conv", "QDQ Gemm"))}
    assert all(r["placement"] == "tensorized" and r["check"] == "exact"
               for r in run.records if r["name"] in fused)
    # The residual add joins the convolution producing its first operand, whose windows
    # the program's loads gather from the image (an implicit GEMM: no im2col on the host).
    joined = fused.pop("conv2 + add2")
    assert "bias, requantisation and the residual add on the vector unit, in the program" \
        in joined
    assert "copies done by the program's loads and stores: im2col" in joined
    assert "im2col) in the pack" not in joined
    assert len(fused) == 2
    for note in fused.values():
        assert "bias and requantisation on the vector unit, in the program" in note
        assert "host: int32 bias" not in note


def test_npu_runs_the_pools_on_the_device(npu_fused_and_not):
    run, _ = npu_fused_and_not
    records = {r["name"]: (r, note) for r, note in zip(run.records, run.notes)}
    pool, note = records["pool1"]
    assert pool["placement"] == "tensorized" and pool["check"] == "exact"
    assert pool["intrinsic"] == "npu_vec_max_i8" and "a program of its own" in note
    gap, note = records["gap"]
    assert gap["placement"] == "tensorized" and gap["check"] == "exact"
    assert gap["intrinsic"] == "npu_gemm_reset" and "column of ones" in note
    # What stays on the host: the float boundary and a reshape.
    assert {r["op"] for r in run.records if r["placement"] == "host"} == {
        "QuantizeLinear", "QDQ Flatten", "DequantizeLinear"}


def test_without_fusion_each_epilogue_is_a_program_of_its_own(npu_fused_and_not):
    fused, unfused = npu_fused_and_not
    assert unfused.ok
    without = {r["name"]: (r, note) for r, note in zip(unfused.records, unfused.notes)}
    for name in ("conv1", "fc"):
        with_fusion = next(r for r in fused.records if r["name"] == name)
        record, note = without[name]
        assert record["placement"] == "tensorized" and record["check"] == "exact"
        assert "without fusion" in note
        # The int32 sums go out to DRAM and come back: more bytes, more cycles.
        assert record["dram_bytes"] > with_fusion["dram_bytes"]
        assert record["cycles"] > with_fusion["cycles"]
    # Without fusion the add is a layer of its own again, a program of its own.
    assert "conv2" in without and not any("+" in r["name"] for r in unfused.records)
    add, note = without["add2"]
    assert add["placement"] == "tensorized" and add["intrinsic"] == "npu_vec_qadd"
    assert add["check"] == "exact" and "on the vector unit, a program of its own" in note


def test_a_machine_without_requantisation_keeps_the_epilogue_on_the_host(cnn_int8, context,
                                                                         machine):
    from dataclasses import replace

    plain = replace(machine, name="npu-no-requant", requant=None)
    run = run_model(cnn_int8, context("npu", machine=plain))
    assert run.ok
    convs = [note for r, note in zip(run.records, run.notes) if r["op"] == "QDQ Conv"]
    assert convs and all(
        "epilogue on the host: no vector instruction of npu-no-requant computes block "
        "requantised" in note for note in convs)
