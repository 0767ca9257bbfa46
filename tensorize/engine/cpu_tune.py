"""Register tiles for CPU targets chosen by measurement, and remembered on disk.

:func:`tune_cpu` takes, for each tensorized block, every intrinsic the engine tries for it
under the features (SDOT and SMMLA on AArch64 with i8mm), ranks each one's register tiles of
the target's ``register_tile`` choices that fit the registers by the schedule's estimate
(``cpu_schedule.tile_cost``), tensorizes, emits and runs the best few of each
(:data:`MEASURED`) and keeps the intrinsic and tile that measured best: the fewest
instructions executed under the emulator (AArch64 under unicorn; i8mm code, which unicorn does
not execute, counted with its i8mm instructions as SDOT: ``targets.arm.i8mm_count``), or the
shortest time of native runs (x86): :data:`ROUNDS` rounds in which the block's candidates
take turns, :data:`RUNS` runs each, so that a burst of other work on the machine slows every
candidate rather than one, and each keeps its fastest run. The highest one-minute load
average seen while they ran is kept beside the figures (:class:`Timing`), so a pick made on
a busy machine can be recognised. Blocks are tuned one after another, each with the
intrinsics and tiles already chosen for the others. The tuner holds a block to one intrinsic
by refusing (``ScheduleError``) the engine's mappings of it to any other; the engine then
tries its next mapping.

:class:`TileCache` keeps the winners per target, one JSON file under the user's cache
directory (``$TENSORIZE_CACHE_DIR``, else ``$XDG_CACHE_HOME/tensorize`` or
``~/.cache/tensorize``; the file is ``cpu_tiles/TARGET.json``; the directories it creates
are the user's alone, mode 0700, and the file 0600), keyed by intrinsic, shape (rows, column
vectors and k steps in the intrinsic's units), dtypes and features; an entry may name
another intrinsic, which measured better for that block than the one the estimate maps it to
(the run then refuses the estimate's and takes that one's entry), and records what the
winner measured (``"measured"``). The file records the tool's version and a hash of the
target's description files: when either differs, every entry is stale and ignored. It is
written atomically.

The file is not trusted: anything that can write it could otherwise make a run hang (a tile
of a million registers, unrolled) or stop tensorizing (an intrinsic that is gone). A file
that is not a regular file, is not the user's own or can be written by other users, is
larger than :data:`MAX_FILE_BYTES`, cannot be read, or holds anything but entries of the
form the tuner writes is ignored as a whole; each entry is then checked against the
intrinsic set, the target's limits and its shape (:meth:`TileCache.entry_fault`), and a bad
one is ignored. :meth:`TileCache.tensorize` also drops, at use, an entry that would leave a
block untensorized (one holding it to an intrinsic the engine does not try for it here). Each
is reported with a :class:`TileCacheWarning` naming the file and the entry, never an error;
the next ``--tune`` rewrites the file without them. A file that cannot be saved is a warning
too.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import statistics
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from intrinsics import Intrinsic, Registry, feature_names
from ir import PrimFunc, ScheduleError
from targets import cpu
from tensorize import __version__
from tensorize.engine import Tensorized, auto_tensorize
from tensorize.engine.cpu_schedule import CpuTiling, TileChoice, fitting_tilings, tile_cost

__all__ = ["CODE_FORMS", "MAX_FILE_BYTES", "MEASURED", "ROUNDS", "RUNS", "TileCache",
           "TileCacheWarning", "TileTrial", "Timing", "cache_root", "choose_tune_cpu",
           "tune_cpu"]

# How many of the estimate's best tiles are measured, per block and intrinsic.
MEASURED = 4
# Native runs of a measured tile in each round; its fastest run over every round is its
# figure.
RUNS = 10
# Rounds of native runs: in each, every measured candidate of the block runs RUNS times, in
# turn, so a burst of other work on the machine lands on all of them, not on one.
ROUNDS = 3
# The largest tile cache file read: about 40,000 entries. A larger one is ignored unread.
MAX_FILE_BYTES = 4 << 20
# Bad entries reported one by one; the others are counted in one more warning.
WARNED_ENTRIES = 5
# The longest piece of an entry quoted in a warning.
QUOTED = 120

Units = tuple[int, int, int]

_KEY_FORM = "'INTRINSIC ROWSxVECTORSxSTEPS DTYPES FEATURES'"
_UNITS = re.compile(r"([1-9][0-9]{0,8})x([1-9][0-9]{0,8})x([1-9][0-9]{0,8})")
_TIMED = {"runs", "best_ms", "median_ms", "load", "cpus"}


class TileCacheWarning(UserWarning):
    """The tile cache file, or an entry of it, could not be read or does not hold what it
    should: it is ignored (and replaced by the next tuned run)."""


@dataclass(frozen=True, slots=True)
class Timing:
    """A candidate's native runs: the seconds of each (:data:`ROUNDS` rounds of
    :data:`RUNS`), the highest one-minute load average sampled while the block's candidates
    ran, and the CPUs that load is out of (both None where the system does not say)."""

    seconds: tuple[float, ...]
    load: float | None = None
    cpus: int | None = None

    @property
    def best(self) -> float:
        """The fastest run's seconds: the figure the tuner compares."""
        return min(self.seconds)

    @property
    def median(self) -> float:
        """The median run's seconds: far above :attr:`best`, the runs were disturbed."""
        return statistics.median(self.seconds)

    def __post_init__(self) -> None:
        if not self.seconds:
            raise ValueError("Timing requires at least one run's seconds, got none")

    def describe(self) -> str:
        """``best 0.0123 ms, median 0.0130 ms of 30 runs (load 0.42 on 2 CPUs)``, saying
        ``busy`` when the load was above the CPUs: other work then shared them, and the pick
        may be noise."""
        text = (f"best {self.best * 1e3:.4f} ms, median {self.median * 1e3:.4f} ms of "
                f"{len(self.seconds)} runs")
        if self.load is None:
            return text
        where = f" on {self.cpus} CPUs" if self.cpus else ""
        busy = ": busy, the pick may be noise" if self.cpus and self.load > self.cpus else ""
        return text + f" (load {self.load:.2f}{where}{busy})"

    def record(self) -> dict[str, Any]:
        """What a tile cache entry keeps of it (``"measured"``)."""
        return {"runs": len(self.seconds), "best_ms": round(self.best * 1e3, 6),
                "median_ms": round(self.median * 1e3, 6), "load": self.load,
                "cpus": self.cpus}


