"""A network compiled for a CPU target that runs natively here, called as one function and
timed end to end beside onnxruntime.

:func:`compile_network` takes each layer's form as the model run takes it (the CPU
executor's choice: the layer or its uint8 variant, tensorized and emitted), compiles every
tensorized kernel once (:class:`targets.cpu.loaded.LoadedKernel`), and keeps the rest as the
host functions they are. A call runs the layers in order: per layer its pack (layout: for a
convolution the input's windows as GEMM rows), the native kernel, and its unpack (the
epilogue: bias, zero-point corrections and requantisation, in numpy), or its host function
(quantise, pools, adds, reshapes). Nothing is cached between calls, so a call's time is the
network's: every layer's own work, host work included, on one thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from ir.onnx import Graph, Layer
from targets.cpu import CpuRun
from tensorize.model.executors import CpuExecutor, run_on_host

if TYPE_CHECKING:
    from tensorize.runners.context import RunContext

Step = Callable[[list[np.ndarray]], np.ndarray]


class NativeNetwork:
    """``graph``'s layers as steps: ``native`` of them run compiled kernels, the rest their
    host functions."""

    def __init__(self, graph: Graph, steps: list[Step], native: int) -> None:
        self.graph = graph
        self.steps = steps
        self.native = native

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The network's outputs for ``inputs`` (by graph input name)."""
        values = dict(inputs)
        for layer, step in zip(self.graph.layers, self.steps):
            values[layer.output] = step([values[name] for name in layer.inputs])
        return {info.name: values[info.name] for info in self.graph.outputs}


def compile_network(graph: Graph, ctx: RunContext) -> NativeNetwork:
    """``graph`` compiled for the context's CPU target (module docs); CpuRunError when a
    tensorized kernel cannot run natively here."""
    executor = CpuExecutor(ctx)
    steps, native = [], 0
    for layer in graph.layers:
        step = _kernel_step(executor, layer) if layer.func is not None else None
        native += step is not None
        steps.append(step or _host_step(layer))
    return NativeNetwork(graph, steps, native)


def _kernel_step(executor: CpuExecutor, layer: Layer) -> Step | None:
    """The layer's pack, native kernel and unpack; None when no form of it tensorizes."""
    from targets.cpu.loaded import LoadedKernel

    chosen, _, kernel = executor.kernel_for(layer)
    if kernel is None:
        return None
    loaded = LoadedKernel(kernel[0])
    output = chosen.func.params[-1].name

    def step(arrays: list[np.ndarray]) -> np.ndarray:
        return chosen.unpack(loaded(chosen.pack(arrays))[output], arrays)

    return step


def _host_step(layer: Layer) -> Step:
    return lambda arrays: run_on_host(layer, arrays)


def time_interleaved(calls: Mapping[str, Callable[[], object]], runs: int
                     ) -> dict[str, CpuRun]:
    """Each of ``calls`` timed ``runs`` times, taking turns (one call of each per round),
    so a change in the machine's load falls on all of them alike: per call its wall and CPU
    seconds, as a native run's (no outputs kept)."""
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(runs):
        for name, call in calls.items():
            wall, used = time.perf_counter(), time.process_time()
            call()
            seconds[name].append(time.perf_counter() - wall)
            cpu[name].append(time.process_time() - used)
    return {name: CpuRun({}, "native", seconds=tuple(seconds[name]),
                         cpu_seconds=tuple(cpu[name])) for name in calls}


def best_cpu(run: CpuRun) -> float:
    """The CPU seconds of ``run``'s fastest call."""
    return run.cpu_seconds[run.seconds.index(run.best)]
