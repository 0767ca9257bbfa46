"""The tile cache does not trust its file (each entry is checked against the intrinsic set,
the target's register limits and its shape; a bad one is ignored with a warning naming the
file and the entry; a file that cannot be trusted or read is ignored whole), and x86 tuning
times its candidates in interleaved rounds, keeps each one's fastest run and records the
load beside the kept tile."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import warnings
from pathlib import Path

import pytest

import ir
from intrinsics import default_registry, load_registry
from intrinsics.registry import BUILTIN_DIR
from ir import te
from targets.cpu.host import host_arch, missing_features
from tensorize import __version__
from tensorize.engine import auto_tensorize, cpu_tune
from tensorize.engine.cpu_schedule import CpuTiling
from tensorize.engine.cpu_tune import TileCache, TileCacheWarning, TileTrial, Timing

ARM = "+neon,+dotprod"
I8MM = "+neon,+dotprod,+i8mm"
X86 = "+avx2,+avx512f,+avx512bw,+avx512vl,+avx512vnni"
# The x86 GEMM 40 x 20 x 24 (u8 x s8) in VPDPBUSD's units: 40 rows, 20 columns in 2 vectors
# of 16, 24 k in 6 steps of 4.
X86_KEY = f"x86_vpdpbusd 40x2x6 uint8,int8,int32 {X86}"
SDOT_40 = f"arm_sdot_lane 40x5x6 int8,int8,int32 {ARM}"


def gemm(m: int, n: int, k: int, a_dtype: str = "int8") -> ir.PrimFunc:
    A = te.placeholder((m, k), a_dtype, "A")
    B = te.placeholder((k, n), "int8", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("int32", A[i, rk]) * ir.cast("int32", B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], "gemm")


def _plant(root: Path, target: str, tiles: object) -> Path:
    """Write a cache file for ``target`` that is current (this version, these descriptions)
    and holds ``tiles``; returns its path."""
    path = root / "cpu_tiles" / f"{target}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = {"version": __version__,
             "description": cpu_tune.description_hash(target, default_registry())}
    path.write_text(json.dumps({**stamp, "tiles": tiles}))
    return path


def _load(root: Path, target: str, features: str) -> tuple[TileCache, list[str]]:
    """The cache as loaded, and the messages of the warnings loading it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = TileCache(target, features, default_registry(), root)
    assert all(w.category is TileCacheWarning for w in caught), caught
    return cache, [str(w.message) for w in caught]


@contextlib.contextmanager
def _no_hang(seconds: int = 60):
    """Raise instead of waiting forever (a FIFO read that blocks)."""
    def stop(signum, frame):
        raise TimeoutError("the tile cache blocked")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# Register arithmetic for x86 (32 ZMM registers, 2 reserved: 30 usable; A stays in memory,
# one register takes its broadcast): a tile of r rows by v vectors holds r * v accumulators,
# v B panels and 1 broadcast. 12 x 2: 24 + 2 + 1 = 27 fits; 14 x 2: 28 + 2 + 1 = 31 does
# not; 5 rows is not among register_tile's rows [14, 12, 8, 7, 6, 4, 2, 1].
@pytest.mark.parametrize("rows, vectors", [(1000, 1000), (14, 2), (5, 1), (12, 5)])
def test_a_tile_outside_the_targets_register_tiles_is_ignored(tmp_path, rows, vectors):
    path = _plant(tmp_path, "x86", {X86_KEY: {"rows": rows, "vectors": vectors}})
    cache, said = _load(tmp_path, "x86", X86)
    assert cache.entries == {}
    assert said == [f'tile cache {path}: entry "{X86_KEY}" is ignored: its tile requires one '
                    "of target x86's register_tile choices (rows [14, 12, 8, 7, 6, 4, 2, 1], "
                    "vectors [4, 3, 2, 1]) that fit its 30 registers for x86_vpdpbusd, got "
                    f"{rows} x {vectors}"]


def test_a_tile_that_fits_is_kept_without_a_warning(tmp_path):
    _plant(tmp_path, "x86", {X86_KEY: {"rows": 12, "vectors": 2}})
    cache, said = _load(tmp_path, "x86", X86)
    assert said == []
    assert cache.get(default_registry().get("x86_vpdpbusd"), (40, 2, 6)) == CpuTiling(12, 2)