@dataclass(frozen=True, slots=True)
class TileTrial:
    """One candidate intrinsic and tile of one block: the estimate's instructions, and what
    it measured when it was among the best the estimate ranked: instructions executed under
    an emulator, or its native runs (both None: not measured)."""

    block: str
    intrinsic: str
    tiling: CpuTiling
    estimate: int
    instructions: int | None = None
    timing: Timing | None = None

    @property
    def seconds(self) -> float | None:
        """The fastest native run's seconds, None when not timed."""
        return None if self.timing is None else self.timing.best

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
        if self.timing is not None:
            return text + f", measured {self.timing.describe()}"
        return text + " (not measured)"

    def record(self) -> dict[str, Any] | None:
        """What a tile cache entry keeps of the measurement, None when not measured."""
        if self.instructions is not None:
            return {"instructions": self.instructions}
        return None if self.timing is None else self.timing.record()

    def to_dict(self) -> dict[str, Any]:
        """The trial as plain data (the run's --json)."""
        timing = self.timing
        return {"block": self.block, "intrinsic": self.intrinsic, "rows": self.tiling.rows,
                "vectors": self.tiling.vectors, "estimate": self.estimate,
                "instructions": self.instructions, "seconds": self.seconds,
                "median_seconds": None if timing is None else timing.median,
                "runs": None if timing is None else len(timing.seconds),
                "load": None if timing is None else timing.load,
                "cpus": None if timing is None else timing.cpus}


