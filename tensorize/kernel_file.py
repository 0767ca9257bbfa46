"""A kernel file as ``tensorize run`` and ``tensorize sweep`` read it: its kernel, and its
numpy ``reference``.

A file holds its kernels in one of two ways:

- ``@T.prim_func`` functions in the script syntax (``examples/script/``), read without running
  the file;
- otherwise, built when the file is imported (``examples/te/``): a module-level ``build()``
  returning a PrimFunc, or module-level PrimFunc values.

The file is imported once, before any work, for its optional ``reference(...)``: a numpy
function taking the kernel's inputs in parameter order and returning its output(s). Every way
the user's Python can fail (the import raises, ``build()`` or ``reference()`` raises, takes
the wrong arguments or returns the wrong arrays) is a KernelError naming the file, and the
line where the file's code raised.
"""

from __future__ import annotations

import inspect
import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ir import Buffer, PrimFunc, TensorizeError
from ir import script as T
from ir.errors import KernelError


@dataclass(frozen=True, slots=True)
class KernelFile:
    """A kernel file, read: its path, the chosen kernel and its reference (None: none)."""

    path: Path
    func: PrimFunc
    reference: Callable[..., Any] | None


def read_kernel_file(path: Path, name: str | None) -> KernelFile:
    """The kernel of ``path`` (``name`` picks one of several) and its reference."""
    kernels = T.load_file(path)
    module = _import(path, "reference()" if kernels else "build()")
    if not kernels:
        kernels = _built_kernels(module, path)
    reference = getattr(module, "reference", None)
    if reference is not None and not callable(reference):
        raise KernelError(f"{path}: reference requires to be a function, got a "
                          f"{type(reference).__name__}")
    return KernelFile(path, _pick(kernels, name, path), reference)


def check_reference_arguments(reference: Callable[..., Any], path: Path,
                              inputs: Sequence[Buffer]) -> None:
    """Refuse, before any work, a reference that cannot take the kernel's inputs in
    parameter order."""
    try:
        signature = inspect.signature(reference)
    except (TypeError, ValueError):  # a builtin or C function: nothing to check up front
        return
    try:
        signature.bind(*(p.name for p in inputs))
    except TypeError as err:
        code = getattr(reference, "__code__", None)
        where = f"{path}:{code.co_firstlineno}" if code else str(path)
        names = ", ".join(p.name for p in inputs)
        raise KernelError(f"{where}: reference{signature} requires to take the kernel's "
                          f"{len(inputs)} input(s) ({names}) in parameter order, got: {err}"
                          ) from None


def call_reference(reference: Callable[..., Any], path: Path, inputs: Sequence[np.ndarray],
                   outputs: Sequence[Buffer]) -> dict[str, np.ndarray]:
    """What ``reference(*inputs)`` returns (``reference`` from the file ``path``), one array
    per output, checked against the outputs' count and shapes."""
    returned = _call_user(reference, path, "reference(...)", *(a.copy() for a in inputs))
    arrays = returned if isinstance(returned, tuple) else (returned,)
    names = ", ".join(p.name for p in outputs)
    if len(arrays) != len(outputs):
        raise KernelError(f"{path}: reference(...) requires to return one array per "
                          f"output ({names}), {len(outputs)} in all, got {len(arrays)}")
    expected = {}
    for buffer, value in zip(outputs, arrays):
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as err:
            raise KernelError(f"{path}: reference(...) requires an array for output "
                              f"{buffer.name}, got {type(value).__name__} ({err})") from None
        if array.shape != buffer.shape:
            raise KernelError(f"{path}: reference(...) requires output {buffer.name} "
                              f"of shape {buffer.shape}, got shape {array.shape}")
        if array.dtype.kind not in "biuf" and array.dtype != buffer.dtype.numpy:
            raise KernelError(f"{path}: reference(...) requires numbers for output "
                              f"{buffer.name}, got dtype {array.dtype}")
        expected[buffer.name] = array
    return expected


def _call_user(function: Callable[..., Any], path: Path, what: str, *args: Any) -> Any:
    """``function(*args)``, where ``function`` is the user's code in ``path``: an exception it
    raises becomes a KernelError naming ``what``, the file and the line."""
    try:
        return function(*args)
    except TensorizeError:
        raise
    except (Exception, SystemExit) as err:
        raise KernelError(f"{path}: {what} failed: {_describe(err, path)}") from None


def _describe(err: BaseException, path: Path) -> str:
    """``Type: message (line N)``, N the last line of ``path`` in the traceback."""
    here = os.path.abspath(path)
    lines = [f.lineno for f in traceback.extract_tb(err.__traceback__)
             if os.path.abspath(f.filename) == here]
    where = f" (line {lines[-1]})" if lines else ""
    return f"{type(err).__name__}: {err}{where}"


def _import(path: Path, purpose: str) -> ModuleType:
    """The file run as a module, whatever its suffix: not entered in ``sys.modules``, and
    no bytecode cached beside it."""
    module = ModuleType(f"_tensorize_kernel_{path.stem}")
    module.__file__ = str(path)
    code = compile(path.read_bytes(), str(path), "exec")
    _call_user(exec, path, f"importing the file for {purpose}", code, vars(module))
    return module


def _built_kernels(module: ModuleType, path: Path) -> dict[str, PrimFunc]:
    """The kernels the imported file built: its ``build()``'s and its PrimFunc values."""
    kernels = {v.name: v for v in vars(module).values() if isinstance(v, PrimFunc)}
    build = getattr(module, "build", None)
    if callable(build):
        func = _call_user(build, path, "build()")
        if not isinstance(func, PrimFunc):
            raise KernelError(f"{path}: build() requires to return a PrimFunc, got a "
                              f"{type(func).__name__}")
        kernels[func.name] = func
    if not kernels:
        raise KernelError(f"{path}: no kernel found: a kernel file requires @T.prim_func "
                          "functions, a build() returning a PrimFunc, or module-level "
                          "PrimFunc values")
    return kernels


def _pick(kernels: dict[str, PrimFunc], name: str | None, path: Path) -> PrimFunc:
    if name is None:
        if len(kernels) > 1:
            raise KernelError(f"{path} defines {len(kernels)} kernels ({', '.join(kernels)}); "
                              "choose one with --func")
        return next(iter(kernels.values()))
    if name not in kernels:
        raise KernelError(f"{path}: --func {name} names no kernel; found {', '.join(kernels)}")
    return kernels[name]
