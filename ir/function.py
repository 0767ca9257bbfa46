"""Functions and modules."""

from __future__ import annotations

from dataclasses import dataclass

from ir.buffer import Buffer
from ir.errors import IRError
from ir.node import LocT, Node, loc_field
from ir.stmt import Block, BlockRealize, Stmt


@dataclass(frozen=True, slots=True)
class PrimFunc(Node):
    """A tensor program: buffer parameters and a body.

    The body is always the realize of a root block (named ``root``) whose ``alloc_buffers``
    are the function's intermediate buffers; the printer shows those at the top of the
    function, as the script syntax writes them.
    """

    name: str
    params: tuple[Buffer, ...]
    body: BlockRealize
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        for name in names:
            if names.count(name) > 1:
                raise IRError(f"function {self.name}: parameter {name} appears twice", self.loc)
        if not isinstance(self.body, BlockRealize) or self.body.block.iter_vars:
            raise IRError(f"function {self.name}: body must be a root block realize", self.loc)

    @property
    def root(self) -> Block:
        """The root block."""
        return self.body.block

    @property
    def allocs(self) -> tuple[Buffer, ...]:
        """The function's intermediate buffers."""
        return self.root.alloc_buffers

    def param(self, name: str) -> Buffer:
        """The parameter buffer called ``name``."""
        for buffer in self.params:
            if buffer.name == name:
                return buffer
        raise IRError(f"function {self.name} has no parameter {name}; it has "
                      f"{', '.join(p.name for p in self.params)}")

    def with_body(self, body: Stmt) -> PrimFunc:
        """The same function around a new root-block body."""
        root = self.root
        new_root = Block(root.name, (), (), (), body, None, root.alloc_buffers,
                         root.annotations, root.loc)
        return PrimFunc(self.name, self.params, BlockRealize((), new_root), self.loc)


def make_root(body: Stmt, allocs: tuple[Buffer, ...] = ()) -> BlockRealize:
    """Wrap a function body in the root block that holds the intermediate buffers."""
    return BlockRealize((), Block("root", (), (), (), body, None, allocs))


@dataclass(frozen=True, slots=True)
class IRModule(Node):
    """A set of functions, by name."""

    functions: tuple[PrimFunc, ...]
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        names = [f.name for f in self.functions]
        for name in names:
            if names.count(name) > 1:
                raise IRError(f"module defines function {name} twice", self.loc)

    def __getitem__(self, name: str) -> PrimFunc:
        for func in self.functions:
            if func.name == name:
                return func
        raise KeyError(name)
