"""The Python entry point to a compiled network: what ``tensorize model MODEL --target x86
--bench`` times, as a call. An edge, as the CLI is: the registry (the built-in descriptions
and the directories given) is loaded here and travels in the run context.

    import tensorize
    network = tensorize.compile_model("resnet50_int8.onnx", "x86", threads=2)
    outputs = network({"input": image})   # the model's outputs by name
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ir.onnx import Graph
from tensorize.model.native import NativeNetwork

__all__ = ["compile_model"]


def compile_model(model: str | os.PathLike[str] | Graph, target: str = "x86", *,
                  threads: int | None = None, features: str | None = None,
                  intrinsics_dirs: Iterable[str | os.PathLike[str]] = ()) -> NativeNetwork:
    """The ONNX ``model`` (a path, or a graph :func:`ir.onnx.import_model` gave) compiled
    for the CPU target ``target``, native here, as one callable: ``network(inputs)`` takes
    the graph's inputs by name and gives its outputs by name, each layer as the model run
    checks it (:mod:`tensorize.model.native`). ``threads``: the most threads a layer's
    kernel runs on (None: every core); ``features`` edits the target's (``+x``, ``-x``);
    ``intrinsics_dirs`` adds descriptions (a CPU target described in YAML among them).

    Raises ContextError for a target that is not a CPU one (or bad settings),
    OnnxImportError for a model the importer refuses, CpuRunError when the target's code
    cannot run natively here (an arm target on an x86 host)."""
    from intrinsics import default_registry
    from ir.onnx import import_model
    from tensorize.model.native import compile_network
    from tensorize.runners.context import ContextError, make_context

    ctx = make_context(default_registry(intrinsics_dirs), target, features=features,
                       threads=threads)
    if ctx.kind != "cpu":
        raise ContextError(f"compile_model requires a CPU target, got {target} of kind "
                           f"{ctx.kind} (an NPU network runs with `tensorize model --target "
                           f"{target}`)")
    graph = model if isinstance(model, Graph) else import_model(model)
    return compile_network(graph, ctx)
