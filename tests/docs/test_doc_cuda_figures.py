"""The CUDA static figures of README.md and docs/cuda_backend.md, against what
``bench/bench_cuda.py --static`` and ``bench/bench_cuda_grouped.py`` print (the commands the
pages state beside them): registers, shared memory, stages, warps, occupancy, launches, grids
and the modelled bank conflicts with nvcc and g++; the SASS figures (non-MMA instructions
per MMA, and the tiling search's ranking, which uses them) where cuobjdump is found too.
The rows that record an earlier state or a tiling no bench prints are not checked
(tests/docs/test_doc_figures.py lists them)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.cuda_static import Section, fields, section, sections
from tests.docs.doc_tables import DocTable, figures_agree, run_bench, table_rows

ROOT = Path(__file__).resolve().parents[2]
README, PAGE = ROOT / "README.md", ROOT / "docs" / "cuda_backend.md"


@dataclass(frozen=True)
class Cell:
    """A documented cell and what the bench printed for it: figures (the cell states them, in
    order, each rounded as written) or a text the cell holds; ``sass`` when that needs
    cuobjdump."""

    table: DocTable
    row: int
    column: str
    printed: Callable[[str], tuple[float, ...] | str]
    sass: bool = False


def _engine(out: str, gemm: str) -> Section:
    """The section of GEMM ``gemm`` through the engine's own choice of intrinsic."""
    (found,) = [s for s in sections(out)
                if s.header.startswith(f"{gemm} ") and "(the engine's choice)" in s.header]
    return found


def _num(figures: dict[str, str], *names: str) -> tuple[float, ...]:
    return tuple(float(figures[name]) for name in names)


def _occupancy(out: str, gemm: str, arch: str) -> tuple[float, ...]:
    a = _engine(out, gemm).arch(arch)
    return float(a["blocks"]), 100 * float(a["warps"]) / float(a["max_warps"])


def _trial(out: str, gemm: str, intrinsic: str, tile: str, stages: int) -> dict[str, str]:
    """The search's trial of ``tile`` (``128x256x32``) in ``stages`` stages."""
    (found,) = [t for t in _engine(out, gemm).trials(intrinsic)
                if t["block_tile"] == tile and t["stages"] == str(stages)]
    return found


def _best(out: str, gemm: str, intrinsic: str) -> dict[str, str]:
    return _engine(out, gemm).trials(intrinsic)[0]


def _described(trial: dict[str, str]) -> str:
    """A trial in the page's words: ``128x256x32, 2x4 warps of 64x64, 4 stages``."""
    return (f"{trial['block_tile']}, {trial['warp_grid']} warps of {trial['warp_tile']}, "
            f"{trial['stages']} stages")


def _family(out: str, gemm: str, intrinsic: str) -> Section:
    return section(out, f"{gemm} 4096^3 through {intrinsic}:")


WMMA_F16, WMMA_S8 = "wmma_m16n16k16_f16_f32", "wmma_m16n16k16_s8_s32"
MMA_F16, MMA_S8, MMA_U8S8 = ("mma_m16n8k16_f16f16_f32", "mma_m16n8k32_s8s8_s32",
                             "mma_m16n8k32_u8s8_s32")
F16, S8 = "gemm_fp16", "gemm_int8"