def cache_root() -> Path | None:
    """Where tensorize keeps what it caches: ``$TENSORIZE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/tensorize`` (when absolute, as the XDG specification asks), else
    ``~/.cache/tensorize``; None when there is no home directory to put it in."""
    override = os.environ.get("TENSORIZE_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "tensorize"
    try:
        home = Path.home()
    except RuntimeError:  # no $HOME and no password entry
        return None
    return home / ".cache" / "tensorize" if home.is_absolute() else None


class TileCache:
    """The register tiles measured best for one CPU target and its features (module docs).

    ``path`` is the file (None: no cache directory, nothing is read or saved); ``entries``
    the entries of it that passed :meth:`entry_fault`; ``hits`` names the blocks
    :meth:`choose` answered from the file, with the intrinsic and tile."""

    def __init__(self, target: str, features: str, registry: Registry,
                 root: Path | None = None) -> None:
        self.target = target
        self.features = features
        self.registry = registry
        base = root if root is not None else cache_root()
        self.path = None if base is None else base / "cpu_tiles" / f"{target}.json"
        self.stamp = {"version": __version__, "description": description_hash(target, registry)}
        self._fitting: dict[str, set[CpuTiling]] = {}
        self.entries: dict[str, dict[str, Any]] = self._load()
        self.hits: dict[str, tuple[str, CpuTiling]] = {}
        self._hit_keys: dict[str, str] = {}
        self._held: dict[str, str] = {}
        self._holding: dict[str, str] = {}
        self._restricted = False

    def key(self, intrinsic: Intrinsic, units: Units) -> str:
        """The entry of a block tensorized with ``intrinsic`` over ``units``."""
        return f"{intrinsic.name} {'x'.join(map(str, units))} {_dtypes(intrinsic)} " \
               f"{self.features}"

    def get(self, intrinsic: Intrinsic, units: Units) -> CpuTiling | None:
        """The tile stored for ``intrinsic`` over ``units``, None when there is none."""
        entry = self.entries.get(self.key(intrinsic, units))
        return None if entry is None else CpuTiling(entry["rows"], entry["vectors"])

    def measurement(self, block: str) -> dict[str, Any] | None:
        """What the tile :meth:`choose` gave ``block`` measured when the tuner kept it
        (:meth:`TileTrial.record`: the runs, best, median and load of a native pick), None
        when the block's tile did not come from the cache or its entry records nothing."""
        key = self._hit_keys.get(block)
        entry = None if key is None else self.entries.get(key)
        return None if entry is None else entry.get("measured")

    def choose(self, block: str, intrinsic: Intrinsic, units: Units) -> CpuTiling | None:
        """A ``cpu_schedule.TileChoice``: the stored tile, noted in ``hits``. When the entry
        names another intrinsic (it measured better for this block), the mapping is refused
        with a ScheduleError, and so is every later one of the block but that intrinsic's
        (:meth:`tensorize` undoes that where the engine never offers that intrinsic)."""
        held = self._held.get(block)
        if held is not None and held != intrinsic.name:
            raise ScheduleError("tile cache", f"block {block} measured best with {held}")
        key = self.key(intrinsic, units)
        entry = self.entries.get(key)
        if entry is None:
            return None
        better = entry.get("intrinsic", intrinsic.name)
        if better != intrinsic.name:
            if self._restricted:  # the caller chose the intrinsic: the entry's tile is not its
                return None
            self._held[block] = better
            self._holding[block] = key
            raise ScheduleError("tile cache", f"block {block} measured best with {better}")
        tiling = CpuTiling(entry["rows"], entry["vectors"])
        self.hits[block] = (intrinsic.name, tiling)
        self._hit_keys[block] = key
        return tiling

    def tensorize(self, func: PrimFunc, intrinsic: str | None = None) -> Tensorized:
        """``func`` tensorized for the cache's target and features with the stored tiles
        (:meth:`choose`), ``intrinsic`` restricting the intrinsics as in ``auto_tensorize``
        (an entry naming another intrinsic then gives way, and the estimate's tile is
        used). Where an entry held a block to an intrinsic the engine then did not tensorize
        it with (the engine does not try that one for the block), the entry is ignored with
        a :class:`TileCacheWarning` and ``func`` is tensorized again without it: an entry
        never costs a block its tensorization."""
        self._restricted = intrinsic is not None
        try:
            result = self._tensorize(func, intrinsic)
            lost = [b.block for b in result.blocks
                    if b.intrinsic is None and b.block in self._held]
            if not lost:
                return result
            for block in lost:
                key = self._holding[block]
                self._warn(f"tile cache {self.path}: entry {_quoted(key)} is ignored: it "
                           f"holds block {block} to {self._held[block]}, which the engine "
                           f"does not tensorize it with here; the next --tune rewrites it",
                           stacklevel=3)
                self.entries.pop(key, None)
            return self._tensorize(func, intrinsic)
        finally:
            self._restricted = False

    def _tensorize(self, func: PrimFunc, intrinsic: str | None) -> Tensorized:
        self.hits.clear()
        self._hit_keys.clear()
        self._held.clear()
        self._holding.clear()
        return auto_tensorize(func, self.target, registry=self.registry, intrinsic=intrinsic,
                              features=self.features, tiling=self.choose)

    def put(self, intrinsic: Intrinsic, units: Units, tiling: CpuTiling,
            better: str | None = None, measured: dict[str, Any] | None = None) -> None:
        """Store ``tiling`` for ``intrinsic`` over ``units``, or, with ``better`` (another
        intrinsic's name), that the block measured best with that one, and what the kept
        tile ``measured`` (:meth:`TileTrial.record`); :meth:`save` writes it."""
        entry: dict[str, Any] = {"rows": tiling.rows, "vectors": tiling.vectors}
        if better is not None and better != intrinsic.name:
            entry["intrinsic"] = better
        if measured is not None:
            entry["measured"] = measured
        self.entries[self.key(intrinsic, units)] = entry

    def save(self) -> None:
        """Write the file atomically: a reader sees the old file or the new, never part.
        Directories it creates are the user's alone (0700), and so is the file (0600). When
        it cannot be written, a :class:`TileCacheWarning` says why, and the run goes on."""
        if self.path is None:
            self._warn("tile cache is not saved: there is no home directory to keep it in; "
                       "set TENSORIZE_CACHE_DIR", stacklevel=3)
            return
        text = json.dumps({**self.stamp, "tiles": self.entries}, indent=1, sort_keys=True)
        try:
            self.path.parent.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.path.parent.mkdir(mode=0o700, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.path.parent,
                                                 prefix=f".{self.path.name}.")
        except OSError as err:
            self._warn(f"tile cache {self.path} is not saved: {_why(err, self.path)}",
                       stacklevel=3)
            return
        try:
            with os.fdopen(handle, "w") as out:
                out.write(text + "\n")
            os.replace(temporary, self.path)
        except OSError as err:
            os.unlink(temporary)
            self._warn(f"tile cache {self.path} is not saved: {_why(err, self.path)}",
                       stacklevel=3)
        except BaseException:
            os.unlink(temporary)
            raise

    def entry_fault(self, key: Any, entry: Any) -> str | None:
        """Why the entry ``key: entry`` cannot be used, None when it can. It must have the
        tuner's form (:func:`_form_fault`); its key must name a compute intrinsic of the
        target that accumulates, a shape of three positive integers, that intrinsic's
        operand dtypes and features that provide it; its tile must be one of the target's
        ``register_tile`` choices that fit the registers for the intrinsic it is for (the
        one it holds its block to when it names one, which must be such an intrinsic too).
        An entry holding its block to another intrinsic also needs that intrinsic's own
        entry, which :meth:`_load` checks."""
        form = _form_fault(entry)
        if form:
            return f"it {form}"
        parts = key.split(" ", 3) if isinstance(key, str) else []
        if len(parts) != 4:
            return f"its key requires the form {_KEY_FORM}"
        name, units, dtypes, features = parts
        fault = self._intrinsic_fault(name, "its key names", features)
        if fault:
            return fault
        if _UNITS.fullmatch(units) is None:
            return ("its shape requires three positive integers ROWSxVECTORSxSTEPS, got "
                    + _quoted(units))
        own = self.registry.get(name)
        if dtypes != _dtypes(own):
            return (f"its dtypes require {_dtypes(own)} (the operands of {name}), got "
                    + _quoted(dtypes))
        used = entry.get("intrinsic", name)
        if used != name:
            fault = self._intrinsic_fault(used, "it holds its block to", features)
            if fault:
                return fault
        return self._tile_fault(CpuTiling(entry["rows"], entry["vectors"]),
                                self.registry.get(used))

    def _intrinsic_fault(self, name: str, role: str, features: str) -> str | None:
        """Why ``name`` is not an intrinsic a tile is kept for on this target under
        ``features``, None when it is."""
        if name not in self.registry:
            return (f"{role} intrinsic {_quoted(name)}, which no loaded description of "
                    f"target {self.target} declares")
        intrinsic = self.registry.get(name)
        if intrinsic.target != self.target:
            return (f"{role} {name}, an intrinsic of target {intrinsic.target}, not of "
                    f"{self.target}")
        if intrinsic.kind != "compute" or not intrinsic.reduce_vars() or intrinsic.resets:
            return (f"{role} {name}, a {intrinsic.kind} intrinsic; tiles are kept only for "
                    "compute intrinsics that accumulate")
        if not intrinsic.available(feature_names(features)):
            return (f"{role} {name}, which requires feature +{intrinsic.feature}, got "
                    f"features {_quoted(features)}")
        return None

    def _tile_fault(self, tiling: CpuTiling, intrinsic: Intrinsic) -> str | None:
        """Why ``tiling`` is not one of the target's register tiles that fit its registers
        for ``intrinsic``, None when it is."""
        description = self.registry.cpu(self.target)
        fitting = self._fitting.get(intrinsic.name)
        if fitting is None:
            fitting = self._fitting[intrinsic.name] = set(fitting_tilings(description,
                                                                          intrinsic))
        if tiling in fitting:
            return None
        return (f"its tile requires one of target {self.target}'s register_tile choices "
                f"(rows {list(description.tile_rows)}, vectors "
                f"{list(description.tile_vectors)}) that fit its "
                f"{description.usable_registers} registers for {intrinsic.name}, got "
                f"{tiling.rows} x {tiling.vectors}")

    def _load(self) -> dict[str, dict[str, Any]]:
        """The file's good entries; none when it is absent or stale, and none with a warning
        when it cannot be trusted or read or is malformed; each bad entry is left out with a
        warning."""
        text = self._read()
        if text is None:
            return {}
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as err:  # not JSON, too many digits, too deep
            return self._ignored(f"it cannot be read ({_short(str(err))}); the next --tune "
                                 "rewrites it")
        if not isinstance(data, dict) or not isinstance(data.get("tiles"), dict):
            return self._ignored("it is not an object with a 'tiles' object; the next --tune "
                                 "rewrites it")
        if any(data.get(name) != value for name, value in self.stamp.items()):
            return {}
        tiles: dict[Any, Any] = data["tiles"]
        # An entry of another form than the tuner writes: the file is not the tuner's.
        for key, entry in tiles.items():
            form = _form_fault(entry)
            if form:
                return self._ignored(f"entry {_quoted(key)} {form}; the next --tune "
                                     "rewrites it")
        faults = {key: self.entry_fault(key, entry) for key, entry in tiles.items()}
        good = {key: entry for key, entry in tiles.items() if faults[key] is None}
        owners = set()  # (intrinsic, dtypes, features) of each good entry naming no other
        for key, entry in good.items():
            name, _, dtypes, features = key.split(" ", 3)
            if entry.get("intrinsic", name) == name:
                owners.add((name, dtypes, features))
        for key, entry in good.items():
            faults[key] = self._holder_fault(key, entry, owners)
        bad = [(key, why) for key, why in faults.items() if why is not None]
        for key, why in bad[:WARNED_ENTRIES]:
            self._warn(f"tile cache {self.path}: entry {_quoted(key)} is ignored: {why}")
        if len(bad) > WARNED_ENTRIES:
            self._warn(f"tile cache {self.path}: {len(bad) - WARNED_ENTRIES} more bad "
                       "entries are ignored")
        return {key: entry for key, entry in good.items() if faults[key] is None}

    def _holder_fault(self, key: str, entry: dict[str, Any],
                      owners: set[tuple[str, str, str]]) -> str | None:
        """Why an entry naming another intrinsic cannot be used, None when it can: the file
        must also hold a good entry of that intrinsic's own (``owners``: intrinsic, dtypes
        and features of each good entry naming no other), for the same dtypes and features,
        as the tuner writes it."""
        name, _, dtypes, features = key.split(" ", 3)
        better = entry.get("intrinsic", name)
        if better == name or (better, dtypes, features) in owners:
            return None
        return (f"it holds its block to {better}, but the file holds no good entry of "
                f"{better}'s own for {dtypes} {_quoted(features)}")

    def _read(self) -> str | None:
        """The file's text when it exists and can be trusted and read; None otherwise
        (with a warning, unless it is absent)."""
        if self.path is None:
            return None
        # Non-blocking: a FIFO planted in the file's place must not hang the run.
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
        try:
            handle = os.open(self.path, flags)
        except FileNotFoundError:
            return None
        except OSError as err:
            self._ignored(f"it cannot be read ({_why(err, self.path)})", stacklevel=6)
            return None
        try:
            info = os.fstat(handle)
            why = _untrusted(info, self.path)
            if why:
                self._ignored(why, stacklevel=6)
                return None
            data = b""
            while len(data) <= MAX_FILE_BYTES:
                chunk = os.read(handle, MAX_FILE_BYTES + 1 - len(data))
                if not chunk:
                    break
                data += chunk
            if len(data) > MAX_FILE_BYTES:
                self._ignored(f"it is larger than {MAX_FILE_BYTES >> 20} MiB; the next --tune "
                              "rewrites it", stacklevel=6)
                return None
            return data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            self._ignored(f"it cannot be read ({_short(_why(err, self.path))}); the next --tune "
                          "rewrites it", stacklevel=6)
            return None
        finally:
            os.close(handle)

    def _ignored(self, why: str, stacklevel: int = 5) -> dict[str, dict[str, Any]]:
        self._warn(f"tile cache {self.path} is ignored: {why}", stacklevel)
        return {}

    @staticmethod
    def _warn(message: str, stacklevel: int = 4) -> None:
        warnings.warn(message, TileCacheWarning, stacklevel=stacklevel)


def _untrusted(info: os.stat_result, path: Path) -> str | None:
    """Why a cache file with status ``info`` is not to be read, None when it may be: it
    must be a regular file, and on POSIX the user's own, which no one else can write."""
    if not stat.S_ISREG(info.st_mode):
        return f"it is not a regular file; remove it ({path})"
    getuid = getattr(os, "getuid", None)
    if getuid is None:
        return None
    if info.st_uid != getuid():
        return (f"it belongs to user id {info.st_uid}, not to you ({getuid()}); remove it, "
                "or point TENSORIZE_CACHE_DIR at a directory of your own")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"other users can write it (mode {stat.filemode(info.st_mode)}); "
                f"run chmod go-w {path}")
    return None


