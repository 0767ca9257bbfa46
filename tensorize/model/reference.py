"""The reference: onnxruntime runs the model on the same inputs, every layer's output
exposed.

Each layer's output tensor is added to the graph's outputs, so one run gives every
intermediate. onnxruntime keeps its usual optimisations (its QDQ fusions included: a fused
QLinearConv's output is the quantised tensor the layer produces, which stays visible), on one
thread, as a deployment on this CPU would run it; :func:`fused_nodes` says which nodes it
fused into integer kernels. A model onnxruntime refuses (an operator it does not have, a
parameter its kernel rejects) is an :class:`~ir.onnx.OnnxImportError` naming the file, with
onnxruntime's reason.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np

from ir.onnx import Graph, OnnxImportError
from ir.onnx.errors import onnxruntime_reason, printable

# onnxruntime's integer kernels that QDQ fusion produces on the CPU.
FUSED_KERNELS = frozenset({"QLinearConv", "QGemm", "QLinearMatMul", "QLinearAdd",
                           "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearSoftmax",
                           "QLinearMul", "MatMulIntegerToFloat", "DynamicQuantizeMatMul"})


def _exposed(graph: Graph) -> tuple[object, dict[str, tuple[str, np.ndarray, np.ndarray]]]:
    """The model with every layer's output among its outputs, and, for quantised tensors
    exposed through a DequantizeLinear, how to get the integers back: tensor ->
    (exposed float tensor, scale, zero point).

    A quantised tensor is exposed as the float output of a DequantizeLinear that reads it,
    not itself, so that no fusion has to keep an integer tensor as a graph output (one
    that rewrites it, such as onnxruntime's int8-to-uint8 conversion on x86, would then not
    apply). The integers come back exactly: ``rint(f / scale) + zero_point`` inverts
    ``f = float32(q - zero_point) * scale`` (the quotient is within an ulp of an integer).
    """
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.ModelProto()
    model.CopyFrom(graph.model)
    constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    dequantizers = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] not in dequantizers \
                and len(node.input) > 2 and node.input[1] in constants \
                and node.input[2] in constants and constants[node.input[1]].size == 1:
            dequantizers[node.input[0]] = node
    present = {o.name for o in model.graph.output}
    recover: dict[str, tuple[str, np.ndarray, np.ndarray]] = {}
    for layer in graph.layers:
        name, dtype = layer.output, np.dtype(layer.output_dtype)
        node = dequantizers.get(name) if dtype in (np.int8, np.uint8) else None
        if node is not None and name not in present:
            recover[name] = (node.output[0], constants[node.input[1]],
                             constants[node.input[2]])
            name, dtype = node.output[0], np.dtype(np.float32)
        if name in present:
            continue
        elem = helper.np_dtype_to_tensor_dtype(dtype)
        model.graph.output.append(helper.make_tensor_value_info(
            name, elem, list(layer.output_shape)))
        present.add(name)
    return model, recover


def reference_session(graph: Graph):
    """onnxruntime's session of the model as it is (no output exposed), with the
    reference's settings: the outputs every layer was checked against."""
    return _session(graph.path, graph.model)


def model_session(graph: Graph, threads: int = 1):
    """onnxruntime's session of the model as it is (no output exposed) and as a user runs
    it (onnxruntime's default settings, but for its idle threads' spinning, off) on
    ``threads`` threads: what a timing beside ours runs. (The reference's setting for int8 activations is left out: it keeps every
    fusion when outputs are exposed, but sends int8 x int8 products to slower kernels
    than the uint8 ones onnxruntime picks by default, whose float32 rounding differs in
    places.)"""
    from ir.onnx.reader import require

    require("onnxruntime", "timing the model in onnxruntime")
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    # Idle worker threads spin for a while after a run by default: timed taking turns, they
    # would take the cores the next contender's call runs on.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(graph.model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001  onnxruntime's own error types
        raise _refused(graph.path, err) from None


def _session(path: str, model, optimized: str | None = None):
    from ir.onnx.reader import require

    require("onnxruntime", "checking the model against onnxruntime")
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    # Fatal only: an error comes back as an exception, which our message quotes; its
    # log line (coloured, with a C++ source position) would only repeat it.
    options.log_severity_level = 4
    # Keep int8 activations int8 in the QDQ fusions: by default onnxruntime on x86 converts
    # them to uint8 first, which it cannot do to a tensor the graph outputs, and then leaves
    # those nodes unfused (float32 convolutions between dequantise and quantise). With this
    # entry every QDQ Conv, Gemm and Add fuses into its integer kernel, exposed or not.
    options.add_session_config_entry("session.qdqisint8allowed", "1")
    if optimized is not None:
        options.optimized_model_filepath = optimized
    try:
        return ort.InferenceSession(model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001  onnxruntime's own error types
        raise _refused(path, err) from None


def _refused(path: str, err: Exception) -> OnnxImportError:
    """onnxruntime's refusal of the model at ``path`` as our error, naming the file."""
    return OnnxImportError(f"{path}: onnxruntime, the reference, cannot run the model: "
                           f"{printable(onnxruntime_reason(err))}")


def run_reference(graph: Graph, inputs: Mapping[str, np.ndarray],
                  phase: Callable[[str], AbstractContextManager[object]] | None = None
                  ) -> dict[str, np.ndarray]:
    """Every layer's output (and the graph's outputs) as onnxruntime computes them.
    ``phase`` (a progress hook, as :mod:`tensorize.cli.progress` makes) wraps onnxruntime's
    session and run, which take seconds for a whole network and say nothing meanwhile."""
    model, recover = _exposed(graph)
    names = [o.name for o in model.graph.output]
    with (phase or _no_phase)(f"onnxruntime's reference run of {Path(graph.path).name}"):
        session = _session(graph.path, model)
        try:
            results = dict(zip(names, session.run(names, dict(inputs))))
        except Exception as err:  # noqa: BLE001  onnxruntime's own error types
            raise _refused(graph.path, err) from None
    for tensor, (exposed, scale, zero_point) in recover.items():
        quotient = results[exposed] / np.asarray(scale, np.float32)
        results[tensor] = (np.rint(quotient).astype(np.int32)
                           + zero_point.astype(np.int32)).astype(zero_point.dtype)
    return results


def _no_phase(what: str) -> AbstractContextManager[object]:
    return nullcontext()


def fused_nodes(graph: Graph) -> dict[str, str]:
    """Node name (printable, as the layers name it) -> the integer kernel onnxruntime fused
    it into (QLinearConv, QGemm, ...), read from the model onnxruntime optimises for this
    CPU (intermediates exposed, as the reference runs it)."""
    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "optimized.onnx")
        _session(graph.path, _exposed(graph)[0], path)
        optimized = onnx.load(path)
    fused: dict[str, str] = {}
    for node in optimized.graph.node:
        if node.op_type in FUSED_KERNELS:
            fused[printable(_original_name(node.name))] = node.op_type
    return fused


def _original_name(name: str) -> str:
    """onnxruntime names a fused node after the float node with a ``_token_N`` suffix."""
    head, sep, _ = name.rpartition("_token_")
    return head if sep else name
