"""A network compiled for a CPU target that runs natively here, called as one function and
timed end to end beside onnxruntime.

:func:`compile_network` takes each layer's form as the model run takes it (the CPU
executor's choice: residual adds joined onto the convolution before them, each layer's
fused form with its epilogue compiled in, else the layer or its uint8 variant, tensorized
and emitted), compiles every tensorized kernel once (:class:`targets.cpu.loaded.
LoadedKernel`), compiles a max pool's and a depthwise layer's channels-last forms as plain
kernels (the depthwise one laid out for the vector units: :mod:`tensorize.engine.
cpu_plain`), and keeps the rest as the host functions they are. A call runs the layers in
order. A convolution's output stays in its kernel's layout (int8, channels last:
:class:`ChannelsLast`), as does a max pool's and a depthwise layer's; the next convolution
gathers its GEMM rows from it straight into its kernel's input array
(:class:`ir.onnx.fused.ImageRows`; each thread its own rows), as a joined add reads its
residual input; a layer that needs the ONNX layout (an average pool, the output) gets it
converted once. Nothing is cached between calls, so a call's time is
the network's: every layer's own work, host work included.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ir.function import PrimFunc
from ir.onnx import Graph, Layer
from ir.onnx.depthwise import DepthwiseGemm
from ir.onnx.fused import GemmPack, ImageRows
from targets.cpu import CpuRun, CpuRunError
from tensorize.engine.cpu_threads import split_rows
from tensorize.model.executors import CpuExecutor, run_on_host

if TYPE_CHECKING:
    from tensorize.runners.context import RunContext


class ChannelsLast:
    """A convolution's output as its kernel wrote it: ``nhwc``, int8 (a uint8 tensor's
    values less 128), valid until the layer runs again; :meth:`array` is the layer's
    output as ONNX has it (NCHW, its dtype), converted on first use."""

    def __init__(self, nhwc: np.ndarray, convert: Callable[[], np.ndarray]) -> None:
        self.nhwc = nhwc
        self._convert = convert
        self._array: np.ndarray | None = None

    def array(self) -> np.ndarray:
        """The tensor in the model's layout and dtype."""
        if self._array is None:
            self._array = self._convert()
        return self._array


Value = np.ndarray | ChannelsLast


Step = Callable[[list[Value]], Value]


def _array(value: Value) -> np.ndarray:
    return value.array() if isinstance(value, ChannelsLast) else value


class NativeNetwork:
    """``graph``'s layers as steps: ``native`` of them run compiled kernels, the rest their
    host functions; ``threads`` the most threads a layer's kernel runs on."""

    def __init__(self, graph: Graph, steps: list[Step], native: int, threads: int,
                 split: dict[str, int], prepacked: set[str]) -> None:
        self.graph = graph
        self.steps = steps
        self.native = native
        self.threads = threads
        # The layers whose rows run on several threads, with how many.
        self.split = split
        # The layers whose weights were packed once, at compile time.
        self.prepacked = prepacked

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The network's outputs for ``inputs`` (by graph input name)."""
        values: dict[str, Value] = dict(inputs)
        for layer, step in zip(self.graph.layers, self.steps):
            values[layer.output] = step([values[name] for name in layer.inputs])
        # Copies: a kernel's output array is its own, overwritten by the next call.
        return {info.name: np.array(_array(values[info.name])) for info in self.graph.outputs}


def compile_network(graph: Graph, ctx: RunContext) -> NativeNetwork:
    """``graph`` compiled for the context's CPU target (module docs); CpuRunError when a
    tensorized kernel cannot run natively here."""
    executor = CpuExecutor(ctx)
    graph = executor.prepare(graph)
    threads = ctx.threads or os.cpu_count() or 1
    # One pool for the network: a layer's first part runs on the caller's thread, the
    # others on the pool.
    pool = ThreadPoolExecutor(threads - 1) if threads > 1 else None
    steps, native, split, prepacked = [], 0, {}, set()
    for layer in graph.layers:
        step, parts = None, []
        if isinstance(layer.fused, DepthwiseGemm) and layer.fused.nhwc is not None:
            step = _depthwise_step(executor, layer, layer.fused)
        if step is None and layer.func is not None:
            step, parts = _kernel_step(executor, layer, threads, pool)
        elif layer.channels_last is not None:
            step = _pool_step(executor, layer)
        native += step is not None
        if len(parts) > 1:
            split[layer.name] = len(parts)
        if parts and all(part.packed for part in parts):
            prepacked.add(layer.name)
        steps.append(step or _host_step(layer))
    return NativeNetwork(graph, steps, native, threads, split, prepacked)


