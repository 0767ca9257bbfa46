"""The registry: every family tensorize knows, built-in and the user's own.

Built-in families are the ``*.yaml`` files beside this module. A user adds families by
putting YAML files in a directory and naming it with ``--intrinsics-dir DIR`` (repeatable) or
in the ``TENSORIZE_INTRINSICS_PATH`` environment variable (directories separated by
``os.pathsep``). Names must be unique across all files: families (file stems), intrinsics,
and scopes unless every declaration of a scope agrees.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path

from intrinsics.gpu_target import GpuTarget
from intrinsics.llvm_check import check_added_intrinsics
from intrinsics.loader import check_family
from intrinsics.model import CpuTarget, Family, Intrinsic, Scope
from intrinsics.runnable import check_npu_family
from intrinsics.source import Findings
from ir.errors import IntrinsicSpecError, SourceLoc

BUILTIN_DIR = Path(__file__).resolve().parent
ENV_VAR = "TENSORIZE_INTRINSICS_PATH"
SUFFIXES = (".yaml", ".yml")


class Registry:
    """A validated set of families, looked up by intrinsic name, target or kind."""

    def __init__(self, families: Sequence[Family]) -> None:
        self.families: tuple[Family, ...] = tuple(families)
        self._by_name = {i.name: i for f in self.families for i in f.intrinsics}

    def __repr__(self) -> str:
        return f"Registry({', '.join(f.name for f in self.families)})"

    def __iter__(self) -> Iterator[Intrinsic]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def targets(self) -> tuple[str, ...]:
        """The targets of the families, each once, in load order."""
        return tuple(dict.fromkeys(f.target for f in self.families))

    def cpu(self, target: str) -> CpuTarget:
        """The CPU description of ``target`` (a family's ``cpu:`` section);
        IntrinsicSpecError naming the CPU targets there are when none describes it."""
        for family in self.families:
            if family.target == target and family.cpu is not None:
                return family.cpu
        known = ", ".join(f.target for f in self.families if f.cpu is not None) or "none"
        raise IntrinsicSpecError(f"target {target!r} requires a family with a 'cpu:' section "
                                 f"to be a CPU target; the CPU targets are {known}")

    def gpu(self, target: str = "cuda") -> GpuTarget:
        """The GPU description of ``target`` (a family's ``gpu:`` section: architectures
        and SM limits); IntrinsicSpecError naming the families of ``target`` when none has
        one."""
        families = [f for f in self.families if f.target == target]
        for family in families:
            if family.gpu is not None:
                return family.gpu
        names = ", ".join(str(f.path) for f in families) or "none"
        raise IntrinsicSpecError(f"target {target!r} requires a family with a 'gpu:' section "
                                 f"(its architectures and SM limits); the families of "
                                 f"{target!r} are {names}")

    def target_kind(self, target: str) -> str:
        """What kind of target ``target`` is, which decides how the engine schedules for it
        and how its code runs: ``cpu`` when a family describes it in a ``cpu:`` section,
        ``npu`` when one gives it a simulator ``machine:``, else the target's own name
        (``cuda``, or a target no code generator serves)."""
        families = [f for f in self.families if f.target == target]
        if any(f.cpu is not None for f in families):
            return "cpu"
        if any(f.machine is not None for f in families):
            return "npu"
        return target

    def get(self, name: str) -> Intrinsic:
        """The intrinsic called ``name``; IntrinsicSpecError naming close names if none."""
        found = self._by_name.get(name)
        if found is not None:
            return found
        close = difflib.get_close_matches(name, list(self._by_name), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else \
            "; run 'tensorize intrinsics list' to see them"
        raise IntrinsicSpecError(f"no intrinsic is called {name!r}{hint}")

    def family(self, name: str) -> Family:
        """The family called ``name`` (a file stem)."""
        for family in self.families:
            if family.name == name:
                return family
        known = ", ".join(f.name for f in self.families)
        raise IntrinsicSpecError(f"no family is called {name!r}; known: {known}")

    def for_target(self, target: str) -> tuple[Intrinsic, ...]:
        """Every intrinsic of the families with this target."""
        return tuple(i for i in self if i.target == target)

    def compute_intrinsics(self, target: str | None = None) -> tuple[Intrinsic, ...]:
        """The compute intrinsics, of one target or of all."""
        return tuple(i for i in self if i.kind == "compute"
                     and (target is None or i.target == target))

    def scope(self, name: str) -> Scope:
        """The memory scope called ``name``."""
        for family in self.families:
            if name in family.scopes:
                return family.scopes[name]
        raise IntrinsicSpecError(f"no family declares scope {name!r}")


def search_dirs(extra_dirs: Iterable[str | os.PathLike[str]] = ()) -> tuple[Path, ...]:
    """The directories searched: built-ins, then ``extra_dirs``, then the environment's."""
    env = [p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p.strip()]
    dirs: list[Path] = []
    for entry in (BUILTIN_DIR, *extra_dirs, *env):
        path = Path(entry).expanduser()
        if path.resolve() not in (d.resolve() for d in dirs):
            dirs.append(path)
    return tuple(dirs)


def family_files(dirs: Iterable[Path]) -> list[Path]:
    """The description files in ``dirs``, sorted by name within each directory."""
    files = []
    for directory in dirs:
        if not directory.is_dir():
            source = "" if directory == BUILTIN_DIR else f" (from --intrinsics-dir or {ENV_VAR})"
            raise IntrinsicSpecError(f"intrinsics directory {directory} requires to exist"
                                     f"{source}, got no such directory")
        files.extend(sorted(p for p in directory.iterdir() if p.suffix in SUFFIXES
                            and p.is_file()))
    return files


def default_registry(extra_dirs: Iterable[str | os.PathLike[str]] = ()) -> Registry:
    """The built-in families plus those in ``extra_dirs`` and ``TENSORIZE_INTRINSICS_PATH``."""
    return load_registry(family_files(search_dirs(extra_dirs)))


def load_registry(paths: Iterable[str | os.PathLike[str]]) -> Registry:
    """Load the families in ``paths`` and check names across them; raise every finding."""
    families, findings = check_registry(paths)
    if findings:
        raise findings.error("the intrinsic descriptions")
    return Registry(families)


def check_registry(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Family], Findings]:
    """Load ``paths`` without raising: the families that loaded and every finding."""
    findings = Findings("registry")
    families: list[Family] = []
    seen: set[Path] = set()
    for path in paths:
        resolved = Path(path).resolve()
        if resolved in seen:
            continue
        seen.add(resolved)
        family, file_findings = cached_family(Path(path))
        findings.merge(file_findings)
        if family is not None:
            families.append(family)
    check_across(families, findings)
    return families, findings


