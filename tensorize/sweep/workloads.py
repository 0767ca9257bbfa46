"""The workloads of a sweep: what each machine runs.

A workload is a picklable value that a worker turns into a PrimFunc (:meth:`Workload.build`).
Its kinds, by the key that introduces it in the sweep file:

- ``kernel: FILE`` (``func: NAME`` picks one of several; ``name: NAME`` names the workload in
  reports, by default the function's name): a kernel file as ``tensorize run`` reads it, once, in the sweep's own process. The kernel travels to the workers as printed
  script text, which a worker parses and never executes: no file is read or run on a worker
  because of its name or path (docs/trust.md).
- ``layers: [...]``: layers given by shape, built with the TE builder: ``gemm: {m, n, k}``
  and ``conv2d: {height, width, channels, out_channels, kernel}`` (NHWC, HWIO weights, int8
  into int32, stride 1, no padding: give the padded input size for a padded layer).
- ``model: FILE`` (``select:`` filters its layers): an ONNX model, one workload per distinct
  GEMM-like layer (:mod:`tensorize.sweep.model_workloads`).

Kinds plug in through two tables: :data:`KINDS`, a reader per sweep-file key (taking the
entry's YAML node, the sweep file's directory and the findings, and returning workloads),
and :data:`BUILDERS`, how a worker builds a workload of that kind.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from intrinsics.source import Findings, YNode
from ir import PrimFunc, TensorizeError

# A layer's sizes: each between 1 and this (a sweep point simulates the whole layer).
MAX_EXTENT = 1 << 16
# A kernel entry's name: (it names rows, plots and the model totals).
WORKLOAD_NAME = re.compile(r"[\w.-]+")


@dataclass(frozen=True)
class Workload:
    """One workload: ``name`` in reports; ``kind`` ``kernel``, ``layer`` or ``model``;
    ``spec`` its identity (a kernel's path, func and text digest; a layer's op and sizes; a
    model layer's model path and kernel digest), which the point key hashes; ``source`` a
    kernel file's text, or a model layer's kernel as script text; ``info`` what reports
    say beside the name and the key does not hash (a model layer's model file, the names of
    the layers sharing its kernel, their ``count``, op, shape and MACs)."""

    name: str
    kind: str
    spec: tuple[tuple[str, Any], ...]
    source: str = field(default="", repr=False)
    info: tuple[tuple[str, Any], ...] = ()

    def identity(self) -> dict[str, Any]:
        """What the point key hashes: the kind and spec (a kernel's text by its digest)."""
        return {"kind": self.kind, **dict(self.spec)}

    def build(self) -> PrimFunc:
        """The workload's PrimFunc, built here (a worker) by its kind's builder."""
        return BUILDERS[self.kind](self)


def build_kernel(workload: Workload) -> PrimFunc:
    """A ``kernel`` workload's function, parsed from the script text it carries (printed
    from the user's file when the sweep read it)."""
    return parse_kernel_text(workload.source, dict(workload.spec)["path"])


@lru_cache(maxsize=256)
def parse_kernel_text(text: str, origin: str) -> PrimFunc:
    """A workload's kernel from its script text, parsed (never run), once per worker process:
    a worker runs one kernel on many machines. ``origin`` names it in errors."""
    from ir.script import parse

    func = parse(text, f"<kernel of {origin}>")
    if not isinstance(func, PrimFunc):
        raise TensorizeError(f"the sweep workload from {origin} requires one function, got a "
                             "module")
    return func


def build_layer(workload: Workload) -> PrimFunc:
    """A ``layer`` workload's function, built by its op's builder from its sizes."""
    spec = dict(workload.spec)
    return LAYERS[spec["op"]][1](**{k: v for k, v in spec.items() if k != "op"})


def kernel_workload(path: Path, func: str | None, name: str | None = None) -> Workload:
    """The workload of a kernel file, read once here (as ``tensorize run`` reads it) so that
    a bad file is refused before any point runs; it carries the kernel as script text.
    ``name`` names it in reports (default: ``func``, else the function's own name)."""
    from ir.printer import print_node
    from tensorize.kernel_file import read_kernel_file

    kernel = read_kernel_file(path, func)
    text = print_node(kernel.func)
    # The key hashes the printed kernel: what the workers run, whatever built it.
    digest = hashlib.sha256(text.encode()).hexdigest()
    if name is None:
        name = kernel.func.name if func is None else func
    return Workload(name, "kernel", (("path", str(path)), ("func", func), ("sha256", digest)),
                    text)


def _i32(value: Any) -> Any:
    import ir

    return ir.cast("int32", value)


def gemm_layer(m: int, n: int, k: int) -> PrimFunc:
    """``C[i, j] = sum_k i32(A[i, k]) * i32(B[k, j])``, int8 operands."""
    from ir import te

    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(_i32(A[i, rk]) * _i32(B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], f"gemm_{m}x{n}x{k}")


def conv2d_layer(height: int, width: int, channels: int, out_channels: int,
                 kernel: int) -> PrimFunc:
    """A ``kernel x kernel`` convolution, NHWC input of ``height x width x channels``, HWIO
    weights, stride 1, no padding, int8 into int32."""
    from ir import te

    oh, ow = height - kernel + 1, width - kernel + 1
    I = te.placeholder((1, height, width, channels), "int8", "I")
    W = te.placeholder((kernel, kernel, channels, out_channels), "int8", "W")
    rh, rw = te.reduce_axis(kernel, "rh"), te.reduce_axis(kernel, "rw")
    rc = te.reduce_axis(channels, "rc")
    O = te.compute((1, oh, ow, out_channels), lambda n, h, w, co: te.sum(
        _i32(I[n, h + rh, w + rw, rc]) * _i32(W[rh, rw, rc, co]), axis=[rh, rw, rc]), "O")
    return te.create_prim_func([I, W, O], f"conv{kernel}x{kernel}_{height}x{width}x{channels}"
                                          f"_{out_channels}")


# Each layer op: its size fields, in order, and its builder.
LAYERS: dict[str, tuple[tuple[str, ...], Callable[..., PrimFunc]]] = {
    "gemm": (("m", "n", "k"), gemm_layer),
    "conv2d": (("height", "width", "channels", "out_channels", "kernel"), conv2d_layer),
}


def read_kernels(node: YNode, base: Path, findings: Findings) -> list[Workload]:
    """A ``kernel: FILE`` entry (with ``func:`` and ``name:``)."""
    path_node = node.get("kernel")
    func_node = node.get("func")
    name_node = node.get("name")
    unknown_keys(node, ("kernel", "func", "name"), findings)
    if path_node is None or not isinstance(path_node.value, str):
        findings.add(node.at("kernel"), "workloads[].kernel requires a kernel file path")
        return []
    if func_node is not None and not isinstance(func_node.value, str):
        findings.add(func_node.loc, "workloads[].func requires a kernel name")
        return []
    if name_node is not None and not (isinstance(name_node.value, str) and
                                      WORKLOAD_NAME.fullmatch(name_node.value)):
        findings.add(name_node.loc, "workloads[].name requires letters, digits, '.', '-' or "
                                    f"'_', got {name_node.plain()!r}")
        return []
    path = (base / path_node.value).resolve()
    try:
        return [kernel_workload(path, func_node.value if func_node else None,
                                name_node.value if name_node else None)]
    except TensorizeError as err:
        findings.add(path_node.loc, f"workloads[].kernel: {err.message}")
    except OSError as err:
        findings.add(path_node.loc, f"workloads[].kernel requires a readable file, got "
                                    f"{path_node.value!r} ({err.strerror})")
    return []


def read_layers(node: YNode, base: Path, findings: Findings) -> list[Workload]:
    """A ``layers: [...]`` entry: each item ``{name: N, OP: {sizes}}``."""
    unknown_keys(node, ("layers",), findings)
    items = node.get("layers")
    if items is None or not items.is_sequence or not items.value:
        findings.add(node.at("layers"), "workloads[].layers requires a list of layers")
        return []
    workloads = []
    for item in items.value:
        layer = _read_layer(item, findings)
        if layer is not None:
            workloads.append(layer)
    return workloads


def _read_layer(item: YNode, findings: Findings) -> Workload | None:
    ops = [op for op in LAYERS if item.get(op) is not None] if item.is_mapping else []
    if len(ops) != 1:
        findings.add(item.loc, f"a layer requires exactly one of {', '.join(LAYERS)} with its "
                               "sizes (and optionally name:)")
        return None
    op = ops[0]
    unknown_keys(item, (op, "name"), findings)
    sizes = item.get(op)
    names, _ = LAYERS[op]
    if sizes is None or not sizes.is_mapping:
        findings.add(item.at(op), f"layers[].{op} requires a mapping of {', '.join(names)}")
        return None
    unknown_keys(sizes, names, findings)
    values = {}
    for size in names:
        value = sizes.get(size)
        ok = value is not None and type(value.value) is int and 1 <= value.value <= MAX_EXTENT
        if not ok:
            findings.add(sizes.at(size), f"layers[].{op}.{size} requires an integer from 1 to "
                                         f"{MAX_EXTENT}, got "
                                         f"{'none' if value is None else repr(value.value)}")
            continue
        values[size] = value.value
    if len(values) < len(names):
        return None
    if op == "conv2d" and values["kernel"] > min(values["height"], values["width"]):
        findings.add(sizes.at("kernel"), f"layers[].conv2d.kernel requires at most the input's "
                                         f"height and width, got {values['kernel']}")
        return None
    name_node = item.get("name")
    name = str(name_node.value) if name_node is not None else \
        f"{op}_" + "x".join(str(values[s]) for s in names)
    return Workload(name, "layer", (("op", op), *values.items()))


def unknown_keys(node: YNode, known: tuple[str, ...], findings: Findings) -> None:
    """Report each key of mapping ``node`` not in ``known``, at the key."""
    if not node.is_mapping:
        return
    for key, child in node.value.items():
        if key not in known:
            findings.add(child.key_loc or child.loc, f"unknown field {key!r}; expected one of "
                                                     f"{', '.join(known)}")


def read_models(node: YNode, base: Path, findings: Findings) -> list[Workload]:
    """A ``model: FILE`` entry (:func:`tensorize.sweep.model_workloads.read_model`)."""
    from tensorize.sweep.model_workloads import read_model

    return read_model(node, base, findings)


def build_model_layer(workload: Workload) -> PrimFunc:
    """A ``model`` workload's kernel
    (:func:`tensorize.sweep.model_workloads.build_model_layer`)."""
    from tensorize.sweep import model_workloads

    return model_workloads.build_model_layer(workload)


# The entries of a sweep file's workloads, by the key that introduces them: each reads its
# entry and returns its workloads. The model reader is imported when a sweep names a model
# (it needs the onnx package, an extra).
KINDS: dict[str, Callable[[YNode, Path, Findings], list[Workload]]] = {
    "kernel": read_kernels,
    "layers": read_layers,
    "model": read_models,
}

# How a worker builds a workload's function, by ``Workload.kind`` (each builder must be
# importable on the workers; a model layer's needs no onnx: it parses the kernel's text).
BUILDERS: dict[str, Callable[[Workload], PrimFunc]] = {
    "kernel": build_kernel,
    "layer": build_layer,
    "model": build_model_layer,
}
