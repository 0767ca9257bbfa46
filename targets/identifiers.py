"""IR names as identifiers in generated code: one rule for every backend.

Kernels, buffers, blocks and iterators carry the user's names, and a name may be anything a
Python identifier (``größe``) or a TE string (``"a b"``) can be. Generated code needs
identifiers: the CUDA C++ backend (compiled by nvcc, and by g++ for the host emulation), the
LLVM backends (host JIT, arm, x86: function, argument, block and value names, and the object
file's symbol) and an assembler's symbols (the NPU's programs hold addresses, no names).
:func:`mangle` maps every name to one identifier that all of them accept, the same in every
backend:

- A **plain** name stays as it is: an ASCII letter, then ASCII letters and digits in runs
  joined by single underscores (``C``, ``A_shared``, ``ax0_1``), and no word the
  generated code, C++, CUDA or their headers give a meaning (:data:`RESERVED`,
  :data:`RESERVED_PATTERNS`).
- Any other name is **escaped**: ASCII letters and digits as they are, ``_`` as ``__``, any
  other character as ``_x`` and 2 hex digits, ``_u`` and 4, or ``_U`` and 8 (its code point);
  a name that does not start with an ASCII letter gets ``v_0`` in front, and every escaped
  name ends with ``_``. So ``asm`` is ``asm_``, ``threadIdx`` is ``threadIdx_``, ``größe`` is
  ``gr_xf6_xdfe_``, ``a b`` is ``a_x20b_``, ``1x`` is ``v_01x_`` and ``tz_tid`` is
  ``tz__tid_``.

Every result is an ASCII identifier (a letter, then letters, digits and ``_``), so it needs no
quoting in C++, LLVM IR or an assembler. Distinct names give distinct identifiers: a plain name
never ends with ``_`` and an escaped one always does, and the escapes decode one way
(:func:`demangle` gives the name back). No result is reserved: no keyword or macro ends with
``_`` (a test checks the macros of the real headers). Names the generated code introduces
itself start with ``tz_`` and a letter or digit (``tz_warp``; ``TZ_`` for its macros), which
no result does.

One scope of generated code may hold two IR objects with the same name (two loops ``i``, a
parameter and the intermediate a schedule named after it): :class:`Namer` gives the second
``i_1``, the third ``i_2``, skipping any identifier already in use.

Reports show the user's names; only generated code holds these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["INTERNAL_PREFIX", "Namer", "RESERVED", "RESERVED_PATTERNS", "demangle", "is_plain",
           "mangle"]

# Names the generated code declares itself: tz_ then a letter or digit (tz_tid, tz_floordiv);
# its macros TZ_ likewise (TZ_EMULATION).
INTERNAL_PREFIX = "tz_"

_KEYWORDS = {
    # C++20 keywords and alternative tokens.
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
    "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept",
    "const", "consteval", "constexpr", "constinit", "const_cast", "continue", "co_await",
    "co_return", "co_yield", "decltype", "default", "delete", "do", "double", "dynamic_cast",
    "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto",
    "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
    "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register",
    "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static",
    "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local",
    "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using",
    "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq",
    # Identifiers with a meaning in some contexts, and C's restrict (nvcc and g++ accept it).
    "final", "override", "import", "module", "restrict",
}
_CUDA = {
    # Built-in variables (macros in the host emulation) and the names the emitted code and
    # the intrinsic templates use unqualified inside a kernel, which a parameter or local of
    # the same name would hide.
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "nvcuda", "wmma", "tz",
    "half", "half2", "nv_bfloat16", "nv_bfloat162", "dim3", "uint4", "make_uint4",
    "size_t", "ptrdiff_t", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t",
    "uint32_t", "uint64_t", "min", "max", "expf", "logf", "sqrtf", "tanhf", "erff", "fabsf",
    "rintf",
}
_MACROS = {
    # Object-like macros of the C, C++ and CUDA headers the CUDA source includes (on the GPU
    # and in the emulation) that RESERVED_PATTERNS does not cover; a test lists them all
    # with the compilers found here.
    "NULL", "EOF", "NAN", "INFINITY", "MAXFLOAT", "BUFSIZ", "NFDBITS", "NGREG", "NZERO",
    "SNAN", "SNANF", "SNANL", "SNANF32", "SNANF64", "SNANF128", "SNANF32X", "SNANF64X",
    "CUDARTAPI", "WCONTINUED", "WEXITED", "WNOHANG", "WNOWAIT", "WSTOPPED", "WUNTRACED",
    "errno", "stdin", "stdout", "stderr", "math_errhandling", "L_ctermid", "L_cuserid",
    "L_tmpnam", "P_tmpdir", "linux", "unix", "i386",
    # <memory> and <algorithm> (the emulation's clusters) bring in <sched.h> and <wchar.h>.
    "CSIGNAL", "WEOF", "sched_priority",
}
# Words plain names must not be: keywords, CUDA's names and the headers' macros.
RESERVED = frozenset(_KEYWORDS | _CUDA | _MACROS)

RESERVED_PATTERNS = (
    re.compile(r"[A-Z][A-Z0-9]+(?:_[A-Z0-9]+)+"),   # a macro's shape: INT_MAX, CUDART_VERSION
    re.compile(r"M_[A-Z0-9][A-Za-z0-9_]*"),          # <cmath>'s constants: M_PI, M_1_PIf
    re.compile(r"NV_[A-Za-z0-9_]*"),                 # NV_HAS_FEATURE_SM_90a
    re.compile(r"cuda[A-Z][A-Za-z0-9_]*"),           # cudaStreamLegacy, cudaArrayDefault
    re.compile(r"(?:tz|TZ)(?:_[A-Za-z0-9_]*)?"),     # the generated code's own names
)

_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*")
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
# In front of an escaped name that does not start with an ASCII letter. After "v" an escape's
# "_" is followed by "_", "x", "u" or "U", never "0", so this reads one way.
_LEAD = "v_0"


def is_plain(name: str) -> bool:
    """Whether ``name`` stands in generated code as it is (module docs)."""
    return (_PLAIN.fullmatch(name) is not None and name not in RESERVED
            and not any(p.fullmatch(name) for p in RESERVED_PATTERNS))


def mangle(name: str) -> str:
    """``name`` as an identifier of generated code: itself when plain, else escaped (module
    docs). Deterministic; distinct names give distinct identifiers."""
    if is_plain(name):
        return name
    body = "".join(_escape(c) for c in name)
    lead = "" if name[:1].isascii() and name[:1].isalpha() else _LEAD
    return f"{lead}{body}_"


def _escape(char: str) -> str:
    if char in _ALNUM:
        return char
    if char == "_":
        return "__"
    code = ord(char)
    if code < 0x100:
        return f"_x{code:02x}"
    return f"_u{code:04x}" if code < 0x10000 else f"_U{code:08x}"


_ESCAPE = re.compile(r"__|_x([0-9a-f]{2})|_u([0-9a-f]{4})|_U([0-9a-f]{8})|[A-Za-z0-9]")


def demangle(identifier: str) -> str:
    """The name :func:`mangle` made ``identifier`` of; ValueError when it made none."""
    if is_plain(identifier):
        return identifier
    if not identifier.endswith("_") or len(identifier) < 2:
        raise ValueError(f"demangle: {identifier!r} is no identifier mangle makes")
    body = identifier[:-1]
    led = body.startswith(_LEAD)
    if led:
        body = body[len(_LEAD):]
    chars, at = [], 0
    while at < len(body):
        match = _ESCAPE.match(body, at)
        if match is None:
            raise ValueError(f"demangle: {identifier!r} has no escape at {at}")
        text = match.group()
        code = next((g for g in match.groups() if g is not None), None)
        chars.append("_" if text == "__" else chr(int(code, 16)) if code else text)
        at = match.end()
    name = "".join(chars)
    if mangle(name) != identifier:
        raise ValueError(f"demangle: {identifier!r} is no identifier mangle makes")
    return name


class Namer:
    """Identifiers for one scope of generated code: each request gets a fresh one.

    ``taken``: identifiers the scope already holds. :meth:`user` names what an IR object
    (its name) stands for; :meth:`internal` a value the generated code introduces, whose
    ``name`` must start with ``tz_``.
    """

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self.taken: set[str] = set(taken)

    def user(self, name: str) -> str:
        """``mangle(name)``, or with ``_1``, ``_2``... added when that is taken."""
        return self._fresh(mangle(name))

    def internal(self, name: str) -> str:
        """``name`` (``tz_`` and a word), or with ``_1``, ``_2``... added when taken."""
        if not (name.startswith(INTERNAL_PREFIX) and _PLAIN.fullmatch(name)
                and name[len(INTERNAL_PREFIX)] != "_"):
            raise ValueError(f"Namer.internal requires a name tz_WORD, got {name!r}")
        return self._fresh(name)

    def _fresh(self, base: str) -> str:
        candidate, n = base, 1
        while candidate in self.taken:
            candidate = f"{base}_{n}"
            n += 1
        self.taken.add(candidate)
        return candidate