def _kernel_step(executor: CpuExecutor, layer: Layer, threads: int,
                 pool: ThreadPoolExecutor | None) -> tuple[Step | None, list[_Part]]:
    """The layer's pack, native kernel and unpack, and the parts of its rows it runs as
    (none: a layer's own kernel, whole); None when no form of it tensorizes."""
    from targets.cpu.loaded import LoadedKernel

    chosen, _, kernel = executor.kernel_for(layer)
    if kernel is None:
        return None, []
    output = chosen.func.params[-1].name
    pack = chosen.pack
    if isinstance(pack, GemmPack):
        parts = _parts(executor, chosen, pack, threads)
        if pack.fused.rows_nhwc is not None:
            return _channels_last_step(chosen, pack, parts, pool), parts
        return _rows_step(chosen, pack, parts, pool), parts
    loaded = LoadedKernel(kernel[0])

    def step(values: list[Value]) -> np.ndarray:
        arrays = [_array(value) for value in values]
        return chosen.unpack(loaded(pack(arrays))[output], arrays)

    return step, []


@dataclass(frozen=True)
class _Part:
    """Rows ``start`` to ``start + rows`` of a layer's GEMM, by a kernel of its own, which
    reads the weights as ``packed`` holds them (packed once, at compile time)."""

    start: int
    rows: int
    loaded: Any
    packed: dict[str, np.ndarray]
    # The kernel's parameters: a layer's input it lacks (the weights it reads packed) is
    # not given to it.
    params: frozenset[str]

    def __call__(self, image: ImageRows, skip: np.ndarray | None,
                 constants: Mapping[str, np.ndarray], output: str) -> np.ndarray:
        """The part's rows of the kernel's ``output``: its GEMM rows gathered from
        ``image`` straight into the kernel's own input array (and the residual's rows
        from ``skip``, the whole layer's), the constants as given (the same arrays every
        call: copied in once). The array is the kernel's, valid until its next call."""
        end = self.start + self.rows
        inputs = {name: value for name, value in constants.items() if name in self.params}
        inputs["A"] = self.loaded.array("A")
        image.gather(inputs["A"][:self.rows], self.start)
        if skip is not None:
            inputs["Skip"] = self.loaded.array("Skip")
            inputs["Skip"][:self.rows, :skip.shape[1]] = skip[self.start:end]
        return self.loaded({**inputs, **self.packed})[output][:self.rows]


def _parts(executor: CpuExecutor, layer: Layer, pack: GemmPack, threads: int
           ) -> list[_Part]:
    """The layer's fused GEMM as parts of its rows, one per thread where the work is worth
    it (:func:`~tensorize.engine.cpu_threads.split_rows`), each part the form's own kernel
    over its rows (:attr:`GemmPack.kernel`), tensorized and compiled once; one part, the
    layer's kernel, otherwise."""
    from targets.cpu.loaded import LoadedKernel

    m = pack.fused.m
    split: tuple[tuple[int, int], ...] = ((0, m),)
    if threads > 1:
        k, n = pack.fused.weights.shape
        found = split_rows(m, m * k * n, threads)
        split = split if isinstance(found, str) else found
    parts = []
    for start, rows in split:
        func = layer.func if len(split) == 1 else pack.kernel(rows)
        prepacked = executor.prepacked(func, ("B",))
        if prepacked is not None:
            packer, kernel, names = prepacked
            packed = LoadedKernel(packer)({"B": pack.constants["B"]})
            # Copies, read-only: the kernel is then given the same arrays every call and
            # copies them in once.
            weights = {name: _frozen(packed[name]) for name in names}
            parts.append(_Part(start, rows, LoadedKernel(kernel), weights,
                               frozenset(b.name for b in kernel.func.params)))
            continue
        _, kernel = executor.compiled(func)
        if kernel is None:
            raise CpuRunError(f"layer {layer.name}: its kernel over {rows} of its {m} rows "
                              "does not tensorize as the whole one does")
        parts.append(_Part(start, rows, LoadedKernel(kernel[0]), {},
                           frozenset(b.name for b in kernel[0].func.params)))
    return parts


