"""A network's NPU layers as linked programs, one per stage: the layers between two points
where the host must step in.

Each layer is planned as the model run plans it (:meth:`NpuExecutor.device_form`: its fused
form, its epilogue on the vector unit), then consecutive device layers are linked into one
program (:mod:`targets.npu.link`) over one DRAM image. A layer's input that an earlier layer
of the stage produced is read where that layer stored it, when the two layouts agree byte
for byte (:func:`same_bytes`: a 1x1 convolution's rows are the previous convolution's
output rows; a joined residual add's skip is an earlier output as it lies), or, for a
convolution reading a padded image, where the layer before stored its output into that
image's interior (:func:`_into_image`; the pack fills the halo): the activation never goes
back to the host between them. A layer whose own form has the pack gather its input (a
depthwise layer's windows) joins in the form whose loads gather them
(:meth:`NpuExecutor.gathering_form`). A stage ends where a layer needs the host first: its
input must be laid out anew (a max pool's windows), it runs on the host, or its plan has
host stages. Its inputs from before the stage are packed on
the host and placed in the image as the per-layer run places them.

Each layer is checked against onnxruntime on the output it left in the stage's DRAM image;
its cycles are those from the end of the layer before it in the program to its own end, so
a stage's layers add up to the stage's cycles, and a layer's loads that ran while the layer
before it drained count as the earlier layer's time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ir.onnx import Layer, kernels
from ir.onnx.fused import GemmPack, ImagePack
from simulator import Roofline, simulate
from simulator.isa import DRAM_BITS
from targets.npu.link import LinkError, Part, Region, counts, link, relocate
from targets.npu.memory import DRAM_ALIGN, element_bytes
from tensorize.model.executors import DeviceForm, LayerRun, NpuExecutor
from tensorize.model.timeline import part_timeline

# The bytes a DMA's address field reaches: a stage's image must lie inside them.
DRAM_SPAN = 1 << DRAM_BITS
# Digits of the position probes (:func:`same_bytes`): each fits int8 with room to spare.
_BASE = 251


@dataclass(frozen=True)
class _Alias:
    """A kernel parameter read where an earlier member (at ``producer``, its position in the
    stage) stored its output: at the parameter's start, or (``image``) ``shift`` bytes into
    it, the producer having stored its output into the interior of the parameter, a padded
    image whose halo the parameter's pack fills before the stage runs."""

    producer: int
    image: bool = False
    shift: int = 0


@dataclass
class _Member:
    """A layer of a stage: its graph index and layer, the form that runs and its plan, and
    the kernel parameters it reads where an earlier member stored them."""

    index: int
    layer: Layer
    choice: DeviceForm
    aliases: dict[str, _Alias] = field(default_factory=dict)

    @property
    def compiled(self) -> Any:
        """The member's one NPU program (a :class:`targets.npu.CompiledStage`)."""
        return self.choice.planned.stages[0].compiled

    @property
    def output(self) -> Any:
        """The kernel's output parameter (a Buffer), as the program placed it."""
        name = self.choice.planned.func.params[-1].name
        return next(buffer for buffer in self.compiled.dram if buffer.name == name)


