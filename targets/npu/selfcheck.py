"""The NPU's part of the intrinsic self-check: each compute intrinsic's emitted instruction,
run on the simulator, against its semantics.

For an intrinsic, a harness function loads every operand it reads from DRAM into its
on-chip scope with the family's load intrinsics, calls the intrinsic once, stores what it
writes back to DRAM, and runs on the simulator; the result is compared with the independent
numpy model of the semantics (:mod:`intrinsics.oracle`), exactly. A float product-sum that
states its ``accumulation`` is compared bit for bit with the hardware-order model
(:func:`intrinsics.oracle.hardware_model`): the simulator's float array adds in that order
(docs/simulator.md, "A float array"). A one-row operand (a bias
row) travels as row 0 of a tile. Scalars whose template needs their base-2 logarithm are
drawn as powers of two.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import ir
from intrinsics.model import Intrinsic, Operand
from intrinsics.oracle import UnsupportedSemantics, hardware_model, numpy_model
from intrinsics.selfcheck import (
    ERROR,
    MISMATCH,
    OK,
    SKIPPED,
    CheckResult,
    compare,
    random_inputs,
)
from intrinsics.templates import placeholders
from simulator import MachineConfig
from targets.npu.memory import SCOPE_MEMORY

Lookup = Callable[[str], Intrinsic]


class SimulatorChecker:
    """Self-check evidence from the simulator, for the ``npu`` target's compute intrinsics,
    run on the machine ``config`` (the family's own, read by the caller)."""

    name = "simulator"

    def __init__(self, intrinsics: list[Intrinsic], config: MachineConfig) -> None:
        self.by_name = {i.name: i for i in intrinsics}
        self.config = config

    def applies(self, intrinsic: Intrinsic) -> bool:
        return intrinsic.target == "npu" and intrinsic.kind == "compute"

    def check(self, intrinsic: Intrinsic, rng: np.random.Generator) -> CheckResult:
        from targets import npu

        inputs = random_inputs(intrinsic, rng)
        for operand in _log2_scalars(intrinsic):
            inputs[operand.name] = np.asarray(2 ** int(rng.integers(0, 31)),
                                              operand.dtype.numpy)
        try:
            stated = intrinsic.accumulation is not None
            want = (hardware_model if stated else numpy_model)(intrinsic, inputs)
            func, arrays = self.harness(intrinsic, inputs)
        except UnsupportedSemantics as err:
            return CheckResult(intrinsic.name, self.name, SKIPPED, detail=str(err))
        except LookupError as err:
            return CheckResult(intrinsic.name, self.name, ERROR, detail=str(err))
        try:
            run = npu.run(func, arrays, self.config, lookup=self.by_name.__getitem__)
        except ir.TensorizeError as err:
            return CheckResult(intrinsic.name, self.name, ERROR,
                               detail=f"the simulated run failed: {err.message}")
        output = intrinsic.output
        got = _unpad(run.outputs[f"{output.name}_out"], output)
        if stated:
            return self.compare_bits(intrinsic, got, want)
        return compare(intrinsic, got, want, inputs, self.name)

    def compare_bits(self, intrinsic: Intrinsic, got: np.ndarray, want: np.ndarray
                     ) -> CheckResult:
        """The simulator's float output against the hardware-order model, bit for bit (a
        stated order and rounding leave no tolerance)."""
        unsigned = np.dtype(f"u{want.dtype.itemsize}")
        differ = got.view(unsigned) != want.view(unsigned)
        with np.errstate(invalid="ignore"):
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        worst = float(np.nanmax(diff, initial=0.0))
        if not differ.any():
            return CheckResult(intrinsic.name, self.name, OK, worst, 0.0)
        where = tuple(int(i) for i in np.unravel_index(int(np.argmax(differ)), differ.shape))
        return CheckResult(intrinsic.name, self.name, MISMATCH, worst, 0.0,
                           detail="bits against the hardware order", where=where)

    def harness(self, intrinsic: Intrinsic, inputs: dict[str, np.ndarray]
                ) -> tuple[ir.PrimFunc, dict[str, np.ndarray]]:
        """The function that loads, calls once and stores, and its DRAM inputs."""
        params, allocs, stmts, args, arrays = [], [], [], [], {}
        stores = []
        for operand in intrinsic.operands:
            if operand.is_scalar:
                args.append(ir.const(inputs[operand.name].item(), operand.dtype))
                continue
            if operand.scope not in SCOPE_MEMORY:
                raise LookupError(f"operand {operand.name} of {intrinsic.name} lives in "
                                  f"{operand.scope}, which the harness cannot fill")
            tile = _tile_shape(operand)
            chip = ir.Buffer(f"{operand.name}_chip", tile, operand.dtype, operand.scope)
            allocs.append(chip)
            args.append(_region(chip, operand))
            if operand.role in ("input", "accumulator"):
                source = ir.Buffer(operand.name, tile, operand.dtype)
                params.append(source)
                arrays[source.name] = _pad(inputs[operand.name], tile)
                load = self.companion("load", operand)
                stmts.append(ir.IntrinsicCall(load.name, (ir.BufferRegion.full(chip),
                                                          ir.BufferRegion.full(source))))
            if operand.role in ("output", "accumulator"):
                target = ir.Buffer(f"{operand.name}_out", tile, operand.dtype)
                params.append(target)
                store = self.companion("store", operand)
                stores.append(ir.IntrinsicCall(store.name, (ir.BufferRegion.full(target),
                                                            ir.BufferRegion.full(chip))))
        stmts.append(ir.IntrinsicCall(intrinsic.name, tuple(args)))
        stmts.extend(stores)
        body = ir.make_root(ir.seq(*stmts), tuple(allocs))
        return ir.PrimFunc(f"check_{intrinsic.name}", tuple(params), body), arrays

    def companion(self, kind: str, operand: Operand) -> Intrinsic:
        """The family's load (store) intrinsic moving ``operand``'s tiles into (out of) its
        scope."""
        side = "output" if kind == "load" else "input"
        for other in self.by_name.values():
            if other.kind != kind:
                continue
            chip = next((o for o in other.operands if o.role == side), None)
            if chip is not None and chip.scope == operand.scope and \
                    chip.dtype == operand.dtype and \
                    chip.shape == _tile_shape(operand):
                return other
        raise LookupError(f"no {kind} intrinsic moves {operand.dtype} tiles of "
                          f"{operand.scope}")


def _log2_scalars(intrinsic: Intrinsic) -> list[Operand]:
    names = {p.operand for p in placeholders(intrinsic.emit.get("npu", ""))
             if p.attribute == "log2"}
    return [o for o in intrinsic.operands if o.name in names]


def _tile_shape(operand: Operand) -> tuple[int, ...]:
    """A one-row operand travels as a square tile (its row 0)."""
    shape = operand.shape
    return (shape[0], shape[0]) if len(shape) == 1 else shape


def _region(chip: ir.Buffer, operand: Operand) -> ir.BufferRegion:
    if len(operand.shape) == 1:
        return ir.BufferRegion(chip, (ir.Range(ir.IntImm(0), ir.IntImm(1)),
                                      ir.Range(ir.IntImm(0), ir.IntImm(operand.shape[0]))))
    return ir.BufferRegion.full(chip)


def _pad(value: np.ndarray, tile: tuple[int, ...]) -> np.ndarray:
    if value.shape == tile:
        return value
    padded = np.zeros(tile, value.dtype)
    padded[0] = value
    return padded


def _unpad(value: np.ndarray, operand: Operand) -> np.ndarray:
    return value[0] if len(operand.shape) == 1 else value
