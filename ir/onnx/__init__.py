"""The ONNX front end: an ONNX model file imported as a graph of layers in our IR.

.. code-block:: python

    from ir.onnx import import_model
    graph = import_model("resnet50_int8.onnx")
    for layer in graph.layers:
        print(layer.name, layer.op, layer.shape_text, layer.macs)

Each operator has one function (:mod:`.linear` for Conv, MatMul, Gemm and their integer
forms, built with the TE builder in :mod:`.kernels`; :mod:`.host_ops` for the elementwise,
pool, shape, Split and Softmax operators, which run on the host); the QDQ pattern of
onnxruntime's static quantization is recognised as one integer layer with requantisation
(:mod:`.importer`, arithmetic in :mod:`.quant`). Any other operator runs on the host through
onnxruntime (:mod:`.fallback`, shapes by :mod:`.inference` where onnx's do not reach).
Reading is bounded (:mod:`.limits`) and checked: opsets, operator domains and quantisation
parameters are refused naming the file and the node when nothing could run them.
"""

from ir.onnx.errors import OnnxImportError, UnsupportedOperatorError
from ir.onnx.graph import Graph, Layer, TensorInfo
from ir.onnx.importer import QDQ_OPS, import_model

__all__ = ["QDQ_OPS", "Graph", "Layer", "OnnxImportError", "TensorInfo",
           "UnsupportedOperatorError", "import_model"]