def cached_family(path: Path) -> tuple[Family | None, Findings]:
    """:func:`check_family`, remembered until the file changes."""
    try:
        stat = path.stat()
    except OSError:
        return check_family(path)
    return _check_family_cached(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _check_family_cached(path: str, mtime_ns: int, size: int) -> tuple[Family | None, Findings]:
    return check_family(path)


def _scope_differences(there: Scope, here: Scope) -> str:
    """``capacity 65536 there, 131072 here; banks 2 there, 4 here``: each field two
    declarations of one scope disagree on."""
    def dtypes(scope: Scope) -> str:
        return ",".join(d.name for d in scope.dtypes) or "any"

    fields = (("capacity", lambda s: s.capacity), ("dtype", dtypes),
              ("alignment", lambda s: s.alignment), ("banks", lambda s: s.banks))
    return "; ".join(f"{name} {value(there)} there, {value(here)} here"
                     for name, value in fields if value(there) != value(here))


def check_across(families: Sequence[Family], findings: Findings) -> None:
    """Family, intrinsic and scope names must not clash between files, one file at most
    describes each CPU target, and a family adding intrinsics to an NPU another file
    describes is one the NPU schedule can run (:func:`intrinsics.runnable.check_npu_family`;
    a family with its own ``machine:`` was checked against it when loaded)."""
    # The targets of kind npu (Registry.target_kind): a machine, and no cpu: section.
    npu_targets = {f.target for f in families if f.machine is not None} - \
        {f.target for f in families if f.cpu is not None}
    for family in families:
        if family.target in npu_targets and family.machine is None:
            check_npu_family(family.intrinsics, family.scopes, None, findings)
    family_at: dict[str, Family] = {}
    cpu_at: dict[str, Family] = {}
    intrinsic_at: dict[str, Intrinsic] = {}
    scope_at: dict[str, Scope] = {}
    for family in families:
        first = family_at.setdefault(family.name, family)
        if first is not family:
            findings.add(SourceLoc(str(family.path), 1, 1),
                         f"family {family.name} is already defined by {first.path}; two "
                         "files of one name cannot both be loaded: rename one")
        if family.cpu is not None:
            described = cpu_at.setdefault(family.target, family)
            if described is not family:
                findings.add(family.cpu.loc, f"target {family.target} is already described "
                             f"by the cpu: section of {described.path}; one file describes "
                             "a CPU target, others add intrinsics to it")
        for intrinsic in family.intrinsics:
            other = intrinsic_at.setdefault(intrinsic.name, intrinsic)
            if other is not intrinsic:
                findings.add(intrinsic.loc, f"duplicate intrinsic name {intrinsic.name}: "
                             f"{other.loc or other.family} defines it too")
        for scope in family.scopes.values():
            known = scope_at.setdefault(scope.name, scope)
            if known is not scope and not known.same_memory(scope):
                findings.add(scope.loc, f"scope {scope.name} is declared differently at "
                             f"{known.loc} ({_scope_differences(known, scope)}); every "
                             "declaration of a scope requires the same capacity, dtype, "
                             "alignment and banks")
    # What a file adds to a CPU target another file describes must compile for that target.
    for family in families:
        described = cpu_at.get(family.target)
        if family.cpu is None and described is not None and described.cpu is not None:
            check_added_intrinsics(described.cpu, family.intrinsics, findings)