def _form_fault(entry: Any) -> str | None:
    """Why ``entry`` is not of the form the tuner writes, None when it is: ``{rows,
    vectors}`` of positive integers, with, optionally, an intrinsic's name and what it
    measured (:meth:`TileTrial.record`)."""
    if not (isinstance(entry, dict) and {"rows", "vectors"} <= set(entry)
            and set(entry) <= {"rows", "vectors", "intrinsic", "measured"}
            and all(type(entry[n]) is int and entry[n] > 0 for n in ("rows", "vectors"))
            and isinstance(entry.get("intrinsic", ""), str)):
        return ("is not {rows, vectors} of positive integers (and an intrinsic's name), "
                f"got {_quoted(entry)}")
    if "measured" in entry and not _measurement(entry["measured"]):
        return ("has a 'measured' record other than {runs, best_ms, median_ms, load, cpus} "
                "or {instructions} of non-negative numbers, got " + _quoted(entry["measured"]))
    return None


def _measurement(record: Any) -> bool:
    """True when ``record`` is what :meth:`TileTrial.record` writes."""
    if not isinstance(record, dict):
        return False
    if set(record) == {"instructions"}:
        return _count(record["instructions"])
    return set(record) == _TIMED and _count(record["runs"]) and \
        all(_amount(record[n]) for n in ("best_ms", "median_ms")) and \
        (record["load"] is None or _amount(record["load"])) and \
        (record["cpus"] is None or _count(record["cpus"]))


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _amount(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


def _dtypes(intrinsic: Intrinsic) -> str:
    """The dtypes of ``intrinsic``'s operands, as an entry's key names them."""
    return ",".join(o.dtype.name for o in intrinsic.operands)


def _quoted(value: Any) -> str:
    """``value`` as JSON (control characters escaped: a planted name cannot drive the
    terminal), cut to :data:`QUOTED` characters."""
    if isinstance(value, str) and len(value) > QUOTED:
        return json.dumps(value[:QUOTED] + "...")
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(type(value))
    return _short(text)


def _short(text: str) -> str:
    return text if len(text) <= QUOTED else text[:QUOTED] + "..."


def _why(err: Exception, path: Path | None = None) -> str:
    """An error in words, without Python's class name: ``Permission denied``, naming the
    file it is about when that is not ``path``."""
    strerror = getattr(err, "strerror", None)
    if not strerror:
        return str(err)
    filename = getattr(err, "filename", None)
    if filename is not None and str(filename) != str(path):
        return f"{strerror} ({filename})"
    return strerror


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
                if rank < measured:
                    result = auto_tensorize(
                        func, target, registry=registry, intrinsic=intrinsic,
                        features=features,
                        tiling=_given({**chosen, outcome.block: (used.name, tiling)}))
                    # A block the schedule could not give this intrinsic and tile went
                    # untensorized: that is not this tile's figure.
                    if any(b.block == outcome.block for b in result.tensorized):
                        results[used.name, tiling] = result
                block_trials.append(TileTrial(outcome.block, used.name, tiling, estimate))
        figures = _measure(results, target, features, registry)
        block_trials = [TileTrial(t.block, t.intrinsic, t.tiling, t.estimate,
                                  *figures.get((t.intrinsic, t.tiling), (None, None)))
                        for t in block_trials]
        trials.extend(block_trials)
        done = [t for t in block_trials if t.measured is not None]
        if not done:
            continue
        winner = min(done, key=lambda t: t.measured or 0.0)
        chosen[outcome.block] = (winner.intrinsic, winner.tiling)
        best = results[winner.intrinsic, winner.tiling]
        if cache is not None:
            estimated, units = shapes[outcome.block]
            cache.put(estimated, units, winner.tiling, winner.intrinsic, winner.record())
            if winner.intrinsic != estimated.name:
                cache.put(*mappings[winner.intrinsic], winner.tiling,
                          measured=winner.record())
    if cache is not None and chosen:
        cache.save()
    return best, trials, chosen


# The forms of code choose_tune_cpu emits each kernel in (cpu.emit's options), the first
# LLVM's own: the k loops rolled, then the packing's interleaving stores chained as well.
# Chained stores with LLVM's unrolling kept executed no fewer than the fewest of these on
# the SDOT kernels of bench_arm.py measured (64^3, 17x33x65, 100x37x50, the GEMVs).
CODE_FORMS: tuple[dict[str, bool], ...] = ({}, {"rolled": True},
                                           {"rolled": True, "chain_stores": True})


def choose_tune_cpu(func: PrimFunc, target: str, features: str | None = None, *,
                    registry: Registry) -> tuple[cpu.CpuKernel, dict[str, int | None]]:
    """``func`` (tensorized for CPU target ``target``) emitted once for each CPU of the
    description's ``tune_cpus`` whose scheduling model LLVM may tune it for, and the kernel
    that executed the fewest instructions under an emulator (zero inputs: the count does not
    depend on the values; i8mm code counted with its i8mm instructions as SDOT:
    :func:`targets.cpu.count_executed`), with each CPU's count (None: not counted). Each
    CPU's kernel is also emitted in the other forms of :data:`CODE_FORMS` whose code
    differs, and the form that executes fewest stands for the CPU (its count the form's):
    LLVM's unroller and plain store addresses serve the 8 x 8 tiles tuned for cortex-a55,
    and make the one-row GEMV's k loop spill and its packing spend an ``add`` a store
    (docs/arm_backend.md). Where nothing here counts them (natively) the first of
    ``tune_cpus`` stands, in the first form."""
    names = registry.cpu(target).tune_cpus
    kernels = {name: cpu.emit(func, target, features, registry=registry, tune_cpu=name)
               for name in names}
    counts: dict[str, int | None] = {}
    for name, kernel in kernels.items():
        counts[name] = cpu.count_executed(kernel, {}) if len(names) > 1 else None
        kernels[name], counts[name] = _fewest_form(func, target, features, registry, name,
                                                   kernel, counts[name])
    measured = {name: count for name, count in counts.items() if count is not None}
    best = min(measured, key=lambda name: measured[name]) if measured else names[0]
    return kernels[best], counts


def _fewest_form(func: PrimFunc, target: str, features: str | None, registry: Registry,
                 tune: str, kernel: cpu.CpuKernel, count: int | None
                 ) -> tuple[cpu.CpuKernel, int | None]:
    """Of ``kernel`` (``func`` in the first of :data:`CODE_FORMS`, tuned for ``tune``,
    executing ``count``) and the other forms whose code differs, the one that executes
    fewest and its count; ``kernel`` where it was not counted."""
    if count is None:
        return kernel, count
    tried = {kernel.llvm_ir}
    for form in CODE_FORMS[1:]:
        other = cpu.emit(func, target, features, registry=registry, tune_cpu=tune, **form)
        if other.llvm_ir in tried:
            continue
        tried.add(other.llvm_ir)
        fewer = cpu.count_executed(other, {})
        if fewer is not None and fewer < count:
            kernel, count = other, fewer
    return kernel, count


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


def _measure(results: dict[tuple[str, CpuTiling], Tensorized], target: str, features: str,
             registry: Registry
             ) -> dict[tuple[str, CpuTiling], tuple[int | None, Timing | None]]:
    """What each of a block's candidates ``results`` measured, on zero inputs (neither
    figure depends on the values): instructions executed under an emulator
    (:func:`targets.cpu.count_executed`, which also counts i8mm code), or natively its
    :class:`Timing`: :data:`ROUNDS` rounds in which the candidates take turns, :data:`RUNS`
    runs each, with the highest load average seen from before the first round to after
    the last. A candidate no engine here runs, or that neither counts nor times, is left
    out."""
    kernels = {key: cpu.emit(result.func, target, features, registry=registry)
               for key, result in results.items()}
    figures: dict[tuple[str, CpuTiling], tuple[int | None, Timing | None]] = {}
    native = {}
    for key, kernel in kernels.items():
        if cpu.engine_for(kernel)[0] == "native":
            native[key] = kernel
        else:
            count = cpu.count_executed(kernel, {})
            if count is not None:
                figures[key] = (count, None)
    if not native:
        return figures
    seconds: dict[tuple[str, CpuTiling], list[float]] = {key: [] for key in native}
    loads = [_load_average()]
    for _ in range(ROUNDS):
        for key, kernel in native.items():
            seconds[key].extend(cpu.run(kernel, {}, RUNS).seconds)
        loads.append(_load_average())
    known = [load for load in loads if load is not None]
    load = max(known) if known else None
    for key, runs in seconds.items():
        if runs:
            figures[key] = (None, Timing(tuple(runs), load, os.cpu_count()))
    return figures


def _load_average() -> float | None:
    """The system's one-minute load average, None where the system does not say."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None
