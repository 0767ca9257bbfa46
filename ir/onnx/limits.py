"""How big a model the importer reads: bounds that keep a hostile or broken file from taking
the machine's memory or time, in the spirit of ``intrinsics/limits.py``.

Each is far above what a real network needs: ResNet-50 in float is about 100 MB and 180
nodes (int8 QDQ: about 26 MB and 600 nodes); a BERT-base layer is a few hundred nodes.
"""

# Bytes of the .onnx file: read whole into memory by onnx's protobuf parser.
MAX_MODEL_BYTES = 1 << 30

# Nodes of the graph: each becomes at most one layer, compiled and run one after another.
MAX_NODES = 20_000

# Elements of one tensor (an input, a weight or an intermediate): the runner holds several
# copies of each, in several layouts. 2**28 int8 elements is 256 MiB.
MAX_TENSOR_ELEMENTS = 1 << 28
