"""A network's NPU layers linked into one program per stage: every layer exact against
onnxruntime on what it left in the stage's DRAM image, a stage ending where the host must lay
an input out anew, and the layers' figures adding up to the stage's."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ir.errors import TensorizeError
from ir.onnx import import_model
from tensorize.model import networks, run_model
from tensorize.model.executors import DeviceForm, NpuExecutor
from tensorize.model.npu_stages import _Member, _source, same_bytes
from tests.ir.onnx import models


@pytest.fixture(scope="module")
def resnet(tmp_path_factory, context):
    """A small ResNet-50 (one bottleneck per stage), run per layer and per stage."""
    built = networks.quantize(networks.resnet50(**networks.SMALL["resnet50"]))
    path = models.save(built, tmp_path_factory.mktemp("stages"), "resnet50.onnx")
    graph = import_model(path)
    ctx = context("npu")
    return graph, ctx, run_model(graph, ctx), run_model(graph, ctx, programs="stage")


def test_every_layer_of_a_staged_run_is_exact(resnet):
    _, _, _, staged = resnet
    assert staged.ok
    assert all(r["check"] == "exact" for r in staged.records if r["placement"] == "tensorized")
    assert any(len(stage.layers) >= 3 for stage in staged.stages)


def test_a_stages_layers_are_consecutive_and_add_up_to_its_program(resnet):
    _, _, _, staged = resnet
    cycles = {r["index"]: r["cycles"] for r in staged.records}
    for stage in staged.stages:
        assert list(stage.layers) == list(range(stage.layers[0], stage.layers[-1] + 1))
        assert sum(cycles[i] for i in stage.layers) == stage.cycles


def test_linking_moves_the_same_bytes_in_fewer_cycles(resnet):
    # The same programs, each layer's transfers moved, not changed; the seams overlap.
    _, _, alone, staged = resnet
    for ours, theirs in zip(staged.records, alone.records):
        assert (ours["name"], ours["dram_bytes"]) == (theirs["name"], theirs["dram_bytes"])
    linked = [i for stage in staged.stages if len(stage.layers) > 1 for i in stage.layers]
    assert sum(staged.records[i]["cycles"] for i in linked) < \
        sum(alone.records[i]["cycles"] for i in linked)


def test_a_stage_ends_where_an_input_needs_the_host(resnet):
    # A 3x3 convolution reads its input as a padded image (or as rows the host gathers),
    # which no earlier kernel stores.
    _, _, _, staged = resnet
    last = len(staged.records) - 1
    for stage in staged.stages:
        if stage.ends is None:
            assert stage.layers[-1] == last
            continue
        after = staged.records[stage.layers[-1] + 1]
        assert stage.ends.startswith(f"layer {after['index']} {after['name']} ")
        if "3x3" in after["shape"]:
            assert "needs the host to lay out" in stage.ends
            assert "its kernel reads " in stage.ends


def test_a_layer_reading_an_earlier_members_output_says_so(resnet):
    _, _, _, staged = resnet
    reading = [n for n in staged.notes if n and "where it lies in DRAM" in n]
    assert reading and all(n.startswith("stage ") for n in reading)


def test_only_a_layout_that_keeps_every_byte_is_read_in_place(tmp_path, context):
    graph = import_model(models.save(models.quantize(bottleneck(), tmp_path), tmp_path,
                                     "bottleneck.onnx"))
    executor = NpuExecutor(context("npu"))
    members = {}
    for index, layer in enumerate(executor.prepare(graph).layers):
        choice = executor.device_form(layer)
        if isinstance(choice, DeviceForm):
            members[layer.name] = _Member(index, layer, choice)

    def x_of(name):
        form = members[name].choice.form
        (x,) = [p for p in form.func.params if p.name == "X"]
        return form, x, _source(form, "X")[1]

    # The 3x3 convolution's padded image is not the 1x1 convolution's rows ...
    form, x, layout = x_of("conv1")
    assert x.shape == (1, 10, 10, 16)
    assert not same_bytes(members["conv0"], form, x, layout)
    # ... its own rows are what the 1x1 convolution after it reads as they lie ...
    form, x, layout = x_of("conv2")
    assert same_bytes(members["conv1"], form, x, layout)
    # ... and transposed, would not be.
    assert not same_bytes(members["conv1"], form, x,
                          lambda t: np.ascontiguousarray(layout(t).transpose(0, 2, 1, 3)))


def test_stages_require_an_npu_run_with_fusion(resnet, context):
    graph, _, _, _ = resnet
    with pytest.raises(TensorizeError, match="programs per stage require an NPU target"):
        run_model(graph, context("host"), programs="stage")
    with pytest.raises(TensorizeError, match="with fusion off"):
        run_model(graph, context("npu"), fusion=False, programs="stage")
    with pytest.raises(ValueError, match="programs in"):
        run_model(graph, context("npu"), programs="network")


def bottleneck(size: int = 8, channels: int = 16):
    """1x1, 3x3 (padded) and 1x1 convolutions with ReLUs, ``channels`` wide throughout."""
    rng = np.random.default_rng(11)
    nodes, inits, x = [], [], "x"
    for n, kernel in enumerate((1, 3, 1)):
        pads = [kernel // 2] * 4
        nodes += [helper.make_node("Conv", [x, f"w{n}", f"b{n}"], [f"c{n}"], name=f"conv{n}",
                                   pads=pads),
                  helper.make_node("Relu", [f"c{n}"], [f"r{n}"], name=f"relu{n}")]
        inits += [models.weights(rng, f"w{n}", [channels, channels, kernel, kernel]),
                  models.weights(rng, f"b{n}", [channels])]
        x = f"r{n}"
    nodes[-1] = helper.make_node("Relu", ["c2"], ["y"], name="relu2")
    shape = [1, channels, size, size]
    return models.model(nodes, [("x", TensorProto.FLOAT, shape)],
                        [("y", TensorProto.FLOAT, shape)], inits)


def three_convolutions_linked(built, tmp_path, context):
    """``built`` (a float model of three convolutions) quantised and run per stage, checked
    exact with its convolutions in one stage: the run and the convolutions' indices."""
    graph = import_model(models.save(models.quantize(built, tmp_path), tmp_path, "m.onnx"))
    run = run_model(graph, context("npu"), programs="stage")
    assert run.ok
    convs = [r["index"] for r in run.records if r["op"].startswith("QDQ Conv")]
    assert len(convs) == 3 and all(run.records[i]["check"] == "exact" for i in convs)
    (stage,) = [s for s in run.stages if convs[0] in s.layers]
    assert set(convs) <= set(stage.layers)
    return run, convs


