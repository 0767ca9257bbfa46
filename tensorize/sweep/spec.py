"""Reading a sweep description (YAML) with the care of the intrinsic descriptions: the
bounded safe reader (:func:`intrinsics.source.read_yaml`), every problem collected at its
file, line and field, and raised once as a :class:`SweepSpecError`.

```yaml
name: npu-arrays                  # optional; names the output directory
target: npu                       # the only target a sweep simulates today
base: ../machines/npu32x32.yaml   # the machine every point starts from (default: built-in)
family: generated                 # generated (default): a GEMM family fitted to each array;
                                  # base: the base file's family (or the built-in one)
vary:                             # fields of the machine: section, by dotted path
  array.rows: [16, 32]            # a list of values
  dram.bytes_per_cycle: {from: 16, to: 64, step: 16}   # a grid: 16, 32, 48, 64
  inp.rows: {from: 1024, to: 8192, times: 2}          # a geometric grid
constraints:                      # machines breaking one are left out (constraints.py)
  - npu.inp bytes <= 512 KiB
workloads:
  - kernel: ../script/gemm_int8.py
  - layers:
      - {name: res3x3, conv2d: {height: 30, width: 30, channels: 128, out_channels: 128,
                                kernel: 3}}
plots:
  heatmap: [array.rows, dram.bytes_per_cycle]   # utilisation over two varied fields
```

Relative paths are relative to the sweep file.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from intrinsics import limits
from intrinsics.source import Findings, YNode, read_yaml
from ir.errors import IntrinsicSpecError, SourceLoc, TensorizeError
from tensorize.sweep.constraints import Constraint, ConstraintError, parse_constraint
from tensorize.sweep.machines import field_paths, quantities
from tensorize.sweep.workloads import KINDS, Workload

TOP_LEVEL = ("name", "target", "base", "family", "vary", "constraints", "workloads", "plots")
FAMILIES = ("generated", "base")
# Values one varied field may take, and the points (machines x workloads) of one sweep.
MAX_VALUES = 10_000
MAX_POINTS = 100_000


class SweepSpecError(IntrinsicSpecError):
    """A sweep description is invalid; ``findings`` lists every problem at file:line."""


@dataclass(frozen=True)
class Sweep:
    """A sweep description, read and checked.

    ``base_machine`` is the base machine's `machine:` section (validated); ``base_extra``
    the base file's other sections (its family), used with ``family: base``; ``vary`` each
    varied field's values in order; ``heatmap`` the two fields of the utilisation map."""

    path: Path
    name: str
    target: str
    base: Path | None
    base_machine: dict[str, Any]
    base_extra: dict[str, Any]
    family: str
    vary: dict[str, tuple[Any, ...]]
    constraints: tuple[Constraint, ...]
    workloads: tuple[Workload, ...]
    heatmap: tuple[str, ...]


