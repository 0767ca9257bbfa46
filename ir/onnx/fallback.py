"""A node of an operator the importer has no function for, run on the host by onnxruntime.

The node becomes a one-node model (its constant inputs as initializers, the opsets of the
original model) with one session, made on first use and kept; the layer is marked
``fallback`` so the report shows it ran on the host, and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ir.onnx.host_ops import HostFn
from ir.onnx.reader import NodeView


def ort_node(node: NodeView, activations: Sequence[str], constants: Mapping[str, np.ndarray],
             model) -> HostFn:
    """A host function running ``node`` in onnxruntime on its ``activations`` (in order)."""
    session: list = []

    def run(arrays: Sequence[np.ndarray]) -> np.ndarray:
        if not session:
            session.append(_session(node, activations, arrays, constants, model))
        feeds = {name: array for name, array in zip(activations, arrays)}
        return session[0].run([node.outputs[0]], feeds)[0]

    return run


def _session(node: NodeView, activations: Sequence[str], arrays: Sequence[np.ndarray],
             constants: Mapping[str, np.ndarray], model):
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            list(a.shape))
              for name, a in zip(activations, arrays)]
    initializers = [numpy_helper.from_array(constants[t], t) for t in node.inputs
                    if t and t in constants]
    output = onnx.ValueInfoProto()
    output.name = node.outputs[0]
    graph = helper.make_graph([node.proto], f"fallback_{node.name}", inputs, [output],
                              initializers)
    single = helper.make_model(graph, opset_imports=list(model.opset_import),
                               ir_version=model.ir_version)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(single.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
