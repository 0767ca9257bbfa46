"""Residual joins: where a quantised add (onnxruntime's QLinearAdd) can be computed by the
layer that produces its first operand, in that layer's kernel (``FusedGemm.joined``), so the
layer's output never leaves the device that computes it.

A join needs: the add of two activations with one scale each (:attr:`Layer.qadd`), int8
out; its first operand the int8 output of a layer with a fused form that can take a skip
tile (:attr:`FusedGemm.output_rows`), read by the add alone and not a model output; the
second operand (the skip) of the same shape, produced before that layer, so it exists
when the joined layer runs. The first operand matters: QLinearAdd's fused multiply-adds
take the operands in order, so the joined kernel is exact for its first one only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ir.onnx.graph import Graph


@dataclass(frozen=True, slots=True)
class Join:
    """The layer at ``layer`` takes the add at ``add`` (indices into the graph's layers)."""

    layer: int
    add: int


def residual_joins(graph: Graph) -> list[Join]:
    """Every join the graph allows (module docs), in layer order."""
    producer = {layer.output: index for index, layer in enumerate(graph.layers)}
    readers: dict[str, int] = {}
    for layer in graph.layers:
        for name in set(layer.inputs):
            readers[name] = readers.get(name, 0) + 1
    outputs = {info.name for info in graph.outputs}
    joins = []
    for index, add in enumerate(graph.layers):
        if add.qadd is None or add.output_dtype != "int8" or len(add.inputs) != 2:
            continue
        first, skip = add.inputs
        at = producer.get(first)
        if at is None or readers.get(first) != 1 or first in outputs:
            continue
        layer = graph.layers[at]
        if layer.fused is None or layer.fused.output_rows is None or \
                layer.output_dtype != "int8" or add.input_shapes[0] != add.input_shapes[1]:
            continue
        if producer.get(skip, -1) < at:
            joins.append(Join(at, index))
    return joins
