"""The ``emit.llvm`` templates of the CPU families, read as one LLVM instruction each.

A template is one line of LLVM IR whose ``{operand}`` placeholders stand for register values
(or, after ``ptr``, an address). The description's grammar (``intrinsics.grammars``) admitted
it at load time; four of its shapes are what this code generator emits, and any other is
refused when the template is first used:

- ``{D} = call <ty> @name(<ty> {X}, ...)``: an LLVM intrinsic (sdot, smmla, vpdpbusd...);
  an argument may be ``ptr {X}``, the address of a memory operand, and the result ``[N x
  <ty>]``, N registers (``ld1x4``: the intrinsic returns them as a literal struct, which is
  what the code generator declares and calls; ``D`` is then N consecutive registers);
- ``{D} = load <ty>, ptr {S}[, align N]``: a register filled from memory;
- ``store <ty> {S}, ptr {D}[, align N]``: a register written to memory;
- ``{D} = bitcast <ty> zeroinitializer to <ty>``: a zeroed register.

``align N`` is what the instruction may assume of its address, and the code generator emits
exactly that (an aligned vector move faults on x86 when the address is not aligned); a load or
store without it assumes nothing (alignment 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llvmlite import ir as ll

from targets.cpu.errors import EmitError

_TYPE = r"<\d+ x (?:i\d+|half|bfloat|float|double)>"
# Only LLVM intrinsics: the description's grammar admits no other callee, and the backend
# declares whatever name it is given.
_CALL = re.compile(rf"^\{{(\w+)\}} = call ({_TYPE}|\[\d x {_TYPE}\]) @(llvm\.[\w.]+)\((.*)\)$")
_ARG = re.compile(rf"^({_TYPE}|ptr) \{{(\w+)\}}$")
_ALIGN = r"(?:, align (\d+))?"
_LOAD = re.compile(rf"^\{{(\w+)\}} = load ({_TYPE}), ptr \{{(\w+)\}}{_ALIGN}$")
_STORE = re.compile(rf"^store ({_TYPE}) \{{(\w+)\}}, ptr \{{(\w+)\}}{_ALIGN}$")
_ZERO = re.compile(rf"^\{{(\w+)\}} = bitcast ({_TYPE}) zeroinitializer to ({_TYPE})$")


@dataclass(frozen=True, slots=True)
class Template:
    """One parsed template: ``kind`` (call, load, store, zero), the operand it defines (or
    stores to), the LLVM function called, and the (type, operand) of each argument; for a
    load and a store the argument is the register, ``pointer`` the memory operand and
    ``align`` the alignment its address has; ``registers`` is how many registers a call's
    result fills (its ``result_type`` then the literal struct of them); an argument of
    type ``ptr`` is a memory operand's address."""

    kind: str
    result: str
    result_type: ll.Type
    function: str = ""
    args: tuple[tuple[ll.Type, str], ...] = ()
    pointer: str = ""
    align: int = 1
    registers: int = 1


class BFloatType(ll.types._BaseFloatType):
    """LLVM's ``bfloat``, which llvmlite's IR builder does not define: its values are only
    passed between registers, memory and intrinsic calls, never computed with here."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"


BFloatType._create_instance()

# The float lane types a template may name, with the llvmlite type of each.
_FLOATS: dict[str, ll.Type] = {"half": ll.HalfType(), "bfloat": BFloatType(),
                               "float": ll.FloatType(), "double": ll.DoubleType()}
_FLOAT_BITS = {"half": 16, "bfloat": 16, "float": 32, "double": 64}


def vector_type(text: str) -> ll.VectorType:
    """``<16 x i8>`` or ``<16 x float>`` as an llvmlite type."""
    count, lane = re.search(r"<(\d+) x (\w+)>", text).groups()  # type: ignore[union-attr]
    element = _FLOATS.get(lane) or ll.IntType(int(lane[1:]))
    return ll.VectorType(element, int(count))


def lane_bits(element: ll.Type) -> int:
    """Bits of one lane of a template's vector type (an integer or a float lane)."""
    if isinstance(element, ll.IntType):
        return element.width
    return _FLOAT_BITS[str(element)]


def parse(name: str, text: str) -> Template:
    """The template of intrinsic ``name``; EmitError for a shape this backend cannot emit."""
    line = text.strip()
    if match := _CALL.match(line):
        args = []
        for part in match.group(4).split(","):
            arg = _ARG.match(part.strip())
            if arg is None:
                raise EmitError(f"the llvm template of {name} requires typed operands as "
                                f"arguments, got {part.strip()!r}")
            kind = ll.PointerType() if arg.group(1) == "ptr" else vector_type(arg.group(1))
            args.append((kind, arg.group(2)))
        result = match.group(2)
        if result.startswith("["):
            registers = int(result[1:result.index(" ")])
            vector = vector_type(result[result.index("<"):])
            return Template("call", match.group(1), ll.LiteralStructType([vector] * registers),
                            match.group(3), tuple(args), registers=registers)
        return Template("call", match.group(1), vector_type(result), match.group(3),
                        tuple(args))
    if match := _LOAD.match(line):
        return Template("load", match.group(1), vector_type(match.group(2)),
                        pointer=match.group(3), align=int(match.group(4) or 1))
    if match := _STORE.match(line):
        return Template("store", match.group(3), vector_type(match.group(1)),
                        args=((vector_type(match.group(1)), match.group(2)),),
                        pointer=match.group(3), align=int(match.group(4) or 1))
    if match := _ZERO.match(line):
        return Template("zero", match.group(1), vector_type(match.group(3)))
    raise EmitError(f"the CPU code generator requires an emit.llvm template that is a call, "
                    f"load, store or zeroing bitcast of vectors (<N x iM>, <N x float>...); "
                    f"{name}'s is {line!r}")
