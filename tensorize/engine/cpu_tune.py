"""Register tiles for CPU targets chosen by measurement, and remembered on disk.

:func:`tune_cpu` takes, for each tensorized block, every intrinsic the engine tries for it
under the features (SDOT and SMMLA on AArch64 with i8mm), ranks each one's register tiles of
the target's ``register_tile`` choices that fit the registers by the schedule's estimate
(``cpu_schedule.tile_cost``), tensorizes, emits and runs the best few of each
(:data:`MEASURED`) and keeps the intrinsic and tile that measured best: the fewest
instructions executed under the emulator (AArch64 under unicorn; i8mm code, which unicorn does
not execute, counted with its i8mm instructions as SDOT: ``targets.arm.i8mm_count``), or the
shortest best time of several native runs (x86). Blocks are tuned one after another, each
with the intrinsics and tiles already chosen for the others. The tuner holds a block to one
intrinsic by refusing (``ScheduleError``) the engine's mappings of it to any other; the engine
then tries its next mapping.

:class:`TileCache` keeps the winners per target, one JSON file under the user's cache
directory (``$TENSORIZE_CACHE_DIR``, else ``$XDG_CACHE_HOME/tensorize`` or
``~/.cache/tensorize``; the file is ``cpu_tiles/TARGET.json``), keyed by intrinsic, shape
(rows, column vectors and k steps in the intrinsic's units), dtypes and features; an entry
may name another intrinsic, which measured better for that block than the one the estimate
maps it to (the run then refuses the estimate's and takes that one's entry). The file
records the tool's version and a hash of the target's description files: when either
differs, every entry is stale and ignored. It is written atomically; an unreadable or
malformed file is ignored with a :class:`TileCacheWarning`, never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from intrinsics import Intrinsic, Registry, default_registry
from ir import PrimFunc, ScheduleError
from targets import cpu
from tensorize import __version__
from tensorize.engine import Tensorized, auto_tensorize
from tensorize.engine.cpu_schedule import CpuTiling, TileChoice, fitting_tilings, tile_cost

__all__ = ["MEASURED", "TileCache", "TileCacheWarning", "TileTrial", "cache_root",
           "choose_tune_cpu", "tune_cpu"]

# How many of the estimate's best tiles are measured, per block and intrinsic.
MEASURED = 4
# Native runs per measured tile; the best one's time is its figure.
RUNS = 10

Units = tuple[int, int, int]


class TileCacheWarning(UserWarning):
    """The tile cache file could not be read or does not hold what it should: it is
    ignored (and replaced by the next tuned run)."""


@dataclass(frozen=True, slots=True)
class TileTrial:
    """One candidate intrinsic and tile of one block: the estimate's instructions, and what
    it measured when it was among the best the estimate ranked: instructions executed under
    an emulator, or the best of several native runs' seconds (both None: not measured)."""

    block: str
    intrinsic: str
    tiling: CpuTiling
    estimate: int
    instructions: int | None = None
    seconds: float | None = None

    @property
    def measured(self) -> float | None:
        """The figure the tuner compares (lower is better), None when not measured."""
        return self.instructions if self.instructions is not None else self.seconds

    def describe(self) -> str:
        """One line for the run's report."""
        text = (f"{self.block}: {self.intrinsic} tile {self.tiling.rows} x "
                f"{self.tiling.vectors}: estimate {self.estimate:,} instructions")
        if self.instructions is not None:
            return text + f", measured {self.instructions:,} instructions executed"
        if self.seconds is not None:
            return text + f", measured best {self.seconds * 1e3:.4f} ms of {RUNS} runs"
        return text + " (not measured)"

    def to_dict(self) -> dict[str, Any]:
        """The trial as plain data (the run's --json)."""
        return {"block": self.block, "intrinsic": self.intrinsic, "rows": self.tiling.rows,
                "vectors": self.tiling.vectors, "estimate": self.estimate,
                "instructions": self.instructions, "seconds": self.seconds}