def test_a_huge_tile_never_reaches_the_schedule(tmp_path):
    # The entry that hung `run --target x86` for minutes: ignored, the estimate's tile is
    # used, as with no cache at all.
    _plant(tmp_path, "x86", {X86_KEY: {"rows": 1000, "vectors": 1000}})
    cache, _ = _load(tmp_path, "x86", X86)
    func = gemm(40, 20, 24, "uint8")
    result = cache.tensorize(func)
    reference = auto_tensorize(func, "x86", registry=default_registry(), features=X86)
    assert cache.hits == {}
    assert ir.structural_equal(result.func, reference.func)


@pytest.mark.parametrize("key, why", [
    (f"x86_vpdpbusd_gone 40x2x6 uint8,int8,int32 {X86}",
     'its key names intrinsic "x86_vpdpbusd_gone", which no loaded description of target '
     "x86 declares"),
    (f"arm_sdot_lane 40x2x6 int8,int8,int32 {X86}",
     "its key names arm_sdot_lane, an intrinsic of target arm, not of x86"),
    (f"x86_load_16x4_s8 40x2x6 int8,int8 {X86}",
     "its key names x86_load_16x4_s8, a load intrinsic; tiles are kept only for compute "
     "intrinsics that accumulate"),
    (f"x86_vpdpbusd 40x0x6 uint8,int8,int32 {X86}",
     'its shape requires three positive integers ROWSxVECTORSxSTEPS, got "40x0x6"'),
    (f"x86_vpdpbusd 40x2 uint8,int8,int32 {X86}",
     'its shape requires three positive integers ROWSxVECTORSxSTEPS, got "40x2"'),
    (f"x86_vpdpbusd 40x2x6 int8,int8,int32 {X86}",
     'its dtypes require uint8,int8,int32 (the operands of x86_vpdpbusd), got '
     '"int8,int8,int32"'),
    ("x86_vpdpbusd 40x2x6",
     "its key requires the form 'INTRINSIC ROWSxVECTORSxSTEPS DTYPES FEATURES'"),
])
def test_an_entry_whose_key_is_not_a_shape_of_an_intrinsic_is_ignored(tmp_path, key, why):
    good = {"rows": 4, "vectors": 2}
    path = _plant(tmp_path, "x86", {key: good, X86_KEY: good})
    cache, said = _load(tmp_path, "x86", X86)
    assert cache.entries == {X86_KEY: good}
    assert said == [f"tile cache {path}: entry {json.dumps(key)} is ignored: {why}"]


def test_an_entry_holding_its_block_to_an_intrinsic_that_is_gone_is_ignored(tmp_path):
    entry = {"rows": 4, "vectors": 2, "intrinsic": "x86_vpdpbusd_v2"}
    path = _plant(tmp_path, "x86", {X86_KEY: entry})
    cache, said = _load(tmp_path, "x86", X86)
    assert cache.entries == {}
    assert said == [f'tile cache {path}: entry "{X86_KEY}" is ignored: it holds its block to '
                    'intrinsic "x86_vpdpbusd_v2", which no loaded description of target x86 '
                    "declares"]
    # The block is tensorized as without the entry, not refused.
    result = cache.tensorize(gemm(40, 20, 24, "uint8"))
    assert [b.intrinsic for b in result.tensorized] == ["x86_vpdpbusd"]


def test_an_entry_holding_its_block_to_an_intrinsic_its_features_lack_is_ignored(tmp_path):
    smmla = f"arm_smmla 8x8x2 int8,int8,int32 {I8MM}"
    sdot = f"arm_sdot_lane 15x4x4 int8,int8,int32 {ARM}"
    _plant(tmp_path, "arm", {smmla: {"rows": 4, "vectors": 4},
                             sdot: {"rows": 4, "vectors": 4, "intrinsic": "arm_smmla"}})
    cache, said = _load(tmp_path, "arm", ARM)
    assert list(cache.entries) == [smmla]
    assert said[0].endswith(f'it holds its block to arm_smmla, which requires feature +i8mm, '
                            f'got features "{ARM}"')