def _static_rows() -> list[Cell]:
    """cuda_backend.md's static figures: the two GEMMs in the engine's choice on both
    architectures, then the WMMA search's 4-stage picks."""
    table = DocTable(PAGE, "| kernel | arch | registers | shared | stages | warps | occupancy "
                           "| non-MMA per MMA (k loop) | bank conflicts |", {})
    cells = []
    for row, (gemm, arch) in enumerate([(F16, "sm_80"), (F16, "sm_90"), (S8, "sm_80"),
                                        (S8, "sm_90")]):
        def arch_of(out, gemm=gemm, arch=arch):
            return _engine(out, gemm).arch(arch)
        cells += [
            Cell(table, row, "registers", lambda out, a=arch_of: _num(a(out), "registers")),
            Cell(table, row, "shared", lambda out, a=arch_of: _num(a(out), "shared")),
            Cell(table, row, "stages", lambda out, g=gemm: _num(_engine(out, g).figures(),
                                                                 "stages")),
            Cell(table, row, "warps", lambda out, a=arch_of: _num(a(out), "warps")),
            Cell(table, row, "occupancy", lambda out, g=gemm, r=arch: _occupancy(out, g, r)),
            Cell(table, row, "occupancy", lambda out, a=arch_of: a(out)["limited_by"]),
        ]
        sass = ("per_mma", "other", "mma") if arch == "sm_80" else ("per_mma",)
        cells.append(Cell(table, row, "non-MMA per MMA (k loop)",
                          lambda out, a=arch_of, s=sass: _num(a(out), *s), sass=True))
    banks = [("load_conflicts", "load_phases", "copy_conflicts", "copy_phases"),
             ("copy_conflicts", "copy_phases")]
    for row, gemm, names in [(0, F16, banks[0]), (2, S8, banks[1])]:
        cells.append(Cell(table, row, "bank conflicts",
                          lambda out, g=gemm, n=names: _num(_engine(out, g).banks(), *n)))
    for row, gemm, intrinsic in [(4, F16, WMMA_F16), (5, S8, WMMA_S8)]:
        def pick(out, g=gemm, i=intrinsic):
            return _trial(out, g, i, "128x256x32", 4)
        cells += [
            Cell(table, row, "registers", lambda out, p=pick: _num(p(out), "registers")),
            Cell(table, row, "shared", lambda out, p=pick: _num(p(out), "shared")),
            Cell(table, row, "stages", lambda out, p=pick: _num(p(out), "stages")),
            Cell(table, row, "non-MMA per MMA (k loop)",
                 lambda out, p=pick: _num(p(out), "per_unit"), sass=True),
        ]
    return cells


def _search_rows() -> list[Cell]:
    """cuda_backend.md's search per family: each family's best trial at 4096^3 on sm_80
    (ranked with the SASS figures, so all of it needs cuobjdump)."""
    table = DocTable(PAGE, "| GEMM | family | best trial | registers | non-MMA per m16n8k16 "
                           "| modelled cycles |", {})
    cells = []
    for row, (gemm, intrinsic) in enumerate([(F16, WMMA_F16), (F16, MMA_F16), (S8, WMMA_S8),
                                             (S8, MMA_S8)]):
        def best(out, g=gemm, i=intrinsic):
            return _best(out, g, i)
        cells += [
            Cell(table, row, "best trial", lambda out, b=best: _described(b(out)), sass=True),
            Cell(table, row, "registers", lambda out, b=best: _num(b(out), "registers"),
                 sass=True),
            Cell(table, row, "non-MMA per m16n8k16", lambda out, b=best: _num(b(out),
                                                                             "per_unit"),
                 sass=True),
            Cell(table, row, "modelled cycles", lambda out, b=best: _num(b(out), "cycles"),
                 sass=True),
        ]
    return cells


def _mma_rows() -> list[Cell]:
    """cuda_backend.md's 4096^3 table by family: the rows in the engine's default tiling
    (fp16 WMMA is the engine's fp16 GEMM; mma.sync's are the family's section)."""
    table = DocTable(PAGE, "| GEMM | family | BK | sm_80 registers | sm_80 per MMA | "
                           "sm_90 per MMA | per 16x8x16 of work (sm_80) |", {})
    cells = []
    for row, of in [(0, lambda out: _engine(out, F16)),
                    (1, lambda out: _family(out, F16, MMA_F16)),
                    (4, lambda out: _family(out, S8, MMA_S8))]:
        cells += [
            Cell(table, row, "sm_80 registers", lambda out, s=of: _num(s(out).arch("sm_80"),
                                                                       "registers")),
            Cell(table, row, "sm_80 per MMA", lambda out, s=of: _num(
                s(out).arch("sm_80"), "per_mma", "other", "mma"), sass=True),
            Cell(table, row, "sm_90 per MMA", lambda out, s=of: _num(s(out).arch("sm_90"),
                                                                     "per_mma"), sass=True),
            Cell(table, row, "per 16x8x16 of work (sm_80)", lambda out, s=of: _num(
                s(out).arch("sm_80"), "per_unit"), sass=True),
        ]
    return cells