def _frozen(array: np.ndarray) -> np.ndarray:
    copy = np.array(array)
    copy.setflags(write=False)
    return copy


def _channels_last_step(layer: Layer, pack: GemmPack, parts: list[_Part],
                        pool: ThreadPoolExecutor | None) -> Step:
    """A convolution's fused (or joined) form reading its input, and a joined add's
    residual input, channels last where they come so, and leaving its output so; its rows
    split over ``parts`` run at once on ``pool``, each gathering its own rows."""
    fused, output = pack.fused, layer.func.params[-1].name
    n, c, h, w = layer.output_shape

    def step(values: list[Value]) -> ChannelsLast:
        x, skip = values[0], values[pack.inputs:]
        image = fused.rows_nhwc(x.nhwc if isinstance(x, ChannelsLast)
                                else _channels_last_int8(x))
        skip_rows = None
        if skip:
            skip_rows = (skip[0].nhwc.reshape(fused.m, c) if isinstance(skip[0], ChannelsLast)
                         else fused.output_rows(skip[0]))
        out = _run_parts(parts, image, skip_rows, pack.constants, output, pool)
        return ChannelsLast(out.reshape(n, h, w, c), lambda: layer.unpack(out, ()))

    return step


def _rows_step(layer: Layer, pack: GemmPack, parts: list[_Part],
               pool: ThreadPoolExecutor | None) -> Step:
    """A matrix product's fused (or joined) form: its GEMM rows from the layer's inputs,
    split over ``parts`` as a convolution's are, its output as the layer's."""
    fused, output = pack.fused, layer.func.params[-1].name

    def step(values: list[Value]) -> np.ndarray:
        arrays = [_array(value) for value in values]
        image = ImageRows.of_rows(fused.rows(arrays[:pack.inputs]))
        skip_rows = None if pack.skip is None else fused.output_rows(arrays[pack.inputs])
        return layer.unpack(_run_parts(parts, image, skip_rows, pack.constants, output, pool),
                            arrays)

    return step


def _run_parts(parts: list[_Part], image: ImageRows, skip: np.ndarray | None,
               constants: Mapping[str, np.ndarray], output: str,
               pool: ThreadPoolExecutor | None) -> np.ndarray:
    """Every part of a layer's rows run at once, the caller's thread taking the first and
    ``pool`` the others; the layer's ``(m, n)`` output rows: one part's own output array
    (valid until the layer runs again), or the parts' rows copied together."""
    if len(parts) == 1:
        return parts[0](image, skip, constants, output)
    kernel_out = parts[0].loaded.array(output)
    out = np.empty((image.count, kernel_out.shape[1]), kernel_out.dtype)

    def run(part: _Part) -> None:
        out[part.start:part.start + part.rows] = part(image, skip, constants, output)

    others = [pool.submit(run, part) for part in parts[1:]]
    run(parts[0])
    for other in others:
        other.result()
    return out


def _pool_step(executor: CpuExecutor, layer: Layer) -> Step | None:
    """A max pool's channels-last form (:class:`ir.onnx.channels_last.MaxPoolNhwc`)
    compiled for the target (:func:`_padded_step`); None when the target cannot run it
    natively here."""
    pool = layer.channels_last
    n, c, h, w = layer.input_shapes[0]
    # The -128 of the border never wins a window.
    return _padded_step(executor, pool.func((n, h, w, c)), pool.pad_into, -128, {},
                        lambda out: _onnx_layout(out, layer.output_dtype))


