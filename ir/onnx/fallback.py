"""A node of an operator the importer has no function for, run on the host by onnxruntime.

The node becomes a one-node model (its constant inputs as initializers, the opsets and
functions of the original model) with one session, made on first use and kept; the layer is
marked ``fallback`` so the report shows it ran on the host, and why. A node with several
outputs in use (TopK's values and indices) becomes one layer per output; the layers share the
session, and the node runs once for each set of inputs: the outputs of its last run are kept
beside the inputs they were computed from, and a layer given those same arrays takes its
output from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ir.onnx.errors import OnnxImportError, onnxruntime_reason, printable
from ir.onnx.host_ops import HostFn
from ir.onnx.reader import NodeView


def ort_node(node: NodeView, activations: Sequence[str], constants: Mapping[str, np.ndarray],
             model, outputs: Sequence[str], where: str) -> tuple[HostFn, ...]:
    """One host function per tensor of ``outputs``, each running ``node`` in onnxruntime on
    its ``activations`` (in order) and returning that output. ``where`` names the model and
    node in the error raised when onnxruntime refuses the node."""
    session: list = []
    last: list[tuple[tuple[np.ndarray, ...], dict[str, np.ndarray]]] = []

    def results(arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        given = tuple(arrays)
        if last and len(last[0][0]) == len(given) \
                and all(a is b for a, b in zip(last[0][0], given)):
            return last[0][1]
        if not session:
            session.append(_session(node, activations, given, constants, model, outputs,
                                    where))
        feeds = {name: array for name, array in zip(activations, given)}
        try:
            values = session[0].run(list(outputs), feeds)
        except Exception as err:  # noqa: BLE001  onnxruntime's own error types
            raise OnnxImportError(f"{where} failed in onnxruntime: "
                                  f"{printable(onnxruntime_reason(err))}") from None
        computed = dict(zip(outputs, values))
        if len(outputs) > 1:  # the other outputs' layers come next, with these arrays
            last[:] = [(given, computed)]
        return computed

    def output(name: str) -> HostFn:
        return lambda arrays: results(arrays)[name]

    return tuple(output(name) for name in outputs)


def _session(node: NodeView, activations: Sequence[str], arrays: Sequence[np.ndarray],
             constants: Mapping[str, np.ndarray], model, outputs: Sequence[str], where: str):
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            list(a.shape))
              for name, a in zip(activations, arrays)]
    initializers = [numpy_helper.from_array(constants[t], t) for t in node.inputs
                    if t and t in constants]
    values = []
    for name in outputs:
        value = onnx.ValueInfoProto()
        value.name = name
        values.append(value)
    graph = helper.make_graph([node.proto], f"fallback_{node.name}", inputs, values,
                              initializers)
    single = helper.make_model(graph, opset_imports=list(model.opset_import),
                               ir_version=model.ir_version, functions=list(model.functions))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    # Fatal only: an error comes back as an exception, which our message quotes; its
    # log line (coloured, with a C++ source position) would only repeat it.
    options.log_severity_level = 4
    try:
        return ort.InferenceSession(single.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001  onnxruntime's own error types
        raise OnnxImportError(f"{where} cannot run in onnxruntime: "
                              f"{printable(onnxruntime_reason(err))}") from None
