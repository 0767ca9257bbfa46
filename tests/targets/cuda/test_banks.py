"""targets.cuda.banks: the bank model, and the emitted kernels' shared-memory accesses under
it (the fragment loads and the cooperative copies are free of conflicts; the layout they
replaced, with 32-byte rows, is not)."""

from __future__ import annotations

import importlib
import shutil

import pytest

from targets import cuda
from targets.cuda import memory
from targets.cuda.banks import KINDS, bank_conflicts, phase_wavefronts
from tests.default_run import first_by_default
from tests.targets.cuda.helpers import TENSORIZED, WMMA, emitted, random_inputs, tensorized
from tests.tensorize.engine.suite import suite

# The module, not the function the package exports under its name.
emit_module = importlib.import_module("targets.cuda.emit")

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                    reason="no host C++ compiler to build the emulation")


def _rows(pitch: int, rows: int = 8, piece: int = 16, start: int = 0) -> list[tuple[int, int]]:
    return [(r * pitch + start, piece) for r in range(rows)]


def test_one_piece_of_8_rows_an_odd_number_of_16_bytes_apart_is_one_wavefront():
    for pitch in (16, 48, 80, 144, 272):
        assert phase_wavefronts(_rows(pitch)) == 1


def test_rows_32_or_64_bytes_apart_conflict_2_and_4_ways():
    assert phase_wavefronts(_rows(32)) == 2
    assert phase_wavefronts(_rows(64)) == 4
    assert phase_wavefronts(_rows(128)) == 8


def test_lanes_reading_one_word_share_it():
    assert phase_wavefronts([(128 * n, 4) for n in range(2)]) == 2
    assert phase_wavefronts([(8, 1), (9, 1), (10, 1), (8, 4)]) == 1


def _figures(kernel: cuda.CudaKernel, name: str) -> dict:
    """The modelled phases and conflicts of the tensorized launches (the GEMM's), by kind.
    An int8 B transpose's launch reads its shared tile a byte a lane down a column: 4 ways
    on an 80-byte pitch, which docs/cuda_backend.md states."""
    figures = bank_conflicts(kernel, random_inputs(suite()[name]))
    gemms = {launch.kernel for launch in kernel.launches if launch.tensorized}
    total = {kind: [0, 0] for kind in KINDS}
    for counts in (counts for launch, counts in figures.items() if launch in gemms):
        for kind, count in counts.items():
            total[kind][0] += count.phases
            total[kind][1] += count.conflicts
    return total


@needs_compiler
@pytest.mark.parametrize("name", first_by_default(["gemm_int8", "gemm_fp16", "matmul_relu_fp16"], 0))
def test_fragment_loads_and_copies_of_the_gemms_are_conflict_free(name):
    total = _figures(emitted(name, intrinsic=WMMA.get(name)), name)
    for kind in ("copy", "fragment_load"):
        phases, conflicts = total[kind]
        assert phases > 0, f"no {kind} recorded"
        assert conflicts == 0, f"{name}: {conflicts} conflicts in {phases} {kind} phases"


@pytest.mark.slow  # in CI's slow pass, for the default run's time
@needs_compiler
def test_the_former_32_byte_row_pitch_conflicts_2_ways_on_every_fragment_load(monkeypatch,
                                                                            registry):
    # The former layout: panels one tile wide (16 halves), rows 32 bytes apart.
    monkeypatch.setattr(memory, "panel_width", lambda tile_width, cols, elem: tile_width)
    monkeypatch.setattr(memory, "padded_pitch", lambda row_bytes: -(-row_bytes // 16) * 16)
    kernel = cuda.emit(tensorized("gemm_fp16"), registry)
    phases, conflicts = _figures(kernel, "gemm_fp16")["fragment_load"]
    assert phases > 0 and conflicts == phases


@pytest.mark.slow  # in CI's slow pass, for the default run's time
@needs_compiler
def test_copies_dealt_along_rows_conflict(monkeypatch, registry):
    # The row-major deal order: a phase of 8 threads writes 2 rows of 4 pieces, which an
    # 80-byte pitch puts 2 on one bank group.
    monkeypatch.setattr(emit_module._KernelEmitter, "_interleaved_rows",
                        lambda self, spread, realize: False)
    kernel = cuda.emit(tensorized("gemm_fp16"), registry)
    phases, conflicts = _figures(kernel, "gemm_fp16")["copy"]
    assert phases > 0 and conflicts > 0


@needs_compiler
@pytest.mark.slow
@pytest.mark.parametrize("name", TENSORIZED)
def test_every_tensorized_kernel_copies_without_conflicts(name):
    kernel = emitted(name)
    total = _figures(kernel, name)
    # Every int8 B operand is stored transposed, 16 k values a row: gemm_int8_odd's 8-wide
    # B tiles, once 8-byte rows 2 ways on 16 of the 32 banks, are conflict-free too. The
    # kernels the engine takes through mma.sync load fragments with ldmatrix, whose rows
    # the bank model traces as copies (16 bytes a lane), so they have no fragment-load phase.
    wmma = "nvcuda::wmma::" in kernel.source
    assert total["copy"][0] > 0 and (total["fragment_load"][0] > 0) is wmma
    assert total["copy"][1] == total["fragment_load"][1] == 0