def _resnet_rows() -> list[Cell]:
    """cuda_backend.md's ResNet-50 3x3: the row of the kernel the engine makes now."""
    table = DocTable(PAGE, "| ResNet-50 3x3, int8 | launches | registers | shared | non-MMA "
                           "per MMA, k loop, sm_80 / sm_90 | bank conflicts (modelled) |", {})

    def conv(out):
        return section(out, "conv2d_nhwc_int8 ResNet-50 3x3")

    def sass(out):
        s80, s90 = conv(out).arch("sm_80"), conv(out).arch("sm_90")
        # Per m16n8k16 of work: an IMMA.16832 does two.
        return (*_num(s80, "per_mma", "other", "mma"), *_num(s90, "per_mma"),
                float(s80["other"]) / float(s80["mma"]) / 2)

    return [Cell(table, 3, "launches", lambda out: _num(conv(out).figures(), "launches")),
            Cell(table, 3, "registers", lambda out: _num(conv(out).arch("sm_80"), "registers")),
            Cell(table, 3, "shared", lambda out: _num(conv(out).arch("sm_80"), "shared")),
            Cell(table, 3, "non-MMA per MMA, k loop, sm_80 / sm_90", sass, sass=True)]


def _barrier_rows() -> list[Cell]:
    """cuda_backend.md's k loop across its barrier: each GEMM in the simple form and with
    its fragments double-buffered, on both architectures (the bench prints them only where
    cuobjdump is found)."""
    table = DocTable(PAGE, "| GEMM 4096^3, 4 stages | form | sm_80 registers, spill bytes | "
                           "sm_80 non-MMA per MMA | sm_80 barriers | sm_90 registers, spill "
                           "bytes | sm_90 non-MMA per MMA | sm_90 barriers |", {})
    forms = [(gemm, intrinsic, form) for gemm, intrinsic in [
        (F16, MMA_F16), (F16, WMMA_F16), (S8, MMA_S8), (S8, WMMA_S8)]
        for form in ("simple form", "double-buffered fragments")]
    cells = []
    for row, (gemm, intrinsic, form) in enumerate(forms):
        def line(out, arch, g=gemm, i=intrinsic, f=form):
            (found,) = [l for l in section(out, f"{g} 4096^3 through {i}, 4 stages, {f}:").lines
                        if l.startswith(f"{arch}:")]
            return found
        for arch in ("sm_80", "sm_90"):
            sass = ("per_mma", "other", "mma") if arch == "sm_80" else ("per_mma",)
            cells += [
                Cell(table, row, f"{arch} registers, spill bytes", lambda out, l=line, a=arch:
                     _num(fields(l(out, a)), "registers", "spill"), sass=True),
                Cell(table, row, f"{arch} non-MMA per MMA", lambda out, l=line, a=arch, s=sass:
                     _num(fields(l(out, a)), *s), sass=True),
                Cell(table, row, f"{arch} barriers", lambda out, l=line, a=arch:
                     _barriers(l(out, a)), sass=True),
            ]
    return cells


def _barriers(line: str) -> str:
    """The page's words for a printed line's barriers: "no drain (4)", "drains at 3 of 4"."""
    drained = re.search(r"drains at (\d+) of (\d+) barrier", line)
    if drained:
        return f"drains at {drained[1]} of {drained[2]}"
    (count,) = re.search(r"no drain at its (\d+) barrier", line).groups()
    return f"no drain ({count})"


