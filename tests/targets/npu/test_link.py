"""Linking compiled NPU programs: relocated over one DRAM image, the second reading the
first's output where it lies, exact against numpy; its loads start while the first drains."""

from __future__ import annotations

import numpy as np
import pytest

from intrinsics import default_registry
from ir.onnx.kernels import Requantisation, matmul_requantised
from ir.onnx.quant import requantize
from simulator import load_machine, simulate
from simulator.isa import Finish, Load, Mem
from targets import npu
from targets.npu.link import LinkError, Part, Region, counts, link, relocate
from tensorize.engine import auto_tensorize

CONFIG, REGISTRY = load_machine(), default_registry()


def compiled(m: int, k: int, n: int, zero: int):
    """A requantised m x k x n GEMM tensorized and compiled: its kernel and program."""
    func = matmul_requantised(m, k, n, Requantisation(zero))
    result = auto_tensorize(func, "npu", registry=REGISTRY, config=CONFIG)
    (stage,) = npu.plan(result.func, CONFIG, lookup=REGISTRY.get).stages
    return func, stage.compiled


class Image:
    """A joined DRAM image: regions taken in turn, 64-byte aligned, and their arrays."""

    def __init__(self) -> None:
        self.size = 0
        self.arrays: dict[int, np.ndarray] = {}

    def take(self, nbytes: int) -> int:
        at = self.size
        self.size += -(-nbytes // 64) * 64
        return at

    def part(self, stage, arrays: dict[str, np.ndarray], reads: dict[str, int]):
        """``stage``'s part: each buffer a fresh region holding its array, but those in
        ``reads`` (name -> address), which lie where another part stored them. Returns the
        part and where each buffer lies."""
        regions, where = [], {}
        for buffer, placed in stage.dram.items():
            new = reads.get(buffer.name)
            if new is None:
                new = self.take(placed.nbytes)
                if buffer.name in arrays:
                    self.arrays[new] = arrays[buffer.name]
            regions.append(Region(placed.base, placed.nbytes, new))
            where[buffer.name] = new
        return Part(stage.program, tuple(regions)), where

    def bytes(self) -> np.ndarray:
        image = np.zeros(self.size, np.uint8)
        for at, array in self.arrays.items():
            raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            image[at:at + raw.size] = raw
        return image


def chain(m: int, k: int, n: int, p: int):
    """Two requantised GEMMs, the second on the first's output, linked; with numpy's
    results, the linked simulation, each program's cycles alone, and where things lie."""
    rng = np.random.default_rng(m + k + n + p)
    f1, s1 = compiled(m, k, n, 3)
    f2, s2 = compiled(m, n, p, -5)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b1, b2 = (rng.integers(-128, 128, shape, dtype=np.int8) for shape in ((k, n), (n, p)))
    bias1, bias2 = (rng.integers(-3000, 3001, size).astype(np.int32) for size in (n, p))
    scale1, scale2 = (rng.uniform(1e-3, 0.02, size).astype(np.float32) for size in (n, p))
    first = requantize(a.astype(np.int32) @ b1.astype(np.int32) + bias1, scale1, np.int8(3))
    second = requantize(first.astype(np.int32) @ b2.astype(np.int32) + bias2, scale2,
                        np.int8(-5))
    image = Image()
    part1, at1 = image.part(s1, {"A": a, "B": b1, "Bias": bias1, "Scale": scale1}, {})
    out1, out2 = f1.params[-1].name, f2.params[-1].name
    part2, at2 = image.part(s2, {"B": b2, "Bias": bias2, "Scale": scale2},
                            {"A": at1[out1]})
    linked = link([part1, part2], CONFIG)
    sim = simulate(linked.program, CONFIG, image.bytes())
    got1 = sim.dram[at1[out1]:at1[out1] + m * n].view(np.int8).reshape(m, n)
    got2 = sim.dram[at2[out2]:at2[out2] + m * p].view(np.int8).reshape(m, p)
    alone = [simulate(s.program, CONFIG, np.zeros(s.dram_bytes, np.uint8)).cycles
             for s in (s1, s2)]
    return (first, second), (got1, got2), linked, sim, alone


@pytest.fixture(scope="module")
def linked_chain():
    return chain(1024, 32, 32, 32)


def test_the_second_program_reads_the_first_ones_output_where_it_lies(linked_chain):
    (first, second), (got1, got2), *_ = linked_chain
    assert np.array_equal(got1, first)
    assert np.array_equal(got2, second)


def test_the_second_programs_loads_start_while_the_first_drains(linked_chain):
    # Double buffering across the boundary: the second GEMM's first rows and weights come
    # in once the first one's compute is done, while its last stores are still landing.
    *_, linked, sim, alone = linked_chain
    table = sim.records.table()
    split = linked.executed[0]
    first, second = table[table[:, 3] < split], table[table[:, 3] >= split]
    stores = first[first[:, 0] == 3]
    loads = second[second[:, 0] == 0]
    assert loads[:, 1].min() < stores[:, 2].max()
    assert sim.cycles < sum(alone)


def test_linking_counts_each_parts_instructions_and_figures(linked_chain):
    *_, linked, sim, _ = linked_chain
    # Every instruction the simulator ran, seam NOPs and FINISH included, in some part.
    assert sum(linked.executed) == sum(sim.instructions.values())
    figures = counts(linked.program, CONFIG)
    assert (figures.dram_bytes, figures.macs) == (sim.dram_bytes, sim.useful_macs)


def test_a_transfer_outside_every_region_is_refused():
    _, stage = compiled(64, 32, 32, 0)
    regions = tuple(Region(p.base, p.nbytes, p.base) for b, p in stage.dram.items()
                    if b.name != "B")
    with pytest.raises(LinkError, match=r"the load at word \d+ moves DRAM bytes"):
        relocate(Part(stage.program, regions))


def test_a_program_must_end_with_finish():
    load = Load(Mem.INP, 0, 0, 1, 16, 64)
    with pytest.raises(LinkError, match="must end with FINISH"):
        link([Part((load,), (Region(0, 64, 0),))], CONFIG)
    with pytest.raises(LinkError, match="at least one program"):
        link([], CONFIG)
    assert link([Part((Finish(),), ())], CONFIG).executed == (1,)


@pytest.mark.parametrize("m, k, n, p", [(256, 128, 64, 128), (48, 32, 96, 16)])
def test_a_chain_is_exact_whatever_the_seam_waits_for(m, k, n, p):
    # One output tile (the second program's first loads read rows the first one's last
    # stores write: they wait for them), and a GEMM narrower than it is deep.
    expected, got, _, sim, alone = chain(m, k, n, p)
    assert all(np.array_equal(g, e) for g, e in zip(got, expected))
    assert sim.cycles <= sum(alone)
