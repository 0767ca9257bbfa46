"""Source text of a kernel and the mapping from Python AST positions to the user's file.

Reading a kernel file and parsing its text are where malformed input first shows: bytes that
are not text, a NUL byte, invalid syntax, or an expression nested past what the walkers of
the IR take. Each becomes a KernelError at the file, line and column it concerns.
"""

from __future__ import annotations

import ast
import codecs
import io
import tokenize
import warnings
from dataclasses import dataclass
from functools import cached_property

from ir.errors import LINE_BREAK, KernelError, SourceLoc

#: How deeply one expression may nest, counting every operator, call and subscript on the way
#: down (a name or a constant is none): a sum ``A[i, 0] + A[i, 1] + ... + A[i, 1999]`` of 2000
#: terms nests 2000 levels (docs/trust.md). The IR's own walkers
#: (printer, verifier, structural equality, the visitors, the host backend) follow a chain of
#: operators without recursing, but other passes recurse once per level; this is the depth
#: they may count on. Python's parser gives up near 3000 levels.
MAX_EXPR_DEPTH = 2000
#: How deeply operands may nest inside operands, where continuing a chain (the ``+ c`` of
#: ``a + b + c``) adds no level: ``-(-(-x))`` and ``T.max(T.max(a, b), c)`` nest 3 levels.
#: Walkers recurse on these, a few frames each, within Python's default recursion limit.
MAX_OPERAND_NESTING = 100
#: How deeply an index, an iterator binding or a condition (of an if, T.where or
#: T.if_then_else) may nest, chains included: index arithmetic (linear forms, bounds,
#: simplification) recurses on them, and no sensible index comes near.
MAX_INDEX_DEPTH = 100
_SPLIT_HINT = "split it with a temporary buffer"
# Operator and context nodes: shared singletons in an AST, and no level of nesting.
_MARKERS = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
# Expression nodes that are no level of nesting: they hold no expression.
_LEAVES = (ast.Name, ast.Constant)
# Tokens between logical lines: a logical line starts at the first token that is none of them.
_LAYOUT_TOKENS = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)


def physical_lines(text: str) -> list[str]:
    """The lines of ``text`` as Python numbers them (a final line break starts no line)."""
    lines = LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def decode_source(data: bytes, file: str) -> str:
    """Python source text from a file's bytes: UTF-8 unless a coding declaration says otherwise.

    Bytes the encoding cannot decode give a KernelError at the line and column of the first
    bad byte, naming its byte offset in the file.
    """
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as err:
        raise KernelError(f"a kernel file requires UTF-8 text or a valid coding declaration, "
                          f"got {err.msg}", SourceLoc(file, err.lineno or 1, 1)) from None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        line_start = data.rfind(b"\n", 0, err.start) + 1
        line = data.count(b"\n", 0, err.start) + 1
        col = len(data[line_start:err.start].decode(encoding, errors="replace")) + 1
        shown = data[err.start:err.end].hex(" ")
        raise KernelError(f"a kernel file requires {_encoding_name(encoding)} text, got byte "
                          f"{shown} at byte offset {err.start} ({err.reason}); save the file "
                          "as UTF-8", SourceLoc(file, line, col)) from None


def _encoding_name(encoding: str) -> str:
    name = codecs.lookup(encoding).name
    return "UTF-8" if name in ("utf-8", "utf-8-sig") else name


