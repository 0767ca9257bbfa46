"""The NPU's machine parameters: read from the `machine:` section of a YAML file, validated.

Every number the simulator uses comes from a :class:`MachineConfig`; nothing about the machine
is fixed in code. Each field is bounded (cycles, depths, rates, the on-chip bytes together) so
that any machine read here is one a run can simulate. A bad description raises
:class:`IntrinsicSpecError` listing every problem, each at its YAML line and naming its field
(``machine.array.rows``).
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from ir.errors import IntrinsicSpecError, SourceLoc

DATAFLOWS = ("weight_stationary", "output_stationary")
# On-chip row addresses are 16-bit instruction fields.
MAX_ROWS = 1 << 16
# The bounds below keep a description a machine the simulator can run, whoever wrote it: each
# is far above any real design, and far below what would overflow the 64-bit cycle counts of
# a run's records or take the host's memory.
# Cycles of one latency, issue gap or fetch (a DRAM latency is a few hundred).
MAX_CYCLES = 1 << 20
# Entries of one queue, requests in flight (real designs: tens).
MAX_DEPTH = 1 << 16
# Bytes per cycle of the DRAM port, and the clock in MHz: from a trickle to far past any
# real port or clock, so a transfer's cycles and a run's microseconds stay finite.
MIN_RATE, MAX_RATE = 0.001, 1_000_000
# On-chip bytes of the three memories together (inp, wgt, acc): the simulator holds them all
# (the scratchpads as float32, four bytes per int8), so 64 MiB of SRAM, more than TPU v1's
# 28 MiB, takes at most 256 MiB here.
MAX_SRAM_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class ArrayConfig:
    """The systolic array: ``rows`` (R) x ``cols`` (C) processing elements.

    ``dataflow`` is ``weight_stationary`` or ``output_stationary``; ``double_buffered_weights``
    lets the next weight preload overlap the current streaming; ``latency`` counts the cycles
    from the array's last output to its write into the accumulator.
    """

    rows: int
    cols: int
    dataflow: str
    double_buffered_weights: bool
    latency: int


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """One on-chip memory: ``rows`` addressable rows in ``banks`` equal banks."""

    rows: int
    banks: int

    @property
    def bank_rows(self) -> int:
        """Rows per bank: an instruction's tile must lie inside one bank."""
        return self.rows // self.banks


@dataclass(frozen=True, slots=True)
class VectorConfig:
    """The vector unit: ``lanes`` int32 elements per cycle, ``latency`` pipeline stages."""

    lanes: int
    latency: int


@dataclass(frozen=True, slots=True)
class RequantConfig:
    """The vector unit's float32 requantisation stage (``vec.requant``): ``lanes`` elements
    per cycle and ``latency`` pipeline stages. A machine without it has no ``vec.requant``."""

    lanes: int
    latency: int


@dataclass(frozen=True, slots=True)
class DramConfig:
    """The DRAM port shared by both DMA engines: bandwidth and request-to-data latency."""

    bytes_per_cycle: float
    latency: int


@dataclass(frozen=True, slots=True)
class DmaConfig:
    """Each DMA engine: requests in flight at most, and cycles between two requests."""

    max_outstanding: int
    issue_cycles: int


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """Instruction queue depth (each of load/compute/store), token queue depth, fetch rate."""

    instruction_depth: int
    token_depth: int
    fetch_cycles: int


@dataclass(frozen=True, slots=True)
class FloatDatapathConfig:
    """A float array (``datapath:``): ``operand`` x ``operand`` products summed into an
    ``accumulator``, each product exact and added to the running sum in ``order`` of k with
    one ``rounding`` per add, ``denormals`` kept. A machine without it is int8 x int8 ->
    int32. Each field admits the one semantics the simulator computes, so a file states it
    and a different one is refused at its line rather than simulated wrongly."""

    operand: str
    accumulator: str
    order: str
    rounding: str
    denormals: str