def load_sweep(path: str | Path) -> Sweep:
    """Read and check the sweep description at ``path``; raises SweepSpecError."""
    file = Path(path)
    findings = Findings(str(file))
    root = _read(file, findings)
    if root is None:
        raise _error(findings, file)
    for key, child in root.value.items():
        if key not in TOP_LEVEL:
            close = difflib.get_close_matches(key, TOP_LEVEL, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            findings.add(child.key_loc, f"unknown field {key!r}; a sweep has "
                                        f"{', '.join(TOP_LEVEL)}{hint}")
    here = file.resolve().parent
    target = _text(root, "target", findings, "npu")
    if target != "npu":
        findings.add(root.at("target"), f"target requires npu (the simulated NPU), got "
                                        f"{target!r}")
    family = _text(root, "family", findings, "generated")
    if family not in FAMILIES:
        findings.add(root.at("family"), f"family requires one of {', '.join(FAMILIES)}, got "
                                        f"{family!r}")
    base, machine, extra = _base(root, here, findings)
    vary = _vary(root.get("vary"), root, machine, findings)
    constraints = _constraints(root.get("constraints"), machine, findings)
    workloads = _workloads(root.get("workloads"), root, here, findings)
    heatmap = _heatmap(root.get("plots"), vary, findings)
    machines = 1
    for values in vary.values():
        machines *= len(values)
    if machines * max(len(workloads), 1) > MAX_POINTS:
        findings.add(root.at("vary"), f"a sweep requires at most {MAX_POINTS} points "
                                      f"(machines x workloads), got {machines} x "
                                      f"{len(workloads)}; vary fewer values")
    name = _text(root, "name", findings, re.sub(r"[^\w.-]", "_", file.stem))
    if not re.fullmatch(r"[\w.-]+", name):
        findings.add(root.at("name"), f"name requires letters, digits, '.', '-' or '_' (it "
                                      f"names the output directory), got {name!r}")
    if findings:
        raise _error(findings, file)
    return Sweep(file, name, target, base, machine, extra, family, vary, tuple(constraints),
                 tuple(workloads), heatmap)


def _error(findings: Findings, file: Path) -> SweepSpecError:
    error = findings.error(f"sweep description {file}")
    return SweepSpecError(error.message, error.loc, error.findings)


def _read(file: Path, findings: Findings) -> YNode | None:
    try:
        with file.open("rb") as stream:  # read_yaml refuses what is past the bound
            empty = not stream.read(limits.MAX_DOCUMENT_BYTES + 1).strip()
    except OSError as err:
        findings.add(None, f"{file}: cannot read the sweep description: {err.strerror}")
        return None
    if empty:
        findings.add(SourceLoc(str(file), 1, 1), "the sweep description is empty; it requires "
                                                 "'vary' and 'workloads'")
        return None
    root = read_yaml(file, findings)
    if root is not None and not root.is_mapping:
        findings.add(root.loc, "a sweep description requires a mapping with 'vary' and "
                               "'workloads'")
        return None
    return root


def _text(root: YNode, key: str, findings: Findings, default: str) -> str:
    node = root.get(key)
    if node is None:
        return default
    if not isinstance(node.value, str):
        findings.add(node.loc, f"{key} requires text, got {node.value!r}")
        return default
    return node.value


def _base(root: YNode, here: Path, findings: Findings
          ) -> tuple[Path | None, dict[str, Any], dict[str, Any]]:
    """The base file, its validated `machine:` section and its other sections."""
    from simulator import load_machine as builtin_machine
    from targets.npu import load_machine

    node = root.get("base")
    if node is None:
        return None, builtin_machine().to_dict(), {}
    if not isinstance(node.value, str):
        findings.add(node.loc, f"base requires the path of a machine file, got {node.value!r}")
        return None, builtin_machine().to_dict(), {}
    path = (here / node.value).resolve()
    try:
        machine = load_machine(path).to_dict()
        extra = yaml.safe_load(path.read_text())
    except TensorizeError as err:
        findings.add(node.loc, f"base requires a valid machine file, got {node.value} "
                               "(its problems follow)")
        for problem in getattr(err, "findings", ()) or (err,):
            findings.add(problem.loc, problem.message)
        return None, builtin_machine().to_dict(), {}
    return path, machine, {k: v for k, v in extra.items() if k != "machine"}


def _vary(node: YNode | None, root: YNode, machine: dict[str, Any], findings: Findings
          ) -> dict[str, tuple[Any, ...]]:
    if node is None or not node.is_mapping or not node.value:
        findings.add(node.loc if node is not None else root.loc,
                     "vary requires a mapping of machine fields (e.g. array.rows) to lists or "
                     "grids of values")
        return {}
    fields = field_paths(machine)
    vary = {}
    for path, values in node.value.items():
        at = values.key_loc or values.loc
        if path not in fields:
            close = difflib.get_close_matches(path, fields, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            findings.add(at, f"vary.{path} requires a field of the machine: section "
                             f"({', '.join(fields)}){hint}")
            continue
        parsed = _values(path, values, fields[path], findings)
        if parsed:
            vary[path] = parsed
    return vary


def _values(path: str, node: YNode, example: Any, findings: Findings) -> tuple[Any, ...]:
    """A varied field's values: a list, or a grid ``{from, to, step}`` / ``{from, to,
    times}``; each of the base value's type (a number for a number)."""
    if node.is_sequence:
        values = node.value
        if not values:
            findings.add(node.loc, f"vary.{path} requires at least one value, got []")
        for value in values:
            if not _same_kind(value.value, example):
                findings.add(value.loc, f"vary.{path} requires values like the base "
                                        f"machine's {example!r}, got {value.value!r}")
        if len(values) > MAX_VALUES:
            findings.add(node.loc, f"vary.{path} requires at most {MAX_VALUES} values")
        return tuple(dict.fromkeys(v.value for v in values))  # a value listed twice: once
    if node.is_mapping:
        return _grid(path, node, example, findings)
    findings.add(node.loc, f"vary.{path} requires a list of values or a grid {{from, to, "
                           f"step}} or {{from, to, times}}, got {node.value!r}")
    return ()


def _grid(path: str, node: YNode, example: Any, findings: Findings) -> tuple[Any, ...]:
    keys = set(node.value)
    if keys not in ({"from", "to", "step"}, {"from", "to", "times"}):
        findings.add(node.loc, f"vary.{path} requires a grid of from, to and step (or times), "
                               f"got {', '.join(sorted(keys))}")
        return ()
    numbers = {k: node.value[k].value for k in keys}
    kind = "whole number" if isinstance(example, int) else "number"
    bad = [k for k, v in numbers.items() if not _is_number(v)
           or (isinstance(example, int) and not isinstance(v, int))]
    for key in bad:
        findings.add(node.at(key), f"vary.{path}.{key} requires a {kind} like the base "
                                   f"machine's {example!r}, got {numbers[key]!r}")
    if not _is_number(example):
        findings.add(node.loc, f"vary.{path} requires a list: the field is not a number "
                               f"({example!r})")
    if bad or not _is_number(example):
        return ()
    low, high = numbers["from"], numbers["to"]
    growth = "step" if "step" in keys else "times"
    factor = numbers[growth]
    wrong = low > high or (factor <= 0 if growth == "step" else factor <= 1 or low <= 0)
    if wrong:
        findings.add(node.loc, f"vary.{path} requires from <= to, and a positive step or "
                               f"times > 1 with from > 0, got from {low}, to {high}, "
                               f"{growth} {factor}")
        return ()
    values, value = [], low
    while value <= high and len(values) <= MAX_VALUES:
        values.append(value)
        value = value + factor if growth == "step" else value * factor
    if len(values) > MAX_VALUES:
        findings.add(node.loc, f"vary.{path} requires at most {MAX_VALUES} values")
        return ()
    return tuple(values)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same_kind(value: Any, example: Any) -> bool:
    if _is_number(example):
        return _is_number(value) and (isinstance(value, int) or isinstance(example, float))
    return type(value) is type(example)


def _constraints(node: YNode | None, machine: dict[str, Any], findings: Findings
                 ) -> list[Constraint]:
    if node is None:
        return []
    if not node.is_sequence:
        findings.add(node.loc, "constraints requires a list of comparisons such as "
                               "'npu.inp bytes <= 512 KiB'")
        return []
    names = set(quantities(machine))
    parsed = []
    for item in node.value:
        if not isinstance(item.value, str):
            findings.add(item.loc, f"a constraint requires text such as 'pes <= 1024', got "
                                   f"{item.value!r}")
            continue
        try:
            parsed.append(parse_constraint(item.value, names))
        except ConstraintError as err:
            quoted = 1 if item.style in ("'", '"') else 0
            loc = SourceLoc(item.loc.file, item.loc.line, item.loc.col + quoted + err.column)
            findings.add(loc, f"constraints: {err.message}")
    return parsed


def _workloads(node: YNode | None, root: YNode, here: Path, findings: Findings
               ) -> list[Workload]:
    if node is None or not node.is_sequence or not node.value:
        findings.add(node.loc if node is not None else root.loc,
                     f"workloads requires a list of entries, each one of {', '.join(KINDS)}")
        return []
    workloads: list[Workload] = []
    named_at: dict[str, SourceLoc] = {}
    for item in node.value:
        kinds = [k for k in KINDS if item.get(k) is not None]
        if len(kinds) != 1:
            hint = ("; a model's layers are chosen with select: (op, window, name)"
                    if item.get("model") is not None and item.get("layers") is not None
                    else "")
            findings.add(item.loc, f"a workload requires exactly one of {', '.join(KINDS)}"
                                   f"{hint}")
            continue
        for workload in KINDS[kinds[0]](item, here, findings):
            if workload.name in named_at:
                first = named_at[workload.name]
                where = "more than once in this entry" if first == item.loc else \
                    f"here and at {first}"
                findings.add(item.loc, f"workloads require distinct names, got "
                                       f"{workload.name!r} {where}; give the kernel entry a "
                                       "name: (or a func:), the layer a name:")
            named_at.setdefault(workload.name, item.loc)
            workloads.append(workload)
    return workloads


def _heatmap(node: YNode | None, vary: dict[str, tuple[Any, ...]], findings: Findings
             ) -> tuple[str, ...]:
    default = tuple(vary)[:2]
    if node is None:
        return default
    chosen = node.get("heatmap") if node.is_mapping else None
    if not node.is_mapping or set(node.value) != {"heatmap"} or chosen is None:
        findings.add(node.loc, "plots requires 'heatmap: [FIELD, FIELD]' (two varied fields)")
        return default
    fields = chosen.plain() if chosen.is_sequence else None
    if not fields or len(fields) != 2 or any(f not in vary for f in fields) or \
            fields[0] == fields[1]:
        findings.add(chosen.loc, f"plots.heatmap requires two different varied fields "
                                 f"({', '.join(vary)}), got {chosen.plain()!r}")
        return default
    return tuple(fields)