def test_an_entry_holding_its_block_to_another_needs_that_ones_own_entry(tmp_path):
    smmla = f"arm_smmla 8x8x2 int8,int8,int32 {I8MM}"
    path = _plant(tmp_path, "arm", {smmla: {"rows": 4, "vectors": 4,
                                            "intrinsic": "arm_sdot_lane"}})
    cache, said = _load(tmp_path, "arm", I8MM)
    assert cache.entries == {}
    assert said == [f'tile cache {path}: entry "{smmla}" is ignored: it holds its block to '
                    "arm_sdot_lane, but the file holds no good entry of arm_sdot_lane's own "
                    f'for int8,int8,int32 "{I8MM}"']


def test_bad_entries_are_reported_five_at_most(tmp_path):
    tiles = {f"x86_vpdpbusd {n}x2x6 uint8,int8,int32 {X86}": {"rows": 5, "vectors": 1}
             for n in range(1, 13)}
    path = _plant(tmp_path, "x86", tiles)
    cache, said = _load(tmp_path, "x86", X86)
    assert cache.entries == {}
    assert len(said) == cpu_tune.WARNED_ENTRIES + 1 == 6
    assert said[-1] == f"tile cache {path}: 7 more bad entries are ignored"


def test_a_long_or_control_character_key_is_quoted_escaped_and_cut(tmp_path):
    key = "\x1b[2J" + "x" * 500
    _plant(tmp_path, "x86", {key: {"rows": 4, "vectors": 2}})
    _, said = _load(tmp_path, "x86", X86)
    assert "\x1b" not in said[0] and '"\\u001b[2J' in said[0]
    assert len(said[0]) < 400 and '..." is ignored' in said[0]


@pytest.mark.parametrize("entry", [
    {"rows": 4, "vectors": 2, "tile": 7},
    {"rows": 4, "vectors": True},
    {"rows": 4, "vectors": 2, "measured": {"runs": -1}},
    {"rows": 4, "vectors": 2, "measured": {"runs": 30, "best_ms": float("nan"),
                                           "median_ms": 1.0, "load": None, "cpus": None}},
])
def test_an_entry_of_another_form_than_the_tuners_makes_the_whole_file_ignored(tmp_path,
                                                                                entry):
    good = f"x86_vpdpbusd 40x1x6 uint8,int8,int32 {X86}"
    path = _plant(tmp_path, "x86", {good: {"rows": 4, "vectors": 1}, X86_KEY: entry})
    cache, said = _load(tmp_path, "x86", X86)
    assert cache.entries == {}
    assert len(said) == 1
    assert said[0].startswith(f'tile cache {path} is ignored: entry "{X86_KEY}" ')
    assert said[0].endswith("; the next --tune rewrites it")


@pytest.mark.parametrize("text, why", [
    ("[" * 100_000, "maximum recursion depth exceeded"),
    ('{"tiles": {}, "version": ' + "9" * 5000 + "}", "Exceeds the limit"),
    ('{"tiles": {"x', "cannot be read"),
    (b"\xff\xfe{}", "cannot be read"),
])
def test_a_file_that_does_not_parse_is_ignored_with_a_warning(tmp_path, text, why):
    path = tmp_path / "cpu_tiles" / "x86.json"
    path.parent.mkdir()
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    cache, said = _load(tmp_path, "x86", X86)
    assert cache.entries == {}
    assert len(said) == 1 and said[0].startswith(f"tile cache {path} is ignored: it cannot "
                                                 "be read (")
    assert why in said[0]


def test_a_fifo_in_the_files_place_is_ignored_without_blocking(tmp_path):
    path = tmp_path / "cpu_tiles" / "x86.json"
    path.parent.mkdir()
    os.mkfifo(path)
    with _no_hang():
        cache, said = _load(tmp_path, "x86", X86)
    assert cache.entries == {}
    assert said == [f"tile cache {path} is ignored: it is not a regular file; remove it "
                    f"({path})"]


def test_a_directory_in_the_files_place_is_ignored(tmp_path):
    path = tmp_path / "cpu_tiles" / "x86.json"
    path.mkdir(parents=True)
    cache, said = _load(tmp_path, "x86", X86)
    assert cache.entries == {} and "it is not a regular file" in said[0]


def test_a_file_other_users_can_write_is_ignored(tmp_path):
    path = _plant(tmp_path, "x86", {X86_KEY: {"rows": 4, "vectors": 2}})
    path.chmod(0o666)
    cache, said = _load(tmp_path, "x86", X86)
    assert cache.entries == {}
    assert said == [f"tile cache {path} is ignored: other users can write it (mode "
                    f"-rw-rw-rw-); run chmod go-w {path}"]