def _readme_rows() -> list[Cell]:
    """README's two CUDA static tables."""
    first = DocTable(README, "| GEMM 4096^3 | non-MMA instructions per MMA, sm_80 / sm_90 | "
                             "with the search's 4 stages | bank conflicts (modelled) | "
                             "before this round |", {})
    second = DocTable(README, "| GEMM 4096^3, mma.sync | registers sm_80 / sm_90 | non-MMA "
                              "instructions per MMA, sm_80 / sm_90 | per m16n8k16 of work, "
                              "sm_80 | WMMA, per m16n8k16 |", {})
    cells = []
    # fp16 per MMA; int8 (mma.sync) per MMA, then per m16n8k16 of work.
    for row, gemm, wmma, names in [(0, F16, WMMA_F16, ("per_mma",)),
                                   (1, S8, WMMA_S8, ("per_mma", "per_unit"))]:
        def per_arch(out, g=gemm, n=names):
            s80, s90 = _engine(out, g).arch("sm_80"), _engine(out, g).arch("sm_90")
            return tuple(v for name in n for v in _num(s80, name) + _num(s90, name))
        cells += [
            Cell(first, row, "non-MMA instructions per MMA, sm_80 / sm_90", per_arch,
                 sass=True),
            Cell(first, row, "with the search's 4 stages", lambda out, g=gemm, w=wmma: _num(
                _trial(out, g, w, "128x256x32", 4), "per_unit"), sass=True),
        ]
    cells += [Cell(first, 0, "bank conflicts (modelled)", lambda out: _num(
                  _engine(out, F16).banks(), "load_conflicts", "load_phases", "copy_phases")),
              Cell(first, 1, "bank conflicts (modelled)", lambda out: _num(
                  _engine(out, S8).banks(), "copy_conflicts", "copy_phases"))]
    for row, gemm, intrinsic in [(0, F16, MMA_F16), (1, S8, MMA_S8), (2, "gemm_u8s8", MMA_U8S8)]:
        def fam(out, g=gemm, i=intrinsic):
            return _family(out, g, i)
        cells += [
            Cell(second, row, "registers sm_80 / sm_90", lambda out, f=fam: (
                *_num(f(out).arch("sm_80"), "registers"), *_num(f(out).arch("sm_90"),
                                                                 "registers"))),
            Cell(second, row, "non-MMA instructions per MMA, sm_80 / sm_90", lambda out, f=fam: (
                *_num(f(out).arch("sm_80"), "per_mma"), *_num(f(out).arch("sm_90"),
                                                              "per_mma")), sass=True),
            Cell(second, row, "per m16n8k16 of work, sm_80", lambda out, f=fam: _num(
                f(out).arch("sm_80"), "per_unit"), sass=True),
        ]
    cells.append(Cell(second, 0, "WMMA, per m16n8k16", lambda out: _num(
        _engine(out, F16).arch("sm_80"), "per_unit"), sass=True))
    return cells


def _grouped_rows() -> list[Cell]:
    """cuda_backend.md's grouped convolutions, from bench_cuda_grouped.py."""
    table = DocTable(PAGE, "| grouped 3x3, 1 x 56 x 56, int8 | mapping | launches | GEMM grid "
                           "| non-MMA per MMA (sm_80) |", {})
    cells = []
    for row, layer in enumerate(["1x56x56x64 -> 64, 4 groups", "1x56x56x128 -> 128, 32 groups",
                                 "1x56x56x256 -> 256, 32 groups"]):
        def of(out, start=layer):
            return fields(section(out, start).header)
        cells += [
            Cell(table, row, "mapping", lambda out, f=of: f"pad {f(out)['pad']}%"),
            Cell(table, row, "launches", lambda out, f=of: _num(f(out), "launches")),
            Cell(table, row, "GEMM grid", lambda out, f=of: f(out)["grid"]),
            Cell(table, row, "non-MMA per MMA (sm_80)", lambda out, f=of: _num(
                f(out), "per_mma", "other", "mma"), sass=True),
        ]
    return cells