def _depthwise_step(executor: CpuExecutor, layer: Layer, gemm: DepthwiseGemm
                    ) -> Step | None:
    """A depthwise layer with its requantisation as one plain kernel on its input held
    channels last (:class:`ir.onnx.channels_last.DepthwiseNhwc`), laid out for the vector
    units (:func:`tensorize.engine.cpu_plain.vectorise_reductions`) and compiled for the
    target (:func:`_padded_step`); None when the target cannot run it natively here (or
    the layer's kernel computes a column more than the layer: one output pixel)."""
    from tensorize.engine.cpu_plain import vectorise_reductions
    from tensorize.schedule import Schedule

    form = gemm.nhwc
    if form.shape.out_hw != tuple(layer.output_shape[2:]):
        return None
    schedule = Schedule(form.func(), executor.ctx.registry)
    vectorise_reductions(schedule)
    # The border holds the input's zero point, as the layer pads.
    return _padded_step(executor, schedule.func, form.pad_into, form.pad_value,
                        form.constants(), lambda out: gemm.output(out.reshape(gemm.m, -1)))


def _padded_step(executor: CpuExecutor, func: PrimFunc,
                 pad_into: Callable[[np.ndarray, np.ndarray], None], fill: int,
                 constants: Mapping[str, np.ndarray],
                 onnx_layout: Callable[[np.ndarray], np.ndarray]) -> Step | None:
    """``func``, a plain kernel of one padded channels-last input ``X``, compiled for the
    target: its border filled with ``fill`` once (never written again), each call writing
    the layer's input inside it (``pad_into``; converted to channels last once where it
    comes as ONNX has it), ``constants`` given as they are, and the output left channels
    last (``onnx_layout`` gives the model's layout); None when the target cannot run it
    natively here."""
    from targets.cpu.loaded import LoadedKernel
    from tensorize.runners.cpu import emit_cpu

    try:
        with executor.timings.measure("compile"):
            loaded = LoadedKernel(emit_cpu(executor.ctx, func))
    except CpuRunError:
        return None
    padded = loaded.array("X")
    padded[...] = fill
    (output,) = loaded.kernel.outputs

    def step(values: list[Value]) -> ChannelsLast:
        x = values[0]
        pad_into(x.nhwc if isinstance(x, ChannelsLast) else _channels_last_int8(x), padded)
        out = loaded({"X": padded, **constants})[output]
        return ChannelsLast(out, lambda: onnx_layout(out))

    return step


def _host_step(layer: Layer) -> Step:
    """The layer's host function; on a channels-last input where the layer has a form for
    one (:attr:`Layer.channels_last`: a max pool), that form, its output left so."""
    if layer.channels_last is None:
        return lambda values: run_on_host(layer, [_array(value) for value in values])

    def step(values: list[Value]) -> Value:
        x = values[0]
        if not isinstance(x, ChannelsLast):
            return run_on_host(layer, [x])
        out = layer.channels_last([x.nhwc])
        return ChannelsLast(out, lambda: _onnx_layout(out, layer.output_dtype))

    return step


def _channels_last_int8(nchw: np.ndarray) -> np.ndarray:
    """An ONNX int8 or uint8 NCHW tensor as a convolution reads it: channels last, int8 (a
    uint8 tensor's values less 128)."""
    if nchw.dtype == np.uint8:
        nchw = np.bitwise_xor(nchw, np.uint8(0x80)).view(np.int8)
    return nchw.transpose(0, 2, 3, 1)


def _onnx_layout(nhwc: np.ndarray, dtype: str) -> np.ndarray:
    """A channels-last int8 tensor as ONNX holds it: NCHW, a uint8 one's values 128 up."""
    nchw = np.ascontiguousarray(nhwc.transpose(0, 3, 1, 2))
    return np.bitwise_xor(nchw.view(np.uint8), np.uint8(0x80)) if dtype == "uint8" else nchw


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