@dataclass(frozen=True, slots=True)
class MachineConfig:
    """Every parameter of the simulated NPU; mirrors the YAML `machine:` section.

    Row widths follow from the array: an ``inp`` row holds R operands (one K-slice of an
    input row), a ``wgt`` row C operands (one K-row of a weight tile), an ``acc`` row C
    accumulators: int8 and int32, or as ``datapath`` states (bfloat16 and float32).
    ``source`` names the file (or ``<dict>``) it came from and takes no part in equality.
    """

    name: str
    clock_mhz: float
    array: ArrayConfig
    inp: MemoryConfig
    wgt: MemoryConfig
    acc: MemoryConfig
    vector: VectorConfig
    dram: DramConfig
    dma: DmaConfig
    queues: QueueConfig
    requant: RequantConfig | None = None
    datapath: FloatDatapathConfig | None = None
    source: str = field(default="<dict>", compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> MachineConfig:
        """Build and validate a config from the contents of a `machine:` section."""
        return _build(data, {}, source)

    @property
    def is_float(self) -> bool:
        """True for a float array (bfloat16 x bfloat16 -> float32), False for int8."""
        return self.datapath is not None

    def to_dict(self) -> dict[str, Any]:
        """The `machine:` section as plain data; ``from_dict(to_dict())`` gives an equal config."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "source" or (f.name in _OPTIONAL and getattr(self, f.name) is None):
                continue
            value = getattr(self, f.name)
            if hasattr(value, "__dataclass_fields__"):
                value = {g.name: getattr(value, g.name) for g in fields(value)}
            out[f.name] = value
        return out


def default_machine_path() -> Path:
    """The built-in description: ``npu.yaml`` beside the installed ``intrinsics`` package.

    The package is located without importing it (it may import the simulator).
    """
    spec = importlib.util.find_spec("intrinsics")
    if spec is None or spec.origin is None:
        raise IntrinsicSpecError("cannot find the built-in machine description: the "
                                 "'intrinsics' package is not installed")
    return Path(spec.origin).parent / "npu.yaml"


def load_machine(path: str | os.PathLike[str] | None = None) -> MachineConfig:
    """Load the `machine:` section of a YAML file (default: the built-in ``npu.yaml``).

    Other top-level sections (``scopes:``, ``intrinsics:``) are ignored here. Raises
    :class:`IntrinsicSpecError` naming the file, line and field of every problem. The file
    is read whole by PyYAML's safe loader: use it for the built-in description and files you
    trust; ``targets.npu.load_machine`` reads a user's file within the bounds of the
    intrinsic descriptions (size, nesting, aliases) first.
    """
    file = Path(path) if path is not None else default_machine_path()
    source = str(file)
    try:
        text = file.read_text()
    except OSError as err:
        raise IntrinsicSpecError(
            f"cannot read machine description {source}: {err.strerror}") from None
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        loc = SourceLoc(source, mark.line + 1, mark.column + 1) if mark else None
        raise IntrinsicSpecError(f"invalid YAML: {err.problem}", loc) from None
    finally:
        loader.dispose()
    section = None
    if isinstance(root, yaml.MappingNode):
        section = next(((k, v) for k, v in root.value if k.value == "machine"), None)
    if section is None:
        raise IntrinsicSpecError(
            "a machine description requires a top-level 'machine:' mapping",
            SourceLoc(source, 1, 1))
    return machine_from_node(section[1], source, _span(section[0], source))


def machine_from_node(node: yaml.Node, source: str, key_loc: SourceLoc | None = None
                      ) -> MachineConfig:
    """Build and validate a config from the composed YAML node of a `machine:` section (its
    marks give each finding its line), read from ``source``; ``key_loc`` is where the
    `machine:` key is written (a missing field is reported there)."""
    marks: dict[tuple[str, ...], SourceLoc] = {("machine",): _span(node, source)}
    if key_loc is not None:
        marks[("machine", ":key")] = key_loc
    _collect_marks(node, ("machine",), source, marks)
    loader = yaml.SafeLoader("")
    try:
        data = loader.construct_object(node, deep=True)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        loc = SourceLoc(source, mark.line + 1, mark.column + 1) if mark else None
        raise IntrinsicSpecError(f"invalid YAML value: {err.problem}", loc) from None
    finally:
        loader.dispose()
    return _build(data, marks, source, ("machine",))


def _collect_marks(node: yaml.Node, path: tuple[str, ...], source: str,
                   marks: dict[tuple[str, ...], SourceLoc]) -> None:
    """Record the span of every mapping value (by key path) and of its key (path + ``:key``)."""
    if not isinstance(node, yaml.MappingNode):
        return
    for key_node, value_node in node.value:
        key = str(key_node.value)
        marks[(*path, key)] = _span(value_node, source)
        marks[(*path, key, ":key")] = _span(key_node, source)
        _collect_marks(value_node, (*path, key), source, marks)


def _span(node: yaml.Node, source: str) -> SourceLoc:
    """A node's span as a 1-based, end-inclusive SourceLoc."""
    start, end = node.start_mark, node.end_mark
    return SourceLoc(source, start.line + 1, start.column + 1, end.line + 1, end.column)


# A check returns the accepted value, or None when the value breaks the requirement.
_Check = tuple[str, Callable[[Any], Any]]


def _integer(lo: int, hi: int | None = None) -> _Check:
    """An int (not a bool) in [lo, hi]."""
    def check(v: Any) -> Any:
        ok = isinstance(v, int) and not isinstance(v, bool) and v >= lo
        return v if ok and (hi is None or v <= hi) else None
    bound = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
    return bound, check


def _number(lo: float, hi: float) -> _Check:
    """A finite int or float in [lo, hi]."""
    def check(v: Any) -> Any:
        ok = isinstance(v, int | float) and not isinstance(v, bool)
        return v if ok and math.isfinite(v) and lo <= v <= hi else None
    return f"a number in [{lo}, {hi}]", check


def _boolean() -> _Check:
    """true or false."""
    return "true or false", lambda v: v if isinstance(v, bool) else None


def _choice(options: tuple[str, ...]) -> _Check:
    """One of a fixed set of strings."""
    return f"one of {', '.join(options)}", lambda v: v if v in options else None


def _text() -> _Check:
    """A non-empty string."""
    return "a non-empty string", lambda v: v if isinstance(v, str) and v else None


_MEMORY = {"rows": _integer(1, MAX_ROWS), "banks": _integer(1)}
# Section name -> (dataclass, field checks); a key absent here is a typo and reported.
_SECTIONS: dict[str, tuple[type, dict[str, _Check]]] = {
    "array": (ArrayConfig, {
        "rows": _integer(1, MAX_ROWS - 1), "cols": _integer(1, MAX_ROWS - 1),
        "dataflow": _choice(DATAFLOWS), "double_buffered_weights": _boolean(),
        "latency": _integer(0, MAX_CYCLES)}),
    "inp": (MemoryConfig, _MEMORY),
    "wgt": (MemoryConfig, _MEMORY),
    "acc": (MemoryConfig, _MEMORY),
    "vector": (VectorConfig, {"lanes": _integer(1, MAX_ROWS - 1),
                              "latency": _integer(0, MAX_CYCLES)}),
    "dram": (DramConfig, {"bytes_per_cycle": _number(MIN_RATE, MAX_RATE),
                          "latency": _integer(0, MAX_CYCLES)}),
    "dma": (DmaConfig, {"max_outstanding": _integer(1, MAX_DEPTH),
                        "issue_cycles": _integer(1, MAX_CYCLES)}),
    "queues": (QueueConfig, {
        "instruction_depth": _integer(1, MAX_DEPTH), "token_depth": _integer(1, MAX_DEPTH),
        "fetch_cycles": _integer(0, MAX_CYCLES)}),
}
# Sections a machine may leave out, and so lack the unit: the field is None then.
_OPTIONAL: dict[str, tuple[type, dict[str, _Check]]] = {
    "requant": (RequantConfig, {"lanes": _integer(1, MAX_ROWS - 1),
                                "latency": _integer(0, MAX_CYCLES)}),
    "datapath": (FloatDatapathConfig, {
        "operand": _choice(("bfloat16",)), "accumulator": _choice(("float32",)),
        "order": _choice(("ascending",)), "rounding": _choice(("nearest_even",)),
        "denormals": _choice(("keep",))}),
}
_SCALARS: dict[str, _Check] = {"name": _text(), "clock_mhz": _number(MIN_RATE, MAX_RATE)}
# Bytes per element of each on-chip memory: int8 scratchpads, an int32 accumulator.
ELEMENT_BYTES = {"inp": 1, "wgt": 1, "acc": 4}
# The same on a float array: bfloat16 scratchpads, a float32 accumulator.
FLOAT_ELEMENT_BYTES = {"inp": 2, "wgt": 2, "acc": 4}


def element_bytes(datapath: FloatDatapathConfig | None, memory: str) -> int:
    """Bytes per element of on-chip ``memory`` (inp, wgt or acc) on a machine whose
    ``datapath`` is this (None: int8 x int8 -> int32)."""
    return (ELEMENT_BYTES if datapath is None else FLOAT_ELEMENT_BYTES)[memory]


class _Findings:
    """Collects problems, each with its field path and YAML span, to raise them at once."""

    def __init__(self, source: str, marks: Mapping[tuple[str, ...], SourceLoc],
                 prefix: tuple[str, ...]) -> None:
        self.source = source
        self.marks = marks
        self.prefix = prefix
        self.items: list[IntrinsicSpecError] = []

    def add(self, path: tuple[str, ...], message: str, at_key: bool = False) -> None:
        """Record ``message`` about the field at ``path`` (its key's span if ``at_key``)."""
        full = self.prefix + path
        loc = self.marks.get((*full, ":key") if at_key else full)
        # A missing field points at its parent's key.
        while loc is None and len(full) > 1:
            full = full[:-1]
            loc = self.marks.get((*full, ":key"))
        # Without YAML marks (a dict), the message itself has to name the source.
        text = message if loc is not None else f"{self.source}: {message}"
        self.items.append(IntrinsicSpecError(text, loc))

    def raise_if_any(self) -> None:
        """Raise one IntrinsicSpecError carrying every finding, if there were any."""
        if not self.items:
            return
        first = self.items[0]
        message = first.message if len(self.items) == 1 else (
            f"{len(self.items)} problems in machine description {self.source}")
        raise IntrinsicSpecError(message, first.loc, tuple(self.items))


def _build(data: Any, marks: Mapping[tuple[str, ...], SourceLoc], source: str,
           prefix: tuple[str, ...] = ("machine",)) -> MachineConfig:
    """Validate ``data`` (a `machine:` mapping) and build the config, or raise every finding."""
    findings = _Findings(source, marks, prefix)
    name = ".".join(prefix)
    if not isinstance(data, Mapping):
        findings.add((), f"{name} requires a mapping, got {type(data).__name__}")
        findings.raise_if_any()
    values: dict[str, Any] = {}
    for key in data:
        if key not in _SECTIONS and key not in _SCALARS and key not in _OPTIONAL:
            known = ", ".join([*_SCALARS, *_SECTIONS, *_OPTIONAL])
            findings.add((str(key),), f"{name} has no field '{key}' (fields: {known})",
                         at_key=True)
    for key, check in _SCALARS.items():
        values[key] = _field(data, (key,), check, findings)
    for key, (kind, checks) in (_SECTIONS | _OPTIONAL).items():
        section = data.get(key)
        if section is None and key in _OPTIONAL:
            continue
        if not isinstance(section, Mapping):
            got = "nothing" if section is None else type(section).__name__
            findings.add((key,), f"{name}.{key} requires a mapping, got {got}")
            continue
        for sub in section:
            if sub not in checks:
                findings.add((key, str(sub)), f"{name}.{key} has no field '{sub}' "
                             f"(fields: {', '.join(checks)})", at_key=True)
        args = {sub: _field(section, (key, sub), check, findings)
                for sub, check in checks.items()}
        rows, banks = args.get("rows"), args.get("banks")
        if kind is MemoryConfig and rows is not None and banks is not None and rows % banks:
            findings.add((key, "banks"),
                         f"{name}.{key}.banks requires a divisor of rows ({rows}), got {banks}")
        values[key] = kind(**args)
    _check_across(values, findings, name)
    findings.raise_if_any()
    return MachineConfig(**values, source=source)


def row_width(array: ArrayConfig, memory: str) -> int:
    """Elements per row of on-chip ``memory`` (inp, wgt or acc) beside ``array``: an inp row
    holds one K-slice of R operands, a wgt row C operands, an acc row C accumulators."""
    return array.rows if memory == "inp" else array.cols


def memory_bytes(config: MachineConfig, memory: str) -> int:
    """The bytes of on-chip ``memory`` (inp, wgt or acc): rows x row width x element."""
    rows = getattr(config, memory).rows
    return rows * row_width(config.array, memory) * element_bytes(config.datapath, memory)


def _check_across(values: Mapping[str, Any], findings: _Findings, name: str) -> None:
    """What no one field shows: the vector unit's lanes (and its requantisation stage's) fit
    the accumulator's rows, and the on-chip memories fit :data:`MAX_SRAM_BYTES` together."""
    array = values.get("array")
    for unit in ("vector", "requant"):
        section = values.get(unit)
        if array is None or section is None or None in (array.cols, section.lanes):
            continue
        cols, lanes = array.cols, section.lanes
        if cols % lanes and lanes % cols:
            findings.add((unit, "lanes"), f"{name}.{unit}.lanes requires a divisor of "
                         f"{name}.array.cols ({cols}), the int32 elements of an accumulator "
                         f"row (or a multiple of it, for a unit wider than a row), got {lanes}")
    sizes = {}
    for memory in ELEMENT_BYTES:
        element = element_bytes(values.get("datapath"), memory)
        rows = getattr(values.get(memory), "rows", None)
        width = row_width(array, memory) if array is not None else None
        if width is None or rows is None:
            return  # a refused field is reported already
        sizes[memory] = rows * width * element
    total = sum(sizes.values())
    if total > MAX_SRAM_BYTES:
        largest = max(sizes, key=sizes.__getitem__)
        parts = ", ".join(f"{m} {_size_text(b)}" for m, b in sizes.items())
        findings.add((largest, "rows"), f"the on-chip memories ({name}.inp, .wgt and .acc) "
                     f"require at most {_size_text(MAX_SRAM_BYTES)} together (the simulator "
                     f"holds them all), got {_size_text(total)} ({parts}); shrink "
                     f"{name}.{largest}.rows or the array")


def _size_text(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes} bytes"


def _field(data: Mapping[str, Any], path: tuple[str, ...], check: _Check,
           findings: _Findings) -> Any:
    """Check one field; record a finding (and return None) when it is missing or bad."""
    requirement, accept = check
    dotted = ".".join(findings.prefix + path)
    if path[-1] not in data:
        findings.add(path[:-1], f"{dotted} is required: {requirement}")
        return None
    value = data[path[-1]]
    accepted = accept(value)
    if accepted is None:
        findings.add(path, f"{dotted} requires {requirement}, got {value!r}")
    return accepted