def test_a_file_of_another_user_is_ignored(tmp_path, monkeypatch):
    path = _plant(tmp_path, "x86", {X86_KEY: {"rows": 4, "vectors": 2}})
    owner = path.stat().st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    cache, said = _load(tmp_path, "x86", X86)
    assert cache.entries == {}
    assert said[0].startswith(f"tile cache {path} is ignored: it belongs to user id {owner}, "
                              f"not to you ({owner + 1})")


def test_a_file_larger_than_the_limit_is_ignored_unread(tmp_path, monkeypatch):
    path = _plant(tmp_path, "x86", {X86_KEY: {"rows": 4, "vectors": 2}})
    monkeypatch.setattr(cpu_tune, "MAX_FILE_BYTES", path.stat().st_size - 1)
    cache, said = _load(tmp_path, "x86", X86)
    assert cache.entries == {} and "it is larger than" in said[0]


def test_save_makes_the_directories_and_the_file_private(tmp_path):
    registry = default_registry()
    cache = TileCache("x86", X86, registry, tmp_path / "root")
    cache.put(registry.get("x86_vpdpbusd"), (40, 2, 6), CpuTiling(4, 2))
    cache.save()
    for path in (tmp_path / "root", tmp_path / "root" / "cpu_tiles", cache.path):
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    assert _load(tmp_path / "root", "x86", X86)[0].entries == {
        X86_KEY: {"rows": 4, "vectors": 2}}


def test_a_cache_that_cannot_be_saved_warns_and_the_run_goes_on(tmp_path):
    registry = default_registry()
    (tmp_path / "file").write_text("not a directory")
    with pytest.warns(TileCacheWarning, match=r"x86\.json is ignored: it cannot be read "):
        cache = TileCache("x86", X86, registry, tmp_path / "file")
    cache.put(registry.get("x86_vpdpbusd"), (40, 2, 6), CpuTiling(4, 2))
    with pytest.warns(TileCacheWarning, match=r"x86\.json is not saved: "):
        cache.save()