def cache_root() -> Path:
    """Where tensorize keeps what it caches: ``$TENSORIZE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/tensorize``, else ``~/.cache/tensorize``."""
    override = os.environ.get("TENSORIZE_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "tensorize"


class TileCache:
    """The register tiles measured best for one CPU target and its features (module docs).

    ``hits`` names the blocks :meth:`choose` answered from the file, with the intrinsic and
    tile."""

    def __init__(self, target: str, features: str, registry: Registry,
                 root: Path | None = None) -> None:
        self.target = target
        self.features = features
        self.path = (root or cache_root()) / "cpu_tiles" / f"{target}.json"
        self.stamp = {"version": __version__, "description": description_hash(target, registry)}
        self.entries: dict[str, dict[str, Any]] = self._load()
        self.hits: dict[str, tuple[str, CpuTiling]] = {}
        self._held: dict[str, str] = {}

    def key(self, intrinsic: Intrinsic, units: Units) -> str:
        """The entry of a block tensorized with ``intrinsic`` over ``units``."""
        dtypes = ",".join(o.dtype.name for o in intrinsic.operands)
        return f"{intrinsic.name} {'x'.join(map(str, units))} {dtypes} {self.features}"

    def get(self, intrinsic: Intrinsic, units: Units) -> CpuTiling | None:
        """The tile stored for ``intrinsic`` over ``units``, None when there is none."""
        entry = self.entries.get(self.key(intrinsic, units))
        return None if entry is None else CpuTiling(entry["rows"], entry["vectors"])

    def choose(self, block: str, intrinsic: Intrinsic, units: Units) -> CpuTiling | None:
        """A ``cpu_schedule.TileChoice``: the stored tile, noted in ``hits``. When the entry
        names another intrinsic (it measured better for this block), the mapping is refused
        with a ScheduleError, and so is every later one of the block but that intrinsic's."""
        held = self._held.get(block)
        if held is not None and held != intrinsic.name:
            raise ScheduleError("tile cache", f"block {block} measured best with {held}")
        entry = self.entries.get(self.key(intrinsic, units))
        if entry is None:
            return None
        better = entry.get("intrinsic", intrinsic.name)
        if better != intrinsic.name:
            self._held[block] = better
            raise ScheduleError("tile cache", f"block {block} measured best with {better}")
        tiling = CpuTiling(entry["rows"], entry["vectors"])
        self.hits[block] = (intrinsic.name, tiling)
        return tiling

    def put(self, intrinsic: Intrinsic, units: Units, tiling: CpuTiling,
            better: str | None = None) -> None:
        """Store ``tiling`` for ``intrinsic`` over ``units``, or, with ``better`` (another
        intrinsic's name), that the block measured best with that one (:meth:`save` writes
        it)."""
        entry: dict[str, Any] = {"rows": tiling.rows, "vectors": tiling.vectors}
        if better is not None and better != intrinsic.name:
            entry["intrinsic"] = better
        self.entries[self.key(intrinsic, units)] = entry

    def save(self) -> None:
        """Write the file atomically: a reader sees the old file or the new, never part."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({**self.stamp, "tiles": self.entries}, indent=1, sort_keys=True)
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(handle, "w") as out:
                out.write(text + "\n")
            os.replace(temporary, self.path)
        except BaseException:
            os.unlink(temporary)
            raise

    def _load(self) -> dict[str, dict[str, Any]]:
        """The file's entries; none when it is absent or stale, and none with a warning when
        it cannot be read or is malformed."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            return self._ignored(f"it cannot be read ({err})")
        if not isinstance(data, dict) or not isinstance(data.get("tiles"), dict):
            return self._ignored("it is not an object with a 'tiles' object")
        if any(data.get(name) != value for name, value in self.stamp.items()):
            return {}
        tiles = data["tiles"]
        if not all(isinstance(e, dict) and set(e) - {"intrinsic"} == {"rows", "vectors"}
                   and all(type(e[n]) is int and e[n] > 0 for n in ("rows", "vectors"))
                   and isinstance(e.get("intrinsic", ""), str)
                   for e in tiles.values()):
            return self._ignored("an entry is not {rows, vectors} of positive integers "
                                 "(and an intrinsic's name)")
        return tiles

    def _ignored(self, why: str) -> dict[str, dict[str, Any]]:
        warnings.warn(f"tile cache {self.path} is ignored: {why}", TileCacheWarning,
                      stacklevel=3)
        return {}


def description_hash(target: str, registry: Registry) -> str:
    """SHA-256 of the files of every family of ``target``, in path order: an edit to any of
    them changes it."""
    digest = hashlib.sha256()
    for path in sorted(str(f.path) for f in registry.families if f.target == target):
        digest.update(path.encode() + b"\0" + Path(path).read_bytes() + b"\0")
    return digest.hexdigest()


def tune_cpu(func: PrimFunc, target: str, features: str, registry: Registry,
             intrinsic: str | None = None, measured: int = MEASURED,
             cache: TileCache | None = None
             ) -> tuple[Tensorized, list[TileTrial], dict[str, tuple[str, CpuTiling]]]:
    """The tensorization of ``func`` for CPU target ``target`` whose intrinsics and register
    tiles measured best (module docs), one trial per candidate intrinsic and tile of each
    tensorized block (each intrinsic's in the estimate's order), and the intrinsic and tile
    kept for each block measured. With ``cache``, the kept tiles are stored in it and saved.
    A kernel no engine here can run is not measured: the estimate's choice stands."""
    shapes: dict[str, tuple[Intrinsic, Units]] = {}

    def record(block: str, used: Intrinsic, units: Units) -> None:
        shapes[block] = (used, units)

    best = auto_tensorize(func, target, registry=registry, intrinsic=intrinsic,
                          features=features, tiling=record)
    description = registry.cpu(target)
    chosen: dict[str, tuple[str, CpuTiling]] = {}
    trials: list[TileTrial] = []
    for outcome in best.tensorized:
        if outcome.block not in shapes:
            continue
        results: dict[tuple[str, CpuTiling], Tensorized] = {}
        block_trials = []
        mappings = _mappings(func, target, features, registry, intrinsic, chosen,
                             outcome.block)
        for used, units in mappings.values():
            ranked = sorted(((t, tile_cost(t, *units, description, used))
                             for t in fitting_tilings(description, used)),
                            key=lambda p: (p[1], -p[0].rows * p[0].vectors, -p[0].rows))
            for rank, (tiling, estimate) in enumerate(ranked):
                trial = TileTrial(outcome.block, used.name, tiling, estimate)
                if rank < measured:
                    result = auto_tensorize(
                        func, target, registry=registry, intrinsic=intrinsic,
                        features=features,
                        tiling=_given({**chosen, outcome.block: (used.name, tiling)}))
                    # A block the schedule could not give this intrinsic and tile went
                    # untensorized: that is not this tile's figure.
                    if any(b.block == outcome.block for b in result.tensorized):
                        instructions, seconds = _measure(result, target, features, registry)
                        trial = TileTrial(outcome.block, used.name, tiling, estimate,
                                          instructions, seconds)
                        results[used.name, tiling] = result
                block_trials.append(trial)
        trials.extend(block_trials)
        done = [t for t in block_trials if t.measured is not None]
        if not done:
            continue
        winner = min(done, key=lambda t: t.measured or 0.0)
        chosen[outcome.block] = (winner.intrinsic, winner.tiling)
        best = results[winner.intrinsic, winner.tiling]
        if cache is not None:
            estimated, units = shapes[outcome.block]
            cache.put(estimated, units, winner.tiling, winner.intrinsic)
            if winner.intrinsic != estimated.name:
                cache.put(*mappings[winner.intrinsic], winner.tiling)
    if cache is not None and chosen:
        cache.save()
    return best, trials, chosen


def choose_tune_cpu(func: PrimFunc, target: str, features: str | None = None,
                    registry: Registry | None = None
                    ) -> tuple[cpu.CpuKernel, dict[str, int | None]]:
    """``func`` (tensorized for CPU target ``target``) emitted once for each CPU of the
    description's ``tune_cpus`` whose scheduling model LLVM may tune it for, and the kernel
    that executed the fewest instructions under an emulator (zero inputs: the count does not
    depend on the values), with each CPU's count (None: not counted). Where no engine here
    counts them (natively, or under qemu-user) the first of ``tune_cpus`` stands."""
    registry = registry or default_registry()
    names = registry.cpu(target).tune_cpus
    kernels = {name: cpu.emit(func, target, features, registry, tune_cpu=name)
               for name in names}
    counts: dict[str, int | None] = {}
    for name, kernel in kernels.items():
        counted = len(names) > 1 and cpu.engine_for(kernel)[0] is not None
        counts[name] = cpu.run(kernel, {}).instructions if counted else None
    measured = {name: count for name, count in counts.items() if count is not None}
    best = min(measured, key=lambda name: measured[name]) if measured else names[0]
    return kernels[best], counts


def _given(tiles: dict[str, tuple[str, CpuTiling]]) -> TileChoice:
    """The tile choice that gives each block of ``tiles`` its tile, refusing (ScheduleError)
    the engine's mappings of it to any intrinsic but its own, and leaves the other blocks to
    the estimate."""
    def choose(block: str, used: Intrinsic, units: Units) -> CpuTiling | None:
        if block not in tiles:
            return None
        name, tiling = tiles[block]
        if used.name != name:
            raise ScheduleError("cpu tune", f"block {block} is being tried with {name}")
        return tiling
    return choose


def _mappings(func: PrimFunc, target: str, features: str, registry: Registry,
              intrinsic: str | None, chosen: dict[str, tuple[str, CpuTiling]], block: str
              ) -> dict[str, tuple[Intrinsic, Units]]:
    """Each intrinsic the engine tries for ``block`` (with the other blocks as ``chosen``),
    by name in the engine's order, and the block's shape in its units: every mapping of the
    block is refused, so the engine asks for each of them in turn."""
    given = _given(chosen)
    asked: dict[str, tuple[Intrinsic, Units]] = {}

    def refuse(name: str, used: Intrinsic, units: Units) -> CpuTiling | None:
        if name != block:
            return given(name, used, units)
        asked.setdefault(used.name, (used, units))
        raise ScheduleError("cpu tune", f"listing the intrinsics of block {block}")

    auto_tensorize(func, target, registry=registry, intrinsic=intrinsic, features=features,
                   tiling=refuse)
    return asked


def _measure(result: Tensorized, target: str, features: str, registry: Registry
             ) -> tuple[int | None, float | None]:
    """Instructions executed under an emulator (:func:`targets.cpu.count_executed`, which
    also counts i8mm code), or the best native run's seconds, of ``result``'s code on zero
    inputs (neither depends on the values); (None, None) when no engine here runs it or the
    engine neither counts nor times."""
    kernel = cpu.emit(result.func, target, features, registry)
    if cpu.engine_for(kernel)[0] != "native":
        return cpu.count_executed(kernel, {}), None
    run = cpu.run(kernel, {}, RUNS)
    return None, (run.best if run.seconds else None)