@dataclass(frozen=True)
class SourceText:
    """Python source cut from a file, with what it takes to map positions back.

    ``text`` is what gets parsed (dedented). ``first_line`` is the file line of its first line;
    ``indents[k]`` is how many characters dedenting removed from line ``k`` (0-based), and
    ``first_col`` the column (1-based) of the text's first character when it starts mid-line.
    """

    text: str
    file: str
    first_line: int = 1
    indents: tuple[int, ...] = ()
    first_col: int = 1

    @staticmethod
    def dedented(source: str, file: str, first_line: int = 1) -> SourceText:
        """Remove the first line's indentation from every line that starts with it."""
        lines = physical_lines(source)
        first = next((line for line in lines if line.strip()), "")
        indent = first[:len(first) - len(first.lstrip())]
        kept: list[str] = []
        removed: list[int] = []
        for line in lines:
            if indent and line.startswith(indent):
                kept.append(line[len(indent):])
                removed.append(len(indent))
            else:
                kept.append(line)
                removed.append(0)
        return SourceText("\n".join(kept) + "\n", file, first_line, tuple(removed))

    def parse(self) -> ast.Module:
        """The AST of the text, every expression checked against the nesting limits.

        A syntax error, a NUL byte or an expression nested too deeply becomes a KernelError at
        its real position.
        """
        nul = self.text.find("\0")
        if nul >= 0:
            line = self.text.count("\n", 0, nul) + 1
            col = len(self.text[self.text.rfind("\n", 0, nul) + 1:nul].encode())
            raise KernelError("Python source requires no NUL bytes, got one; remove it",
                              self.position(line, col, line, col + 1))
        try:
            with warnings.catch_warnings():
                # The text is read, never run: what Python would warn of when running it
                # (``256and x``, an invalid escape) is no concern of the kernel's.
                warnings.simplefilter("ignore", SyntaxWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                tree = ast.parse(self.text, filename=self.file)
        except SyntaxError as err:
            line = err.lineno or 1
            col = err.offset or 1
            raise KernelError(f"invalid Python syntax: {err.msg}",
                              self.position(line, col - 1, line, col)) from None
        except (RecursionError, MemoryError):
            # Python's parser ran out of stack on an expression nested thousands deep.
            raise KernelError(f"expression nests too deeply for Python's parser, more than the "
                              f"limit of {MAX_EXPR_DEPTH} levels; {_SPLIT_HINT}",
                              self._busiest_line()) from None
        self._check_nesting(tree)
        return tree

    def _check_nesting(self, tree: ast.Module) -> None:
        """Raise KernelError at the first expression nested past MAX_EXPR_DEPTH levels or with
        operands nested past MAX_OPERAND_NESTING."""
        stack: list[ast.AST] = [tree]
        while stack:
            node = stack.pop()
            if not isinstance(node, ast.expr):
                stack.extend(reversed(list(ast.iter_child_nodes(node))))
                continue
            depth, nesting = _nesting(node)
            if depth > MAX_EXPR_DEPTH:
                raise self.error(node, f"expression nests {depth} levels, more than the limit "
                                       f"{MAX_EXPR_DEPTH}; {_SPLIT_HINT}")
            if nesting > MAX_OPERAND_NESTING:
                raise self.error(node, f"expression nests operands {nesting} levels deep (a "
                                       "chain such as a + b + c counts once), more than the "
                                       f"limit {MAX_OPERAND_NESTING}; {_SPLIT_HINT}")

    def _busiest_line(self) -> SourceLoc:
        """Where the logical line with the most operators starts: where Python's parser gives
        up on an expression nested too deeply."""
        best, best_count, start, count = (1, 0), -1, None, 0
        try:
            for token in tokenize.generate_tokens(io.StringIO(self.text).readline):
                if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                    if start is not None and count > best_count:
                        best, best_count = start, count
                    start, count = None, 0
                elif token.type not in _LAYOUT_TOKENS and start is None:
                    start = (token.start[0], len(token.line[:token.start[1]].encode()))
                count += token.type == tokenize.OP
        except (tokenize.TokenError, SyntaxError):
            pass  # the parser stopped before the tokenizer would; what was counted stands
        line, col = best
        return self.position(line, col, line, col + 1)

    def loc(self, node: ast.AST) -> SourceLoc:
        """The user's span of ``node``: real file line and 1-based columns, end inclusive."""
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        end_line = getattr(node, "end_lineno", None) or line
        end_col = getattr(node, "end_col_offset", None)
        if end_col is None:
            end_col = col + 1
        return self.position(line, col, end_line, end_col)

    def position(self, line: int, col: int, end_line: int, end_col: int) -> SourceLoc:
        """Map an AST position (1-based line, 0-based UTF-8 byte columns) to a SourceLoc."""
        return SourceLoc(self.file, line + self.first_line - 1, self._column(line, col) + 1,
                         end_line + self.first_line - 1, self._column(end_line, end_col))

    @cached_property
    def _lines(self) -> list[bytes]:
        return [line.encode() for line in physical_lines(self.text)]

    def _column(self, line: int, byte_col: int) -> int:
        """Character column (0-based) in the user's file of a byte column of the text."""
        lines = self._lines
        text_line = lines[line - 1] if 1 <= line <= len(lines) else b""
        chars = len(text_line[:byte_col].decode(errors="ignore"))
        removed = self.indents[line - 1] if 1 <= line <= len(self.indents) else 0
        start = self.first_col - 1 if line == 1 else 0
        return chars + removed + start

    def segment(self, node: ast.AST) -> str:
        """The text of ``node``'s span, as written ("" for a node without one)."""
        line, end_line = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        col, end_col = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if line is None or end_line is None or col is None or end_col is None:
            return ""
        lines = self._lines[line - 1:end_line]
        if not lines:
            return ""
        if len(lines) == 1:
            return lines[0][col:end_col].decode(errors="replace")
        pieces = [lines[0][col:], *lines[1:-1], lines[-1][:end_col]]
        return b"\n".join(pieces).decode(errors="replace")

    def error(self, node: ast.AST, message: str) -> KernelError:
        """A KernelError about ``node``, located in the user's file."""
        return KernelError(message, self.loc(node))


def check_index_depth(source: SourceText, node: ast.expr, what: str) -> None:
    """Raise KernelError unless ``node`` (an index or condition) nests at most
    MAX_INDEX_DEPTH levels."""
    depth = _nesting(node)[0]
    if depth > MAX_INDEX_DEPTH:
        raise source.error(node, f"{what} nests {depth} levels, more than the limit "
                                 f"{MAX_INDEX_DEPTH} for indices and conditions; simplify it")


def _nesting(root: ast.expr) -> tuple[int, int]:
    """(depth, operand nesting) of an expression, walked without recursion.

    Depth counts the levels on the longest path down: every operator, call, subscript and
    other expression node, but not a name or a constant (a leaf nests nothing) nor the tuple
    of a subscript's indices (``A[i, j]`` is one load): so ``A[vi, 0] + ... + A[vi, 1999]``,
    2000 terms, nests 2000 levels, as the IR it becomes does. A keyword or comprehension
    between nodes adds none. Operand nesting counts them too, except that the left operand of
    a binary operator continues its chain at the same level: the IR's walkers follow such
    chains without recursing.
    """
    levels: dict[int, tuple[int, int]] = {}
    index_tuples: set[int] = set()
    stack: list[tuple[ast.AST, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        children = [c for c in ast.iter_child_nodes(node) if not isinstance(c, _MARKERS)]
        if not expanded and children:
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):
                index_tuples.add(id(node.slice))
            stack.append((node, True))
            stack.extend((child, False) for child in children)
            continue
        most, nested = 0, 0
        for child in children:
            child_depth, child_nesting = levels.pop(id(child))
            most = max(most, child_depth)
            chained = isinstance(node, ast.BinOp) and child is node.left
            nested = max(nested, child_nesting - 1 if chained else child_nesting)
        step = int(isinstance(node, ast.expr) and not isinstance(node, _LEAVES)
                   and id(node) not in index_tuples)
        levels[id(node)] = (most + step, nested + step)
    return levels[id(root)]