@dataclass(frozen=True)
class StageSummary:
    """A stage as the report gives it: its number (from 1), its layers' indices, its
    program's cycles and instructions, and why the next layer did not join it (None after
    the last layer)."""

    number: int
    layers: tuple[int, ...]
    cycles: int
    instructions: int
    ends: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The summary as plain data."""
        return {"number": self.number, "layers": list(self.layers), "cycles": self.cycles,
                "instructions": self.instructions, "ends": self.ends}


class StagedRuns:
    """Each layer's index and run, in order, the NPU's layers linked into stages (module
    docstring); iterating runs them. ``values`` holds every tensor computed so far by
    name: the caller adds each layer's output before taking the next run (a stage's layers
    come after the whole stage ran). ``stages`` fills as the stages run."""

    def __init__(self, executor: NpuExecutor, layers: tuple[Layer, ...],
                 values: Mapping[str, np.ndarray]) -> None:
        self.executor = executor
        self.layers = layers
        self.values = values
        self.stages: list[StageSummary] = []

    def __iter__(self) -> Iterator[tuple[int, LayerRun]]:
        stage: list[_Member] = []
        for index, layer in enumerate(self.layers):
            member, alone = _member(self.executor, index, layer)
            why = None if member is None or not stage else _fits(stage, member) or \
                _joins(self.executor, stage, member)
            if why is not None:
                # A form that gathers its input from the device's layout may join instead.
                member, why = _gathering(self.executor, stage, member, why)
            if member is not None and stage and why is None:
                stage.append(member)
                continue
            if stage:
                yield from self._run(stage, why or f"layer {index} {layer.name} {alone}")
                stage = []
            if member is not None:
                stage = [member]
            else:
                yield index, self.executor.run(layer, [self.values[name]
                                                       for name in layer.inputs])
        if stage:
            yield from self._run(stage, None)

    def _run(self, stage: list[_Member], ends: str | None) -> Iterator[tuple[int, LayerRun]]:
        runs, cycles, instructions = _run_stage(self.executor, stage, self.values,
                                                len(self.stages) + 1)
        self.stages.append(StageSummary(len(self.stages) + 1,
                                        tuple(m.index for m in stage), cycles, instructions,
                                        ends))
        yield from runs


def _gathering(executor: NpuExecutor, stage: list[_Member], member: _Member, why: str
               ) -> tuple[_Member, str | None]:
    """``member`` in the form that gathers its input itself
    (:meth:`NpuExecutor.gathering_form`) where that form joins ``stage``; else ``member``
    and ``why`` it does not."""
    choice = executor.gathering_form(member.layer)
    other = None if choice is None else _member(executor, member.index, member.layer,
                                                choice)[0]
    if other is None or _fits(stage, other) is not None or \
            _joins(executor, stage, other) is not None:
        return member, why
    return other, None


def _member(executor: NpuExecutor, index: int, layer: Layer,
            choice: DeviceForm | None = None) -> tuple[_Member | None, str | None]:
    """``layer`` as a stage member, in its device form (or ``choice``), where that is one
    NPU program (no host stage) that the linker can move; else None and what it runs as
    instead (it runs as the per-layer run runs it)."""
    choice = choice or executor.device_form(layer)
    if not isinstance(choice, DeviceForm):
        return None, f"runs on the host ({choice.reason})"
    if len(choice.planned.stages) != 1 or choice.planned.stages[0].compiled is None:
        return None, "runs as a program with host stages"
    member = _Member(index, layer, choice)
    compiled = member.compiled
    try:
        relocate(Part(compiled.program, _own_regions(compiled)), executor.config.datapath)
    except LinkError as err:
        return None, f"runs as a program of its own ({err.message})"
    return member, None


def _fits(stage: list[_Member], member: _Member) -> str | None:
    """None where the stage's DRAM image, ``member``'s regions added, stays inside the
    machine's DRAM addresses (every buffer counted apart, a bound on the image); else why
    the stage ends."""
    nbytes = sum(m.compiled.dram_bytes for m in (*stage, member))
    if nbytes < DRAM_SPAN:
        return None
    return (f"layer {member.index} {member.layer.name} would take the stage's DRAM image "
            f"past the {DRAM_SPAN:,} bytes a transfer can address")


def _own_regions(compiled: Any) -> tuple[Region, ...]:
    """A program's DRAM regions where they are: each buffer's, and the scratch past them."""
    regions = [Region(p.base, p.nbytes, p.base) for p in compiled.dram.values()]
    scratch = _scratch(compiled)
    if scratch is not None:
        regions.append(Region(*scratch, scratch[0]))
    return tuple(regions)


def _scratch(compiled: Any) -> tuple[int, int] | None:
    """Where a program's scratch lies in its own DRAM image, past its buffers (zero rows
    its folded copies load, rows its stores discard), and its bytes; None without one."""
    end = max((p.base + p.nbytes for p in compiled.dram.values()), default=0)
    return (end, compiled.dram_bytes - end) if compiled.dram_bytes > end else None


def _joins(executor: NpuExecutor, stage: list[_Member], member: _Member) -> str | None:
    """None where ``member`` joins ``stage``, its aliases set: every input an earlier member
    produced is read where that member stored it (a producer whose output the member reads
    as a padded image takes the form that stores it there, :func:`_into_image`); else why
    the host must step in, the stage and the member left as they were."""
    produced = {m.layer.output: position for position, m in enumerate(stage)}
    inputs = {name for name in member.layer.inputs if name in produced}
    form = member.choice.form
    reads, aliases, stored = {}, {}, {}
    for param in form.func.params[:-1]:
        source = _source(form, param.name)
        if source is None:
            continue
        tensor = member.layer.inputs[source[0]]
        if tensor not in produced:
            continue
        reads[tensor] = param
        position = produced[tensor]
        if same_bytes(stage[position], form, param, source[1]):
            aliases[param.name] = _Alias(position)
            inputs.discard(tensor)
            continue
        read_after = any(p.producer == position for m in stage[position + 1:]
                         for p in m.aliases.values())
        image = None if read_after or position in stored else _into_image(
            executor, stage[position], form, param, source[1])
        if image is not None:
            stored[position], shift = image
            aliases[param.name] = _Alias(position, image=True, shift=shift)
            inputs.discard(tensor)
    if inputs:
        tensor = sorted(inputs)[0]
        producer = stage[produced[tensor]]
        param = reads.get(tensor)
        how = "its kernel does not read it as one tensor" if param is None else \
            f"its kernel reads {param.name} {param.shape}"
        return (f"layer {member.index} {member.layer.name} needs the host to lay out "
                f"{producer.layer.name}'s output first: {how}, which that layer's kernel "
                f"stored as {producer.output.shape}")
    for position, replacement in stored.items():
        stage[position] = replacement
    member.aliases.update(aliases)
    return None


def _into_image(executor: NpuExecutor, producer: _Member, form: Layer, param: Any,
                layout: Callable[[np.ndarray], np.ndarray]) -> tuple[_Member, int] | None:
    """The producer in the form that stores its output into the interior of ``param``, the
    padded image ``form`` (a convolution's implicit GEMM) reads
    (:func:`ir.onnx.kernels.stored_in_image`, a scatter the program's stores do), and the
    bytes from the image's start to its interior; None where the image's interior is not
    the producer's output, pixel by pixel (probed as :func:`same_bytes` probes), or the
    machine does not run that form as one program."""
    pack, made = form.pack, producer.choice.form.pack
    if not isinstance(pack, ImagePack) or param.name != "X" or \
            not isinstance(made, GemmPack | ImagePack):
        return None
    shape = pack.fused.image.shape
    top, left, bottom, right = shape.pads
    padded = (shape.h + top + bottom, shape.w + left + right)
    m, n = made.fused.m, made.fused.weights.shape[1]
    out = producer.choice.form.func.params[-1]
    # A depthwise layer's output holds its channels by group: groups x rows x width.
    channels = out.shape[-1] * (out.shape[0] if len(out.shape) == 3 else 1)
    if m != shape.n * shape.h * shape.w or n != shape.c or channels != n or \
            param.shape != (shape.n, *padded, shape.c) or not _interior_matches(
                made.fused, layout, (shape.n, shape.h, shape.w), (top, left)):
        return None
    base = producer.choice.form
    func = kernels.stored_in_image(base.func, (shape.n, shape.h, shape.w), padded)
    family = None if base.family is None else replace(
        base.family, key=base.family.key + ("stored_in_image", padded))
    stored = replace(base, func=func, unpack=_interior_unpack(made.fused, shape),
                     family=family)
    device = executor.on_device(stored)
    if isinstance(device, str):
        return None
    _, outcome, (planned, calls) = device
    where = "into the next convolution's padded input" if any(shape.pads) else \
        "in the next convolution's input layout"
    note = "; ".join(filter(None, [producer.choice.note,
                                   f"its output stored {where}, in the program"]))
    member, _ = _member(executor, producer.index, producer.layer,
                        DeviceForm(stored, outcome, planned, calls, note))
    if member is None:
        return None
    member.aliases = producer.aliases
    return member, (top * padded[1] + left) * shape.c


def _interior_matches(fused: Any, layout: Callable[[np.ndarray], np.ndarray],
                      image: tuple[int, int, int], corner: tuple[int, int]) -> bool:
    """Whether ``layout`` of the producer's output puts output row ``(b * h + y) * w + x``
    at pixel ``(b, top + y, left + x)`` of the image, every channel in place (probed as
    :func:`same_bytes` probes)."""
    n, h, w = image
    top, left = corner

    def inside(laid: np.ndarray, digits: np.ndarray) -> bool:
        if laid.ndim != 4:
            return False
        pixels = laid[:, top:top + h, left:left + w, :]
        return pixels.shape == (n, h, w, digits.shape[1]) and \
            np.array_equal(pixels.reshape(digits.shape), digits)

    return _probed(fused, layout, inside)


def _interior_unpack(fused: Any, shape: Any) -> Callable[[np.ndarray, Any], np.ndarray]:
    """The unpack of a form storing into an image: the pixels from its corner, as the
    layer's output."""
    m, h, w = fused.m, shape.h, shape.w

    def unpack(image: np.ndarray, arrays: Any) -> np.ndarray:
        return fused.output(np.ascontiguousarray(image[:, :h, :w, :]).reshape(m, -1))

    return unpack


def _source(form: Layer, param: str
            ) -> tuple[int, Callable[[np.ndarray], np.ndarray]] | None:
    """Where a kernel parameter of ``form`` comes from, when it is one of the layer's
    inputs laid out for the kernel: (that input's index, the layout function); None for a
    constant, or a parameter made of several inputs."""
    pack = form.pack
    if not isinstance(pack, GemmPack | ImagePack):
        return None
    fused = pack.fused
    if param == "Skip" and pack.skip is not None and fused.output_rows is not None:
        return pack.inputs, fused.output_rows
    if pack.inputs != 1:
        return None
    if param == "A" and isinstance(pack, GemmPack):
        return 0, lambda tensor: fused.rows([tensor])
    if param == "X" and isinstance(pack, ImagePack):
        return 0, lambda tensor: fused.image.padded([tensor])
    return None


def same_bytes(producer: _Member, form: Layer, param: Any,
               layout: Callable[[np.ndarray], np.ndarray]) -> bool:
    """Whether kernel parameter ``param`` of ``form`` (laid out from the producer's output
    by ``layout``) is, byte for byte, the start of the producer's kernel output, padding
    aside: the same dtype, no larger, and every element ``layout`` gives where the
    producer's kernel stored it. Positions are probed digit by digit (base 251, int8
    values), so a layout that moves, drops or changes any element is caught. The padding
    differs (the producer leaves its padded rows and columns as it computed them, the pack
    zeros): a GEMM's padded depth meets zero weight rows, and padded rows and columns give
    outputs the unpack drops."""
    pack = producer.choice.form.pack
    out = producer.output
    if not isinstance(pack, GemmPack | ImagePack) or out.dtype != param.dtype or \
            param.size > out.size or len(out.shape) != 2:
        return False
    return _probed(pack.fused, layout, lambda laid, digits: _embeds(
        laid, param.shape, out.shape, digits))


def _probed(fused: Any, layout: Callable[[np.ndarray], np.ndarray],
            holds: Callable[[np.ndarray, np.ndarray], bool]) -> bool:
    """Whether ``holds(laid, digits)`` for every digit of the producer's output positions:
    ``digits`` the ``(m, channels)`` positions' digit (base 251, as int8 values), ``laid``
    what ``layout`` makes of the layer's output holding them (an int8 array, else the
    probe fails). Each element's digits together name its position, so a layout that
    moves, drops or changes any element fails some round."""
    m, channels = fused.m, fused.weights.shape[1]
    positions = np.arange(m * channels, dtype=np.int64).reshape(m, channels)
    scale = 1
    while True:
        digits = (positions // scale % _BASE - _BASE // 2).astype(np.int8)
        laid = np.asarray(layout(fused.output(digits)))
        if laid.dtype != np.int8 or not holds(laid, digits):
            return False
        scale *= _BASE
        if scale >= m * channels:
            return True


def _embeds(laid: np.ndarray, shape: tuple[int, ...], stored: tuple[int, int],
            digits: np.ndarray) -> bool:
    """Whether ``laid`` (a kernel parameter before its padding to ``shape``) holds, at
    every element, what the producer's kernel stores at the same byte of its ``stored``
    output, whose valid part is ``digits``; and holds every one of those."""
    if laid.ndim != len(shape) or any(have > want for have, want in zip(laid.shape, shape)):
        return False
    m, n = digits.shape
    kernel = np.zeros(stored, np.int16)
    kernel[:] = -1000  # the producer's padding: no element of the layer's output
    kernel[:m, :n] = digits
    start = np.zeros(shape, np.int16)
    start.reshape(-1)[:] = kernel.reshape(-1)[:start.size]
    inside = start[tuple(slice(0, size) for size in laid.shape)]
    return laid.size == m * n and np.array_equal(inside, laid)


def _run_stage(executor: NpuExecutor, stage: list[_Member],
               values: Mapping[str, np.ndarray], number: int
               ) -> tuple[list[tuple[int, LayerRun]], int, int]:
    """The stage linked, simulated and unpacked: each member's index and run, in order,
    and the program's cycles and executed instructions."""
    start = time.perf_counter()
    parts, outputs, size = _placed(stage)
    with executor.timings.measure("link"):
        linked = link(parts, executor.config)
    dram, arrays_of = _filled(executor, stage, parts, values, size)
    with executor.timings.measure("simulate"):
        sim = simulate(linked.program, executor.config, dram)
    table = sim.records.table()
    ends, numbers = _part_ends(table, linked.executed)
    seconds = (time.perf_counter() - start) / len(stage)
    produced: dict[str, np.ndarray] = {}
    runs = []
    span = f"layers {stage[0].index}-{stage[-1].index}" if len(stage) > 1 \
        else f"layer {stage[0].index}"
    for position, (member, part) in enumerate(zip(stage, parts)):
        out, base = member.output, outputs[position]
        raw = sim.dram[base:base + out.size * element_bytes(out)]
        arrays = [produced.get(name, array)
                  for name, array in zip(member.layer.inputs, arrays_of[position])]
        with executor.timings.measure("unpack and epilogue"):
            output = member.choice.form.unpack(
                raw.view(out.dtype.numpy).reshape(out.shape).copy(), arrays)
        produced[member.layer.output] = output
        begin = ends[position - 1] if position else 0
        timeline = part_timeline(table, numbers[position], begin, ends[position])
        runs.append((member.index, _layer_run(
            executor, member, output, ends[position] - begin,
            counts(part.program, executor.config), _notes(member, stage, number, span),
            seconds, timeline)))
    return runs, sim.cycles, sum(linked.executed)


def _placed(stage: list[_Member]) -> tuple[list[Part], dict[int, int], int]:
    """Where every member's DRAM regions lie in the stage's image: the parts to link, each
    member's output address (by position) and the image's size. A padded image a producer
    stores into is placed first, so the producer's output lies in it."""
    image = _Image()
    images: dict[tuple[int, str], int] = {}
    outputs: dict[int, int] = {}
    for position, member in enumerate(stage):
        for name, alias in member.aliases.items():
            if alias.image:
                (nbytes,) = [p.nbytes for b, p in member.compiled.dram.items()
                             if b.name == name]
                images[(position, name)] = image.take(nbytes + alias.shift)
                outputs[alias.producer] = images[(position, name)] + alias.shift
    parts = []
    for position, member in enumerate(stage):
        compiled = member.compiled
        regions = []
        for buffer, placed in compiled.dram.items():
            alias = member.aliases.get(buffer.name)
            if alias is not None:
                new = images[(position, buffer.name)] if alias.image \
                    else outputs[alias.producer]
            elif buffer is member.output and position in outputs:
                new = outputs[position]
            else:
                new = image.take(placed.nbytes)
            regions.append(Region(placed.base, placed.nbytes, new))
        scratch = _scratch(compiled)
        if scratch is not None:
            regions.append(Region(*scratch, image.take(scratch[1])))
        outputs[position] = next(r.new for r, b in zip(regions, compiled.dram)
                                 if b is member.output)
        parts.append(Part(compiled.program, tuple(regions)))
    return parts, outputs, image.size


def _filled(executor: NpuExecutor, stage: list[_Member], parts: list[Part],
            values: Mapping[str, np.ndarray], size: int
            ) -> tuple[np.ndarray, list[list[np.ndarray]]]:
    """The stage's DRAM image before it runs, every member's packed inputs in their regions
    (an input an earlier member stores is left to it, but a padded image's halo, which the
    pack fills), and the arrays each member's pack was given."""
    dram = np.zeros(size, np.uint8)
    arrays_of = []
    for member, part in zip(stage, parts):
        arrays = [values[name] if name in values else _placeholder(stage, name)
                  for name in member.layer.inputs]
        arrays_of.append(arrays)
        with executor.timings.measure("pack"):
            packed = member.choice.form.pack(arrays)
        for (buffer, placed), region in zip(member.compiled.dram.items(), part.regions):
            alias = member.aliases.get(buffer.name)
            if alias is not None and not alias.image or buffer.name not in packed:
                continue
            raw = np.ascontiguousarray(packed[buffer.name])
            if raw.shape != buffer.shape or raw.dtype != buffer.dtype.numpy:
                raise LinkError(f"layer {member.layer.name}: its pack gives {buffer.name} "
                                f"{raw.shape} {raw.dtype}, its kernel requires "
                                f"{buffer.shape} {buffer.dtype}")
            dram[region.new:region.new + placed.nbytes] = raw.reshape(-1).view(np.uint8)
    return dram, arrays_of


class _Image:
    """The stage's DRAM image, taken region by region, each aligned as a program's are."""

    def __init__(self) -> None:
        self.size = 0

    def take(self, nbytes: int) -> int:
        """A fresh region of ``nbytes``: its address."""
        at = self.size
        self.size += -(-nbytes // DRAM_ALIGN) * DRAM_ALIGN
        return at


def _placeholder(stage: list[_Member], name: str) -> np.ndarray:
    """An input a member reads where an earlier member stored it, before the stage ran:
    zeros of its shape, for the pack to lay out (its result is not placed)."""
    producer = next(m.layer for m in stage if m.layer.output == name)
    return np.zeros(producer.output_shape, producer.output_dtype)


def _part_ends(table: np.ndarray, executed: tuple[int, ...]
               ) -> tuple[list[int], list[tuple[int, int]]]:
    """Per part of a linked program, the cycle its last instruction ended and the numbers
    of its instructions ``[first, end)``."""
    bounds = np.cumsum((0,) + executed)
    ends, numbers = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        mine = table[(table[:, 3] >= lo) & (table[:, 3] < hi)]
        ends.append(int(mine[:, 2].max()) if len(mine) else (ends[-1] if ends else 0))
        numbers.append((int(lo), int(hi)))
    for n in range(1, len(ends)):
        ends[n] = max(ends[n], ends[n - 1])
    return ends, numbers


def _notes(member: _Member, stage: list[_Member], number: int, span: str) -> list[str]:
    notes = [f"stage {number} ({span}, one program)"]
    read = [stage[p].layer.name
            for p in dict.fromkeys(alias.producer for alias in member.aliases.values())]
    if read:
        notes.append(f"reads the output of {', '.join(read)} where it lies in DRAM")
    if member.compiled.folded:
        notes.append(f"copies done by the program's loads and stores: "
                     f"{', '.join(member.compiled.folded)}")
    if member.choice.note:
        notes.append(member.choice.note)
    return notes


def _layer_run(executor: NpuExecutor, member: _Member, output: np.ndarray, cycles: int,
               figures: Any, notes: list[str], seconds: float, timeline: Any) -> LayerRun:
    """A member's run from its share of the stage's program."""
    config = executor.config
    roofline = Roofline.of(figures.macs, member.compiled.min_dram_bytes, config)
    peak = config.array.rows * config.array.cols
    layer = member.choice.form
    return LayerRun(output, "tensorized", member.choice.outcome.intrinsic, None,
                    member.choice.calls, cycles, seconds=seconds,
                    utilisation=layer.macs / (cycles * peak) if cycles else None,
                    dram_bytes=figures.dram_bytes,
                    bound="compute" if roofline.binds == "compute" else "memory",
                    notes=notes, ran=layer, timeline=timeline)
