"""The machine of one sweep point: the base machine's `machine:` section with the point's
fields changed, the quantities constraints and reports read from it (PEs, scratchpad bytes),
and, for ``family: generated``, an intrinsic family whose GEMM tile fits the point's array.

A machine travels to its worker as YAML text (a `machine:` section, plus the family when
generated), so the worker reads it with the same bounded reader as ``tensorize run
--machine FILE``, and the same text written to a file reproduces the point with that command.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import yaml

from simulator.config import ELEMENT_BYTES

# The descriptions refuse an intrinsic of more than 2^20 iteration points
# (intrinsics/limits.py); a generated GEMM of i x C x R stays within it by its row count i.
_MAX_POINTS = 1 << 20


def field_paths(machine: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every leaf of a `machine:` section by dotted path (``array.rows`` -> 32)."""
    paths: dict[str, Any] = {}
    for key, value in machine.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            paths.update(field_paths(value, f"{path}."))
        else:
            paths[path] = value
    return paths


def with_fields(machine: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``machine`` with each dotted path of ``values`` set (the paths exist: the
    sweep reader checked them)."""
    changed = copy.deepcopy(dict(machine))
    for path, value in values.items():
        *parents, leaf = path.split(".")
        node = changed
        for part in parents:
            node = node[part]
        node[leaf] = value
    return changed


# The fields a point's name spells as its array: npu-16x64-ws.
ARRAY_FIELDS = ("array.rows", "array.cols", "array.dataflow")
# Dataflows as machine names spell them (the built-in examples' npu-32x32-os).
_DATAFLOW_SHORT = {"weight_stationary": "ws", "output_stationary": "os"}


def point_name(base_name: str, machine: Mapping[str, Any], fields: Mapping[str, Any]) -> str:
    """The name of a point's machine, after the fields it varies: where the array varies,
    ``npu-R x C-dataflow`` (``npu-16x64-ws``), else the base's name; then every other varied
    field as ``path=value``. A base named ``npu-32x32-os`` swept to a 16x64 array is so
    ``npu-16x64-os``, never a name that states another array."""
    array = machine["array"]
    if any(path in fields for path in ARRAY_FIELDS):
        dataflow = _DATAFLOW_SHORT.get(array["dataflow"], array["dataflow"])
        head = f"npu-{array['rows']}x{array['cols']}-{dataflow}"
    else:
        head = base_name
    rest = [f"{path}={value}" for path, value in fields.items() if path not in ARRAY_FIELDS]
    return " ".join([head, *rest])


def memory_bytes(machine: Mapping[str, Any], memory: str) -> int:
    """The bytes of scratchpad ``memory`` (inp, wgt or acc): rows x row width x element."""
    width = machine["array"]["rows"] if memory == "inp" else machine["array"]["cols"]
    return int(machine[memory]["rows"]) * int(width) * ELEMENT_BYTES[memory]


def area(machine: Mapping[str, Any]) -> dict[str, int]:
    """The area proxy: processing elements and on-chip SRAM bytes (inp + wgt + acc)."""
    return {"pes": int(machine["array"]["rows"]) * int(machine["array"]["cols"]),
            "sram_bytes": sum(memory_bytes(machine, m) for m in ELEMENT_BYTES)}


def quantities(machine: Mapping[str, Any]) -> dict[str, float]:
    """What a constraint may name: every numeric field by path, ``pes``, each memory's
    bytes (``inp.bytes``, ``wgt.bytes``, ``acc.bytes``) and ``sram.bytes``."""
    values = {path: value for path, value in field_paths(machine).items()
              if isinstance(value, (int, float)) and not isinstance(value, bool)}
    sizes = area(machine)
    values["pes"] = sizes["pes"]
    values["sram.bytes"] = sizes["sram_bytes"]
    for memory in ELEMENT_BYTES:
        values[f"{memory}.bytes"] = memory_bytes(machine, memory)
    return values


def machine_text(machine: Mapping[str, Any], generated_family: bool) -> str:
    """The YAML of one point: its `machine:` section, and its generated family when asked."""
    text = yaml.safe_dump({"machine": dict(machine)}, sort_keys=False)
    if generated_family:
        text += family_text(machine)
    return text


def family_text(machine: Mapping[str, Any]) -> str:
    """An NPU family for the array of ``machine``: a GEMM computing ``i x C x R`` tiles
    (``i`` = R rows, fewer where the descriptions' size limit requires), with a resetting
    variant to start an accumulator tile, and the loads and store its operands need; the
    scopes' capacities are the machine's memories (docs/intrinsics.md)."""
    r, c = int(machine["array"]["rows"]), int(machine["array"]["cols"])
    i = max(1, min(r, _MAX_POINTS // (r * c)))
    scopes = "\n".join(
        f"  npu.{m}: {{capacity: {memory_bytes(machine, m)}, dtype: "
        f"{'int32' if m == 'acc' else 'int8'}, banks: {machine[m]['banks']}}}"
        for m in ELEMENT_BYTES)
    load = "load {mem}[{dst}], dram[{src}], rows={rows}, cols={cols}, stride={src.ld_bytes}"
    return f"""
target: npu
description: generated by tensorize sweep for a {r}x{c} array, {i}x{c}x{r} GEMM tiles
scopes:
  global: {{description: DRAM}}
{scopes}
intrinsics:
  - name: sweep_gemm{{suffix}}
    kind: compute
    variants:
      - {{suffix: "", reset: false, flag: ""}}
      - {{suffix: _reset, reset: true, flag: ", reset"}}
    resets: "{{reset}}"
    iterators:
      - {{name: i, extent: {i}}}
      - {{name: j, extent: {c}}}
      - {{name: k, extent: {r}, kind: reduce}}
    operands:
      - {{name: A, role: input, shape: [{i}, {r}], dtype: int8, scope: npu.inp}}
      - {{name: B, role: input, shape: [{r}, {c}], dtype: int8, scope: npu.wgt}}
      - {{name: C, role: accumulator, shape: [{i}, {c}], dtype: int32, scope: npu.acc}}
    semantics: "C[i, j] += i32(A[i, k]) * i32(B[k, j])"
    loads: {{A: sweep_load_inp, B: sweep_load_wgt}}
    stores: {{C: sweep_store_acc}}
    emit:
      npu: "gemm acc[{{C}}], inp[{{A}}], wgt[{{B}}], rows={i}, k={r}{{flag}}"
    cost: {{latency: {i + 2 * r}, interval: {i}}}
    reference: docs/simulator.md#gemm
  - name: sweep_load_{{mem}}
    kind: load
    variants:
      - {{mem: inp, rows: {i}, cols: {r}}}
      - {{mem: wgt, rows: {r}, cols: {c}}}
    iterators: [{{name: i, extent: "{{rows}}"}}, {{name: j, extent: "{{cols}}"}}]
    operands:
      - {{name: dst, role: output, shape: ["{{rows}}", "{{cols}}"], dtype: int8,
         scope: "npu.{{mem}}"}}
      - {{name: src, role: input, shape: ["{{rows}}", "{{cols}}"], dtype: int8, scope: global}}
    semantics: "dst[i, j] = src[i, j]"
    emit:
      npu: "{load}"
    cost: {{latency: {machine["dram"]["latency"]}, interval: 4}}
    reference: docs/simulator.md#load
  - name: sweep_store_acc
    kind: store
    iterators: [{{name: i, extent: {i}}}, {{name: j, extent: {c}}}]
    operands:
      - {{name: dst, role: output, shape: [{i}, {c}], dtype: int32, scope: global}}
      - {{name: src, role: input, shape: [{i}, {c}], dtype: int32, scope: npu.acc}}
    semantics: "dst[i, j] = src[i, j]"
    emit:
      npu: "store dram[{{dst}}], acc[{{src}}], rows={i}, cols={c}, stride={{dst.ld_bytes}}"
    cost: {{latency: {machine["dram"]["latency"]}, interval: 8}}
    reference: docs/simulator.md#store
"""