def disagreements(cells: list[Cell], out: str, sass: bool) -> list[str]:
    """Each of ``cells`` (those that need the SASS or those that do not) the printed ``out``
    does not bear out, at its page and line."""
    found = []
    for cell in (c for c in cells if c.sass == sass):
        number, row = table_rows(cell.table)[cell.row]
        documented = row[cell.column].replace("**", "")
        try:
            want = cell.printed(out)
        except (ValueError, KeyError, IndexError, StopIteration):
            # The section, line or figure is gone: the bench no longer prints this kernel.
            found.append(f"{cell.table.path.name}:{number}: column {cell.column!r}: the "
                         "bench prints no such kernel or figure")
            continue
        agrees = want in documented if isinstance(want, str) else figures_agree(documented,
                                                                                want)
        if not agrees:
            found.append(f"{cell.table.path.name}:{number}: column {cell.column!r} documents "
                         f"{documented!r}, the bench prints {want}")
    return found


def _bench_cuda(script: str, *args: str) -> str:
    missing = [tool for tool in ("nvcc", "g++") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} on PATH")
    return run_bench(str(ROOT / "bench" / script), *args, tools=True)


def _needs_sass(out: str) -> None:
    if "cuobjdump not found" in out or "no cuobjdump" in out:
        pytest.skip("the bench printed no SASS figures: cuobjdump not found (the sass extra)")


STATIC = [*_static_rows(), *_search_rows(), *_mma_rows(), *_resnet_rows(), *_barrier_rows(),
          *_readme_rows()]


@pytest.mark.slow
def test_the_documented_cuda_static_figures_are_what_the_bench_prints():
    out = _bench_cuda("bench_cuda.py", "--static")
    assert not disagreements(STATIC, out, sass=False)


@pytest.mark.slow
def test_the_documented_sass_figures_are_what_the_bench_prints():
    out = _bench_cuda("bench_cuda.py", "--static")
    _needs_sass(out)
    assert not disagreements(STATIC, out, sass=True)


@pytest.mark.slow
@pytest.mark.parametrize("sass", [False, True], ids=["ptxas", "sass"])
def test_the_documented_grouped_convolutions_are_what_the_bench_prints(sass):
    out = _bench_cuda("bench_cuda_grouped.py")
    if sass:
        _needs_sass(out)
    assert not disagreements(_grouped_rows(), out, sass)


# Lines as bench_cuda.py --static prints them.
CANNED = "\n".join([
    "gemm_fp16 4096^3 through wmma_m16n16k16_f16_f32 (the engine's choice): block tile "
    "128x256x32, 8 warps of 64x64, 3 stages, grid (16, 32, 1); 1 launch(es)",
    "  sm_80: 221 registers, 81408 B shared (81408 dynamic), 0 spill bytes; occupancy 1 "
    "blocks, 8/64 warps (12%, registers); 218 non-MMA per 192 MMA in the k loop: 1.14 per "
    "MMA, 1.14 per m16n8k16 of work",
    "  bank conflicts (modelled): 0 in 1536 fragment-load phases, 0 in 576 copy phases",
    "  tiling search through wmma_m16n16k16_f16_f32 (sm_80, 72 candidates, best 4 estimates "
    "compiled):",
    "    block 128x256x32, warps 2x4 of 64x64, 4 stages (measured: 238 registers, 108544 B "
    "shared, 0 spill bytes, 1.04 non-MMA instructions per m16n8k16, 0.00 bank conflicts per "
    "m16n8k16): 1 blocks/SM, 5 waves, 6.55e+05 cycles",
])


def test_a_stale_cuda_cell_is_reported_at_its_line_and_a_current_one_is_not(tmp_path):
    page = tmp_path / "page.md"
    header = "| kernel | registers | per MMA | best trial | cycles |"
    page.write_text(f"{header}\n|---|---|---|---|---|\n"
                    "| fp16 | 221 | 1.14 (218 / 192) | 128x256x32, 2x4 warps of 64x64, 4 stages "
                    "| 6.55e5 |\n| fp16 | 220 | 1.15 (218 / 192) | 128x256x32, 2x4 warps of "
                    "64x64, 3 stages | 6.56e5 |\n", encoding="utf-8")
    table = DocTable(page, header, {})

    def sm_80(out):
        return _engine(out, F16).arch("sm_80")

    cells = [cell for row in (0, 1) for cell in (
        Cell(table, row, "registers", lambda out: _num(sm_80(out), "registers")),
        Cell(table, row, "per MMA", lambda out: _num(sm_80(out), "per_mma", "other", "mma"),
             sass=True),
        Cell(table, row, "best trial", lambda out: _described(_best(out, F16, WMMA_F16))),
        Cell(table, row, "cycles", lambda out: _num(_best(out, F16, WMMA_F16), "cycles")))]
    found = disagreements(cells, CANNED, sass=False)
    assert [f.split(": column ")[0] for f in found] == ["page.md:4"] * 3
    assert "'registers' documents '220', the bench prints (221.0,)" in found[0]
    assert [f.split(": column ")[0] for f in disagreements(cells, CANNED, sass=True)] == [
        "page.md:4"]


