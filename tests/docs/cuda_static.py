"""What ``bench/bench_cuda.py --static`` (and ``bench_cuda_grouped.py``) print, read back as
figures, so that a test can compare a documented cell with the field the bench printed.

The output is a list of sections: an unindented header naming a kernel (``gemm_fp16 4096^3
through wmma_m16n16k16_f16_f32 (the engine's choice): ...``) and its indented lines: one per
architecture (``sm_80: 221 registers, ...``), the modelled bank conflicts, and per tensor-core
family the tiling search's trials. Each line's figures are read by name (:data:`FIELDS`); a
figure the line does not print (the SASS mix without cuobjdump) is absent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Figure name -> the pattern that finds it in one printed line (its group that matched).
FIELDS = {
    "registers": r"(\d+) registers",
    "spill": r"(\d+) spill bytes",
    "shared": r"(\d+) B shared",
    "dynamic": r"\((\d+) dynamic\)",
    "blocks": r"(\d+) blocks",
    "warps": r"(\d+)/\d+ warps",
    "max_warps": r"\d+/(\d+) warps",
    "limited_by": r"%, (\w+)\)",
    "other": r"(\d+) non-MMA per \d+ MMA",
    "mma": r"non-MMA per (\d+) MMA",
    "per_mma": r"([\d.]+) per MMA\b|MMA: ([\d.]+)",
    "per_unit": r"([\d.]+) (?:non-MMA instructions )?per m16n8k16",
    "stages": r"(\d+) stages",
    "pad": r"pad (\d+)%",
    "launches": r"(\d+) launch",
    "grid": r"grid (\(\d+, \d+, \d+\))",
    "block_tile": r"block (?:tile )?(\d+x\d+x\d+)",
    "warp_grid": r"warps (\d+x\d+) of",
    "warp_tile": r"of (\d+x\d+)",
    "cycles": r"([\d.]+e[+-]\d+) cycles",
    "load_conflicts": r"(\d+) in \d+ fragment-load phases",
    "load_phases": r"(\d+) fragment-load phases",
    "copy_conflicts": r"(\d+) in \d+ copy phases",
    "copy_phases": r"(\d+) copy phases",
}


def fields(line: str) -> dict[str, str]:
    """The named figures one printed line holds."""
    found = {name: re.search(pattern, line) for name, pattern in FIELDS.items()}
    return {name: next(g for g in match.groups() if g is not None)
            for name, match in found.items() if match}


@dataclass(frozen=True)
class Section:
    """One kernel's header line and the indented lines under it (stripped)."""

    header: str
    lines: tuple[str, ...]

    def figures(self) -> dict[str, str]:
        """The header's figures (launches, grid, stages, the block tile)."""
        return fields(self.header)

    def arch(self, arch: str) -> dict[str, str]:
        """The figures of the line for ``arch`` (``sm_80``)."""
        (line,) = [line for line in self.lines if line.startswith(f"{arch}:")]
        return fields(line)

    def banks(self) -> dict[str, str]:
        """The modelled bank conflicts' figures."""
        (line,) = [line for line in self.lines if line.startswith("bank conflicts")]
        return fields(line)

    def trials(self, intrinsic: str) -> list[dict[str, str]]:
        """The tiling search's trials through ``intrinsic``, best first."""
        start = self.lines.index(next(line for line in self.lines
                                      if line.startswith(f"tiling search through {intrinsic} ")))
        found = []
        for line in self.lines[start + 1:]:
            if not line.startswith("block "):
                break
            found.append(fields(line))
        return found


def sections(output: str) -> list[Section]:
    """The printed output's sections, in order."""
    found: list[Section] = []
    for line in output.splitlines():
        if not line.strip():
            continue
        if line.startswith(" ") and found:
            found[-1] = Section(found[-1].header, (*found[-1].lines, line.strip()))
        else:
            found.append(Section(line, ()))
    return found


def section(output: str, start: str) -> Section:
    """The one section whose header starts with ``start``."""
    (found,) = [s for s in sections(output) if s.header.startswith(start)]
    return found