def test_a_convolution_stores_into_the_next_ones_padded_input(tmp_path, context):
    # The 3x3 convolution reads a padded image: the 1x1 convolution before it stores its
    # output into that image's interior, the 3x3's pack fills the halo, and the three
    # convolutions are one program.
    run, convs = three_convolutions_linked(bottleneck(), tmp_path, context)
    assert "stored into the next convolution's padded input" in run.notes[convs[0]]
    assert f"reads the output of {run.records[convs[0]]['name']}" in run.notes[convs[1]]


def test_a_stage_ends_before_its_image_would_pass_the_dram_addresses(tmp_path, context,
                                                                      monkeypatch):
    from tensorize.model import npu_stages

    graph = import_model(models.save(models.quantize(bottleneck(), tmp_path), tmp_path,
                                     "bottleneck.onnx"))
    monkeypatch.setattr(npu_stages, "DRAM_SPAN", 1)
    run = run_model(graph, context("npu"), programs="stage")
    assert run.ok
    assert all(len(stage.layers) == 1 for stage in run.stages)
    assert any("past the 1 bytes a transfer can address" in (s.ends or "")
               for s in run.stages)


def inverted_residual(size: int = 8):
    """MobileNet-v2's block: 1x1 expansion of 16 to 32 channels, depthwise 3x3 (pad 1),
    1x1 projection back to 16, with ReLUs after the first two."""
    rng = np.random.default_rng(12)
    nodes = [helper.make_node("Conv", ["x", "we", "be"], ["e"], name="expand"),
             helper.make_node("Relu", ["e"], ["re"], name="relu_e"),
             helper.make_node("Conv", ["re", "wd", "bd"], ["d"], name="depthwise", group=32,
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["d"], ["rd"], name="relu_d"),
             helper.make_node("Conv", ["rd", "wp", "bp"], ["y"], name="project")]
    inits = [models.weights(rng, name, shape) for name, shape in (
        ("we", [32, 16, 1, 1]), ("be", [32]), ("wd", [32, 1, 3, 3]), ("bd", [32]),
        ("wp", [16, 32, 1, 1]), ("bp", [16]))]
    return models.model(nodes, [("x", TensorProto.FLOAT, [1, 16, size, size])],
                        [("y", TensorProto.FLOAT, [1, 16, size, size])], inits)


def test_a_depthwise_layer_gathers_its_windows_to_join_a_stage(tmp_path, context):
    # Per layer, the depthwise layer's windows are gathered by its pack; in a stage the
    # expansion stores into its padded input, its loads gather the windows, and its stores
    # lay its channel groups out as the projection reads them: one program of three.
    run, convs = three_convolutions_linked(inverted_residual(), tmp_path, context)
    expand, depthwise, _ = (run.notes[i] for i in convs)
    assert "stored into the next convolution's padded input" in expand
    assert "the windows gathered by the program's loads" in depthwise
    assert "stored in the next convolution's input layout" in depthwise
