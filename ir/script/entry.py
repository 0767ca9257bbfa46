"""Ways into the script front end: decorators, source text, and kernel files.

None of them executes a kernel: each reads its source, parses the Python AST and translates it.
"""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ir.errors import KernelError
from ir.function import IRModule, PrimFunc
from ir.script.boundary import user_facing
from ir.script.func_parser import FuncParser, decorator_alias
from ir.script.source import SourceText, decode_source
from ir.verify import verify

Definition = TypeVar("Definition", ast.FunctionDef, ast.ClassDef)


@user_facing
def prim_func(fn: Callable[..., Any]) -> PrimFunc:
    """Decorator: parse the decorated function's source as a kernel and return its PrimFunc.

    The function body is never run. Names it uses that are not kernel names (loop variables,
    iterators, buffers) may be Python numbers from its module or closure.
    """
    source, node = _source_of(fn, ast.FunctionDef)
    alias = decorator_alias(node, "prim_func") or "T"
    func = FuncParser(source, alias, _constants(fn)).function(node)
    verify(func)
    return func


@user_facing
def ir_module(cls: type) -> IRModule:
    """Decorator: parse a class whose methods are ``@T.prim_func`` kernels into an IRModule."""
    source, node = _source_of(cls, ast.ClassDef)
    alias = decorator_alias(node, "ir_module") or "T"
    module_globals = vars(sys.modules[cls.__module__]) if cls.__module__ in sys.modules else {}
    module = FuncParser(source, alias, module_globals).module(node)
    for func in module.functions:
        verify(func)
    return module


@user_facing
def parse(source: str, filename: str = "<string>", first_line: int = 1) -> PrimFunc | IRModule:
    """Parse script source holding one ``@T.prim_func`` function or one ``@T.ir_module`` class.

    ``filename`` and ``first_line`` place the text in a file, so errors point at real lines.
    Module-level number constants (``N = 128``) may be used by the kernel.
    """
    text = SourceText.dedented(source, filename, first_line)
    tree = text.parse()
    found = _definitions(tree)
    if len(found) != 1:
        where = found[1] if len(found) > 1 else (tree.body[0] if tree.body else tree)
        raise text.error(where, "parse requires exactly one @T.prim_func function or "
                                f"@T.ir_module class, found {len(found)}")
    node = found[0]
    constants = _module_constants(text, tree)
    if isinstance(node, ast.ClassDef):
        module = FuncParser(text, decorator_alias(node, "ir_module") or "T",
                            constants).module(node)
        for func in module.functions:
            verify(func)
        return module
    func = FuncParser(text, decorator_alias(node, "prim_func") or "T",
                      constants).function(node)
    verify(func)
    return func


@user_facing
def load_file(path: str | Path) -> dict[str, PrimFunc]:
    """The module-level ``@T.prim_func`` kernels of a Python file, by name, without running it.

    The file is read as Python reads source: UTF-8 unless a coding declaration names another
    encoding.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise KernelError(f"load_file requires a readable kernel file, got {path}: "
                          f"{err.strerror}") from None
    text = SourceText(decode_source(data, str(path)), str(path))
    tree = text.parse()
    constants = _module_constants(text, tree)
    kernels: dict[str, PrimFunc] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            alias = decorator_alias(node, "prim_func")
            if alias is not None:
                func = FuncParser(text, alias or "T", constants).function(node)
                verify(func)
                kernels[func.name] = func
    return kernels


def _definitions(tree: ast.Module) -> list[ast.FunctionDef | ast.ClassDef]:
    found: list[ast.FunctionDef | ast.ClassDef] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and decorator_alias(node, "prim_func") is not None:
            found.append(node)
        if isinstance(node, ast.ClassDef) and decorator_alias(node, "ir_module") is not None:
            found.append(node)
    return found


def _module_constants(text: SourceText, tree: ast.Module) -> dict[str, object]:
    """Module-level number constants (``N = 128``, ``M = N * 2``), folded without running code."""
    constants: dict[str, object] = {}
    folder = FuncParser(text, constants=constants)
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, float):
            constants[node.targets[0].id] = node.value.value
            continue
        try:
            constants[node.targets[0].id] = folder.constant(node.value, "a constant")
        except KernelError:
            constants.pop(node.targets[0].id, None)  # reassigned to something not a number
    return constants


def _source_of(obj: Any, kind: type[Definition]) -> tuple[SourceText, Definition]:
    """The dedented source of a function or class, placed at its real file line."""
    what = "function" if kind is ast.FunctionDef else "class"
    try:
        lines, first_line = inspect.getsourcelines(obj)
        file = inspect.getsourcefile(obj) or "<unknown>"
    except (OSError, TypeError):
        raise KernelError(f"the script front end requires the {what} {obj.__qualname__}'s "
                          "source file; for source built at run time use "
                          "ir.script.parse(text)") from None
    text = SourceText.dedented("".join(lines), file, first_line)
    tree = text.parse()
    node = tree.body[0] if tree.body else None
    if not isinstance(node, kind):
        raise KernelError(f"the script front end could not find the {what} "
                          f"{obj.__qualname__} in its source")
    return text, node


def _constants(fn: Callable[..., Any]) -> Mapping[str, object]:
    """The numbers a kernel may name: its closure variables, then its module's globals."""
    found: dict[str, object] = dict(getattr(fn, "__globals__", {}))
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    if code is not None:
        for name, cell in zip(code.co_freevars, cells):
            try:
                found[name] = cell.cell_contents
            except ValueError:
                continue
    return found
