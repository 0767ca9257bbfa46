"""ONNX models as sweep workloads: a ``model: FILE`` entry of a sweep file, with an optional
``select:`` filter.

```yaml
workloads:
  - model: resnet50_int8.onnx
    select: {op: Conv, window: 3x3}      # optional: only the 3x3 convolutions
```

The model is imported once, where the sweep is read (:func:`ir.onnx.import_model`). Each of
its GEMM-like layers (a layer with a PrimFunc: a convolution or matrix product, which a
target can tensorize) that the filter keeps becomes a workload; layers whose kernels are the
same function (the importer builds one kernel per shape) become one workload, with the
count of layers that share it, so a network's repeated blocks are simulated once per
machine. A workload is named ``MODEL:LAYER`` after the model file's stem and the first
layer that has its kernel.

The kernel travels to the workers as its printed script text, which a worker parses back
(print then parse gives an equal function), so workers need neither the model file nor the
``onnx`` package. Its point key hashes the model's path and that text.

A model's rows add up per machine to the model's total (:mod:`tensorize.sweep.model_totals`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from intrinsics.source import Findings, YNode
from ir import PrimFunc, TensorizeError
from tensorize.sweep.workloads import Workload, parse_kernel_text, unknown_keys

# What ``select:`` may test, each given one value or a list of them (any may match; every
# key given must match): the op type, the convolution window, the layer name (a pattern).
SELECT_KEYS = ("op", "window", "name")
# A window as layers describe it: ``3x3``, optionally with its stride (``3x3 s2``).
_WINDOW = re.compile(r"\d+x\d+( s\d+)?")


def read_model(node: YNode, base: Path, findings: Findings) -> list[Workload]:
    """A ``model: FILE`` entry (with ``select:``): one workload per distinct GEMM-like
    layer of the model that the filter keeps."""
    unknown_keys(node, ("model", "select"), findings)
    path_node = node.get("model")
    if path_node is None or not isinstance(path_node.value, str):
        findings.add(node.at("model"), "workloads[].model requires an ONNX model file path")
        return []
    select = _read_select(node.get("select"), findings)
    if select is None:
        return []
    path = (base / path_node.value).resolve()
    from ir.onnx import import_model

    try:
        graph = import_model(path)
    except TensorizeError as err:
        findings.add(path_node.loc, f"workloads[].model: {err.message}")
        return []
    gemms = [layer for layer in graph.layers if layer.func is not None]
    if not gemms:
        findings.add(path_node.loc, f"workloads[].model requires a model with a convolution "
                                    f"or matrix product, got none among the "
                                    f"{len(graph.layers)} layers of {path_node.value}")
        return []
    chosen = [layer for layer in gemms if _selected(layer, select)]
    if not chosen:
        ops = ", ".join(sorted({layer.op for layer in gemms}))
        findings.add(node.at("select"), f"workloads[].select requires a filter that keeps a "
                                        f"layer, got none of the {len(gemms)} GEMM-like "
                                        f"layers of {path_node.value} (their ops: {ops})")
        return []
    return model_workloads(path, chosen)


def model_workloads(path: Path, layers: Sequence[Any]) -> list[Workload]:
    """One workload per distinct kernel among ``layers`` (``ir.onnx.Layer`` values with a
    PrimFunc) of the model at ``path``, in the order of their first layer."""
    from ir.printer import print_node

    groups: dict[str, list[Any]] = {}
    for layer in layers:
        groups.setdefault(print_node(layer.func), []).append(layer)
    workloads = []
    for text, group in groups.items():
        first = group[0]
        digest = hashlib.sha256(text.encode()).hexdigest()
        info = (("model", path.name), ("layers", tuple(layer.name for layer in group)),
                ("count", len(group)), ("op", first.op), ("shape", first.shape_text),
                ("macs", first.macs))
        workloads.append(Workload(f"{path.stem}:{first.name}", "model",
                                  (("model", str(path)), ("sha256", digest)), text, info))
    return workloads


def build_model_layer(workload: Workload) -> PrimFunc:
    """A ``model`` workload's kernel, parsed from the text it carries."""
    return parse_kernel_text(workload.source, "a model layer")


def _read_select(node: YNode | None, findings: Findings) -> dict[str, tuple[str, ...]] | None:
    """The filter, each key's values as a tuple (empty: keep every layer); None when it has
    a problem (reported)."""
    if node is None:
        return {}
    if not node.is_mapping or not node.value:
        findings.add(node.loc, f"workloads[].select requires a mapping of "
                               f"{', '.join(SELECT_KEYS)} to a value or a list of values")
        return None
    before = len(findings)
    unknown_keys(node, SELECT_KEYS, findings)
    select = {}
    for key in SELECT_KEYS:
        child = node.get(key)
        if child is None:
            continue
        items = child.value if child.is_sequence else [child]
        bad = [item for item in items if not isinstance(item.value, str) or not item.value]
        if bad or not items:
            findings.add(bad[0].loc if bad else child.loc,
                         f"workloads[].select.{key} requires text or a list of text, got "
                         f"{child.plain()!r}")
            continue
        if key == "window":
            for item in items:
                if not _WINDOW.fullmatch(item.value):
                    findings.add(item.loc, f"workloads[].select.window requires a window "
                                           f"such as 3x3 or 3x3 s2, got {item.value!r}")
        select[key] = tuple(item.value for item in items)
    return select if len(findings) == before else None


def _selected(layer: Any, select: dict[str, tuple[str, ...]]) -> bool:
    """Whether ``layer`` passes every key of the filter: its op (``Conv`` also matches the
    QDQ form ``QDQ Conv``), its window (its detail starts with it), its name (a pattern)."""
    tests = {
        "op": lambda v: v in (layer.op, layer.op.removeprefix("QDQ ")),
        "window": lambda v: layer.detail == v or layer.detail.startswith(f"{v} "),
        "name": lambda v: fnmatch.fnmatchcase(layer.name, v),
    }
    return all(any(tests[key](value) for value in values) for key, values in select.items())