def test_the_cache_lives_under_the_users_home_unless_told(monkeypatch, tmp_path):
    monkeypatch.delenv("TENSORIZE_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored (XDG)
    assert cpu_tune.cache_root() == tmp_path / ".cache" / "tensorize"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cpu_tune.cache_root() == tmp_path / "xdg" / "tensorize"


def test_without_a_home_nothing_is_read_and_saving_warns(monkeypatch):
    monkeypatch.setattr(cpu_tune, "cache_root", lambda: None)
    registry = default_registry()
    cache = TileCache("x86", X86, registry)
    assert cache.path is None and cache.entries == {}
    cache.put(registry.get("x86_vpdpbusd"), (40, 2, 6), CpuTiling(4, 2))
    with pytest.warns(TileCacheWarning, match="no home directory"):
        cache.save()


def test_a_named_intrinsic_overrides_an_entry_holding_the_block_to_another(tmp_path):
    # At 15^3 with i8mm the estimate maps C to SMMLA; the tuner kept SDOT for it. Asked for
    # SMMLA by name, the run takes SMMLA (with the estimate's tile), as without a cache.
    smmla = f"arm_smmla 8x8x2 int8,int8,int32 {I8MM}"
    sdot = f"arm_sdot_lane 15x4x4 int8,int8,int32 {I8MM}"
    _plant(tmp_path, "arm", {smmla: {"rows": 4, "vectors": 4, "intrinsic": "arm_sdot_lane"},
                             sdot: {"rows": 4, "vectors": 4}})
    cache, said = _load(tmp_path, "arm", I8MM)
    assert said == []
    func = gemm(15, 15, 15)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        named = cache.tensorize(func, "arm_smmla")
    reference = auto_tensorize(func, "arm", registry=default_registry(), features=I8MM,
                               intrinsic="arm_smmla")
    assert ir.structural_equal(named.func, reference.func)
    # Unnamed, the entry holds the block to SDOT, whose own entry gives the tile.
    assert [b.intrinsic for b in cache.tensorize(func).tensorized] == ["arm_sdot_lane"]
    assert cache.hits == {"C": ("arm_sdot_lane", CpuTiling(4, 4))}


def test_an_entry_holding_the_block_to_an_intrinsic_the_engine_does_not_try_gives_way(
        tmp_path):
    # arm_sdot is a compute intrinsic of arm with the same dtypes, but the engine never
    # maps this block to it: the entry would leave C untensorized.
    sdot = f"arm_sdot 40x5x6 int8,int8,int32 {ARM}"
    path = _plant(tmp_path, "arm", {SDOT_40: {"rows": 4, "vectors": 2,
                                              "intrinsic": "arm_sdot"},
                                    sdot: {"rows": 4, "vectors": 2}})
    cache, said = _load(tmp_path, "arm", ARM)
    assert said == []
    func = gemm(40, 20, 24)
    with pytest.warns(TileCacheWarning) as caught:
        result = cache.tensorize(func)
    assert [str(w.message) for w in caught] == [
        f'tile cache {path}: entry "{SDOT_40}" is ignored: it holds block C to arm_sdot, '
        "which the engine does not tensorize it with here; the next --tune rewrites it"]
    reference = auto_tensorize(func, "arm", registry=default_registry(), features=ARM)
    assert [b.intrinsic for b in result.tensorized] == ["arm_sdot_lane"]
    assert ir.structural_equal(result.func, reference.func)


class _Clock:
    """A stand-in for ``targets.cpu.run`` natively: each call returns the next scripted
    seconds of the kernel it is given, and the calls are logged in order."""

    def __init__(self, script: dict[str, list[list[float]]]) -> None:
        self.script = script
        self.calls: list[str] = []

    def run(self, kernel, inputs, runs):
        self.calls.append(kernel)
        seconds = self.script[kernel].pop(0)
        assert len(seconds) == runs

        class Run:
            pass
        result = Run()
        result.seconds = tuple(seconds)
        return result


def _fake_native(monkeypatch, script, loads):
    clock = _Clock(script)
    monkeypatch.setattr(cpu_tune.cpu, "emit", lambda func, *args, **kwargs: func)
    monkeypatch.setattr(cpu_tune.cpu, "engine_for", lambda kernel: ("native", ""))
    monkeypatch.setattr(cpu_tune.cpu, "run", clock.run)
    sampled = iter(loads)
    monkeypatch.setattr(os, "getloadavg", lambda: (next(sampled), 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu_tune, "RUNS", 2)
    return clock


class _Result:
    def __init__(self, name: str) -> None:
        self.func = name


def test_native_candidates_take_turns_in_rounds_and_keep_their_fastest_run(monkeypatch):
    # Round 2 is disturbed for "a" only: its fastest run still comes from round 1 or 3.
    script = {"a": [[3.0, 2.0], [9.0, 9.5], [2.5, 4.0]],
              "b": [[2.6, 2.4], [2.2, 2.9], [3.1, 2.3]]}
    clock = _fake_native(monkeypatch, script, [0.5, 1.5, 3.25, 0.75])
    a, b = ("x", CpuTiling(4, 1)), ("x", CpuTiling(8, 1))
    figures = cpu_tune._measure({a: _Result("a"), b: _Result("b")}, "x86", X86, None)
    assert clock.calls == ["a", "b"] * cpu_tune.ROUNDS
    count, timing = figures[a]
    assert count is None
    assert timing.seconds == (3.0, 2.0, 9.0, 9.5, 2.5, 4.0)
    assert (timing.best, timing.median) == (2.0, 3.5)  # median of 2 2.5 3 4 9 9.5
    assert (timing.load, timing.cpus) == (3.25, 2)   # the highest of the four samples
    assert figures[b][1].best == 2.2
    assert timing.record() == {"runs": 6, "best_ms": 2000.0, "median_ms": 3500.0,
                               "load": 3.25, "cpus": 2}


def test_the_load_is_none_where_the_system_does_not_say(monkeypatch):
    _fake_native(monkeypatch, {"a": [[1.0, 1.0]] * cpu_tune.ROUNDS}, [])

    def no_load():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", no_load)
    key = ("x", CpuTiling(4, 1))
    timing = cpu_tune._measure({key: _Result("a")}, "x86", X86, None)[key][1]
    assert timing.load is None and "load" not in timing.describe()


def test_a_timing_on_a_busy_machine_says_so():
    quiet = Timing((0.001, 0.002, 0.003), load=0.5, cpus=2)
    busy = Timing((0.001, 0.002, 0.003), load=6.0, cpus=2)
    assert quiet.describe() == "best 1.0000 ms, median 2.0000 ms of 3 runs (load 0.50 on 2 CPUs)"
    assert busy.describe().endswith("(load 6.00 on 2 CPUs: busy, the pick may be noise)")
    trial = TileTrial("C", "x86_vpdpbusd", CpuTiling(4, 2), 868, timing=busy)
    assert trial.describe().startswith("C: x86_vpdpbusd tile 4 x 2: estimate 868 "
                                       "instructions, measured best 1.0000 ms, median")
    assert trial.to_dict()["median_seconds"] == 0.002 and trial.to_dict()["load"] == 6.0


def test_the_kept_tile_is_cached_with_what_it_measured_and_loads_again(monkeypatch, tmp_path):
    # Every candidate's figure is scripted: 8 x 1 is fastest.
    timings = {}

    def measure(results, *args):
        figures = {}
        for n, key in enumerate(results):
            seconds = (0.001,) if key[1] == CpuTiling(8, 1) else (0.002 + n * 1e-4,)
            figures[key] = (None, timings.setdefault(key, Timing(seconds, 1.25, 2)))
        return figures

    monkeypatch.setattr(cpu_tune, "_measure", measure)
    registry = default_registry()
    cache = TileCache("x86", X86, registry, tmp_path)
    _, trials, chosen = cpu_tune.tune_cpu(gemm(40, 20, 24, "uint8"), "x86", X86, registry,
                                          cache=cache)
    assert chosen == {"C": ("x86_vpdpbusd", CpuTiling(8, 1))}
    assert sum(t.timing is not None for t in trials) == cpu_tune.MEASURED
    saved = json.loads(cache.path.read_text())["tiles"]
    assert saved == {X86_KEY: {"rows": 8, "vectors": 1, "measured": {
        "runs": 1, "best_ms": 1.0, "median_ms": 1.0, "load": 1.25, "cpus": 2}}}
    loaded, said = _load(tmp_path, "x86", X86)
    assert said == []
    loaded.tensorize(gemm(40, 20, 24, "uint8"))
    assert loaded.hits == {"C": ("x86_vpdpbusd", CpuTiling(8, 1))}
    assert loaded.measurement("C") == saved[X86_KEY]["measured"]


def _host_lacks_vnni() -> bool:
    features = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512vnni"})
    return host_arch() != "x86_64" or bool(
        missing_features(default_registry().cpu("x86"), features))


@pytest.mark.slow
@pytest.mark.skipif(_host_lacks_vnni(), reason="the host lacks AVX-512 VNNI")
def test_x86_tuning_records_rounds_of_runs_and_the_load(tmp_path):
    registry = default_registry()
    cache = TileCache("x86", X86, registry, tmp_path)
    _, trials, chosen = cpu_tune.tune_cpu(gemm(40, 20, 24, "uint8"), "x86", X86, registry,
                                          cache=cache)
    timed = [t for t in trials if t.timing is not None]
    assert len(timed) == cpu_tune.MEASURED
    assert all(len(t.timing.seconds) == cpu_tune.ROUNDS * cpu_tune.RUNS for t in timed)
    winner = min(timed, key=lambda t: t.timing.best)
    assert chosen == {"C": (winner.intrinsic, winner.tiling)}
    record = json.loads(cache.path.read_text())["tiles"][X86_KEY]["measured"]
    assert record["runs"] == cpu_tune.ROUNDS * cpu_tune.RUNS
    assert record["best_ms"] <= record["median_ms"]
    assert record["cpus"] == os.cpu_count()
    assert record["load"] is None or record["load"] >= 0


def test_an_emulated_count_is_recorded_and_loads_again(tmp_path):
    registry = load_registry([BUILTIN_DIR / "arm.yaml"])
    cache = TileCache("arm", ARM, registry, tmp_path)
    cache.put(registry.get("arm_sdot_lane"), (40, 5, 6), CpuTiling(8, 2), measured={
        "instructions": 2730})
    cache.save()
    loaded = TileCache("arm", ARM, registry, tmp_path)
    assert loaded.entries == {SDOT_40: {"rows": 8, "vectors": 2,
                                        "measured": {"instructions": 2730}}}