def test_the_bench_s_lines_are_read_by_figure_name():
    conv = fields("  sm_80: 62 registers, 36864 B shared; 102 non-MMA per 24 MMA in the k "
                  "loop: 4.25 per MMA")
    grouped = fields("1x56x56x64 -> 64, 4 groups of 16: wmma  calls 7056 pad 0%  A=W; 2 "
                     "launches, GEMM grid (49, 1, 4), sm_80 48 registers, 6400 B shared, 85 "
                     "non-MMA per 12 MMA: 7.08")
    assert conv == {"registers": "62", "shared": "36864", "other": "102", "mma": "24",
                    "per_mma": "4.25"}
    assert {k: grouped[k] for k in ("pad", "launches", "grid", "per_mma", "other")} == {
        "pad": "0", "launches": "2", "grid": "(49, 1, 4)", "per_mma": "7.08", "other": "85"}


def test_a_kernel_the_bench_no_longer_prints_is_reported(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("| kernel | registers |\n|---|---|\n| int8 | 217 |\n", encoding="utf-8")
    cell = Cell(DocTable(page, "| kernel | registers |", {}), 0, "registers",
                lambda out: _num(_engine(out, S8).arch("sm_80"), "registers"))
    assert disagreements([cell], CANNED, sass=False) == [
        "page.md:3: column 'registers': the bench prints no such kernel or figure"]


GPU_TABLE = DocTable(README, "| GEMM | default | tuned WMMA | tuned mma.sync | cuBLAS | ours / "
                             "cuBLAS |", {})
GPU_RECORD = ROOT / "docs" / "figures" / "cuda_suite.json"
# Column -> the prefix of the record's kernel names it shows.
GPU_KERNELS = {"default": "default", "tuned WMMA": "tuned wmma_", "tuned mma.sync": "tuned mma_",
               "cuBLAS": "cuBLAS"}


def _gpu_case(label: str) -> str:
    """``fp16 1024^3`` as the record names it: ``fp16 1024x1024x1024``."""
    dtype, size = label.split()
    return f"{dtype} {'x'.join([size[:-2]] * 3) if size.endswith('^3') else size}"


def test_the_documented_gpu_figures_are_those_of_the_recorded_run():
    # Timings of a lent GPU cannot be rerun here; the README quotes the run's record, so its
    # table must show what the record holds (T(FL)OP/s, and the best of ours over cuBLAS).
    rows = json.loads(GPU_RECORD.read_text(encoding="utf-8"))["rows"]
    problems = []
    for number, cells in table_rows(GPU_TABLE):
        case = [r for r in rows if r["case"] == _gpu_case(cells["GEMM"])]
        for column, prefix in GPU_KERNELS.items():
            (record,) = [r for r in case if r["kernel"].startswith(prefix)]
            if not figures_agree(cells[column], (record["tera_ops_per_s"],)):
                problems.append(f"README.md:{number}: {column} {cells[column]}, recorded "
                                f"{record['tera_ops_per_s']:.1f}")
        best = max(r["vs_cublas"] for r in case if r.get("vs_cublas") is not None)
        if not figures_agree(cells["ours / cuBLAS"], (best,)):
            problems.append(f"README.md:{number}: ours / cuBLAS {cells['ours / cuBLAS']}, "
                            f"recorded {best:.2f}")
    assert not problems
