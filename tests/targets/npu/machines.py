"""NPUs written as YAML, the way a vendor would: a ``machine:`` section for the simulator and a
family of intrinsics for the tensorizer, in one file.

:func:`npu_yaml` writes a machine with an R x C array and a family whose GEMM computes
``i x C x k`` tiles (k <= R); it zeroes its accumulator by a resetting GEMM variant or, with
``zero="fill"``, by a separate fill intrinsic on the vector unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Npu:
    """One machine and the GEMM shape its family declares."""

    name: str
    rows: int                       # R
    cols: int                       # C
    i: int                          # rows of one GEMM call
    k: int                          # its reduction depth, <= R
    dataflow: str = "weight_stationary"
    inp_rows: int = 1024
    wgt_rows: int = 512
    acc_rows: int = 1024
    banks: int = 2
    bytes_per_cycle: float = 16
    double_buffered_weights: bool = True
    zero: str = "reset"             # "reset": a resetting GEMM variant; "fill": a fill intrinsic

    def write(self, directory: Path) -> Path:
        """The description as ``directory/<name>.yaml``."""
        path = directory / f"{self.name}.yaml"
        path.write_text(npu_yaml(self))
        return path


def npu_yaml(npu: Npu) -> str:
    """The whole description of ``npu`` (module docs)."""
    r, c, i, k = npu.rows, npu.cols, npu.i, npu.k
    if npu.zero == "reset":
        gemm = f"""
  - name: {npu.name}_gemm{{suffix}}
    kind: compute
    variants:
      - {{suffix: "", reset: false, flag: ""}}
      - {{suffix: _reset, reset: true, flag: ", reset"}}
    resets: "{{reset}}"
{_gemm_body(npu, "{flag}")}"""
    else:
        gemm = f"""
  - name: {npu.name}_gemm
    kind: compute
    fill: {{C: {npu.name}_zero}}
{_gemm_body(npu, "")}
  - name: {npu.name}_zero
    kind: fill
    iterators: [{{name: i, extent: {i}}}, {{name: j, extent: {c}}}]
    operands:
      - {{name: dst, role: output, shape: [{i}, {c}], dtype: int32, scope: npu.acc}}
    semantics: "dst[i, j] = i32(0)"
    emit: {{npu: "vec.fill acc[{{dst}}], rows={i}, imm=0"}}
    cost: {{latency: {i + 3}, interval: {i}}}
    reference: docs/simulator.md#vec"""
    return f"""machine:
  name: {npu.name}
  clock_mhz: 500
  array: {{rows: {r}, cols: {c}, dataflow: {npu.dataflow},
          double_buffered_weights: {str(npu.double_buffered_weights).lower()}, latency: 2}}
  inp: {{rows: {npu.inp_rows}, banks: {npu.banks}}}
  wgt: {{rows: {npu.wgt_rows}, banks: {npu.banks}}}
  acc: {{rows: {npu.acc_rows}, banks: {npu.banks}}}
  vector: {{lanes: {c}, latency: 2}}
  dram: {{bytes_per_cycle: {npu.bytes_per_cycle}, latency: 40}}
  dma: {{max_outstanding: 4, issue_cycles: 1}}
  queues: {{instruction_depth: 16, token_depth: 8, fetch_cycles: 1}}

target: npu
description: a {r}x{c} {npu.dataflow} array computing {i}x{c}x{k} tiles
scopes:
  global: {{description: DRAM}}
  npu.inp: {{capacity: {npu.inp_rows * r}, dtype: int8, banks: {npu.banks}}}
  npu.wgt: {{capacity: {npu.wgt_rows * c}, dtype: int8, banks: {npu.banks}}}
  npu.acc: {{capacity: {npu.acc_rows * c * 4}, dtype: int32, banks: {npu.banks}}}

intrinsics:{gemm}

  - name: {npu.name}_load_{{mem}}
    kind: load
    variants:
      - {{mem: inp, rows: {i}, cols: {k}}}
      - {{mem: wgt, rows: {k}, cols: {c}}}
    iterators: [{{name: i, extent: "{{rows}}"}}, {{name: j, extent: "{{cols}}"}}]
    operands:
      - {{name: dst, role: output, shape: ["{{rows}}", "{{cols}}"], dtype: int8,
         scope: "npu.{{mem}}"}}
      - {{name: src, role: input, shape: ["{{rows}}", "{{cols}}"], dtype: int8, scope: global}}
    semantics: "dst[i, j] = src[i, j]"
    emit:
      npu: "load {{mem}}[{{dst}}], dram[{{src}}], rows={{rows}}, cols={{cols}}, stride={{src.ld_bytes}}"
    cost: {{latency: 60, interval: 4}}
    reference: docs/simulator.md#load

  - name: {npu.name}_store_acc
    kind: store
    iterators: [{{name: i, extent: {i}}}, {{name: j, extent: {c}}}]
    operands:
      - {{name: dst, role: output, shape: [{i}, {c}], dtype: int32, scope: global}}
      - {{name: src, role: input, shape: [{i}, {c}], dtype: int32, scope: npu.acc}}
    semantics: "dst[i, j] = src[i, j]"
    emit:
      npu: "store dram[{{dst}}], acc[{{src}}], rows={i}, cols={c}, stride={{dst.ld_bytes}}"
    cost: {{latency: 60, interval: 8}}
    reference: docs/simulator.md#store
"""


def _gemm_body(npu: Npu, flag: str) -> str:
    i, c, k, name = npu.i, npu.cols, npu.k, npu.name
    return f"""    iterators:
      - {{name: i, extent: {i}}}
      - {{name: j, extent: {c}}}
      - {{name: k, extent: {k}, kind: reduce}}
    operands:
      - {{name: A, role: input, shape: [{i}, {k}], dtype: int8, scope: npu.inp}}
      - {{name: B, role: input, shape: [{k}, {c}], dtype: int8, scope: npu.wgt}}
      - {{name: C, role: accumulator, shape: [{i}, {c}], dtype: int32, scope: npu.acc}}
    semantics: "C[i, j] += i32(A[i, k]) * i32(B[k, j])"
    loads: {{A: {name}_load_inp, B: {name}_load_wgt}}
    stores: {{C: {name}_store_acc}}
    emit:
      npu: "gemm acc[{{C}}], inp[{{A}}], wgt[{{B}}], rows={i}, k={k}{flag}"
    cost: {{latency: {i + 2 * npu.rows}, interval: {i}}}
    reference: docs/simulator.md#gemm"""
