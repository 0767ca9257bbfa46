"""Cycle counts of hand-written programs against the formulas of docs/simulator.md, worked
out by hand on the small machine (R = C = 4, DRAM latency 100 at 16 B/cycle, array latency 2,
4 vector lanes with latency 3, one request per DMA engine in flight, one fetch per cycle)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import assemble, simulate, timing
from tests.simulator.helpers import small_machine

DRAM = np.zeros(4096, np.uint8)


def run(text: str, config=None, functional: bool = True):
    """Simulate assembly ``text`` on ``config`` (default: the small machine)."""
    return simulate(assemble(text), config or small_machine(), DRAM, functional=functional)


def begin_of(result, index: int) -> tuple[int, int]:
    """(begin, end) of instruction ``index`` on its unit's track."""
    (span,) = [(b, e) for unit, b, e, j in result.records if j == index and unit != 4]
    return span


def test_single_load_is_latency_plus_bytes_over_bandwidth():
    # 16 rows x 4 int32 = 256 bytes: 100 + 256 / 16 = 116.
    result = run("load acc[0], dram[0x0], rows=16, cols=4, stride=16\nfinish")
    assert result.cycles == 116 == timing.dma_cycles(256, small_machine())
    assert result.units["load"].busy == 116
    assert result.units["dram"].busy == 16
    assert result.bytes["dram.read"] == 256


def test_load_gemm_store_chain_waits_on_tokens():
    text = """
    load inp[0], dram[0x0], rows=4, cols=4, stride=4
    load wgt[0], dram[0x10], rows=4, cols=4, stride=4 | push_next
    gemm acc[0], inp[0], wgt[0], rows=4, k=4, reset | pop_prev, push_next
    store dram[0x100], acc[0], rows=4, cols=4, stride=16 | pop_prev
    finish
    """
    # load inp: 0 -> 100 + 1 = 101 (16 B). load wgt waits for the one outstanding request:
    # 101 -> 201 + 1 = 202, pushes at 202. gemm: preload 202..206, streams 4 rows 206..210,
    # drains R + C - 2 + latency = 8: done 218. store of 64 B: 218 -> 318 + 4 = 322.
    result = run(text)
    assert begin_of(result, 1) == (101, 202)
    assert begin_of(result, 2) == (202, 218)
    assert begin_of(result, 3) == (218, 322)
    assert result.cycles == 322
    assert run(text, functional=False).cycles == 322
    # The gemm waited 202 - 2 (its dispatch) for its token; the store 218 - 3.
    assert result.units["gemm"].stall == 200
    assert result.units["store"].stall == 215


GEMMS = """
load inp[0], dram[0x0], rows=8, cols=4, stride=4
load wgt[0], dram[0x0], rows=8, cols=4, stride=4 | push_next
gemm acc[0], inp[0], wgt[0], rows=8, k=4, reset | pop_prev
gemm acc[8], inp[0], wgt[4], rows=8, k=4, reset
gemm acc[16], inp[0], wgt[0], rows=8, k=4, reset
finish
"""
# Both loads move 32 B (2 cycles), one after the other: 0 -> 102, 102 -> 204; token at T.
T = 204


def test_double_buffered_weights_overlap_preload_and_reuse_held_tiles():
    result = run(GEMMS)
    # g1: preload T..T+4, stream T+4..T+12, done T+12+8. g2: preloads into the other buffer
    # at T+4 (loader free), streams T+12..T+20 once the input port frees. g3 finds wgt[0]
    # still held in the first buffer: streams T+20..T+28 with no preload, done T+36.
    assert begin_of(result, 2) == (T, T + 20)
    assert begin_of(result, 3) == (T + 4, T + 28)
    assert begin_of(result, 4) == (T + 20, T + 36)
    assert result.cycles == T + 36
    assert result.bytes["wgt.read"] == 2 * 16  # two preloads of 4 x 4


def test_single_weight_buffer_waits_for_the_array_to_drain():
    result = run(GEMMS, small_machine(array__double_buffered_weights=False))
    # g1 as before; its last row leaves the bottom PE row R - 1 = 3 cycles after streaming
    # ends (T+15). g2 preloads T+15..T+19, streams T+19..T+27, frees the buffer at T+30.
    # g3's tile was evicted: preload T+30..T+34, stream T+34..T+42, done T+50.
    assert begin_of(result, 3) == (T + 15, T + 35)
    assert begin_of(result, 4) == (T + 30, T + 50)
    assert result.cycles == T + 50


def test_output_stationary_streams_sub_tiles_without_preload():
    config = small_machine(array__dataflow="output_stationary")
    result = run(GEMMS.replace("rows=8, k=4, reset\ngemm acc[16]", "rows=8, k=2, reset\n"
                               "gemm acc[16]"), config)
    # g1: 2 sub-tiles of max(k, R) = 4 cycles: T..T+8, drain (4+4+4-2) + 4 + 2 - 4 = 12.
    assert begin_of(result, 2) == (T, T + 20)
    # g2 (k = 2): T+8..T+16, drain (2+4+4-2) + 4 + 2 - 4 = 10.
    assert begin_of(result, 3) == (T + 8, T + 26)
    assert begin_of(result, 4) == (T + 16, T + 36)


def test_vector_unit_cycles_per_row_and_waits_for_gemm_results():
    text = GEMMS.replace("finish", """vec.relu acc[0], rows=8
    vec.relu acc[32], rows=8
    finish""")
    result = run(text, small_machine(vector__lanes=2), functional=False)
    # relu on g1's rows waits for g1 (done T+20): 8 rows x ceil(4 / 2) = 16 cycles, + 3.
    assert begin_of(result, 5) == (T + 20, T + 39)
    # The next one touches rows no gemm wrote, but the vector unit is busy until T+36.
    assert begin_of(result, 6) == (T + 36, T + 55)


def test_load_and_store_contend_for_the_dram_port():
    text = """
    load acc[0], dram[0x0], rows=16, cols=4, stride=16
    store dram[0x200], acc[32], rows=16, cols=4, stride=16
    finish
    """
    result = run(text, functional=False)
    # The load's data occupies the port 100..116; the store's request (issued at 1, data
    # ready at 101) waits 15 cycles for it: 116..132.
    assert begin_of(result, 1) == (1, 132)
    assert result.cycles == 132
    assert result.dram_wait == 15
    assert result.units["dram"].busy == 32


@pytest.mark.parametrize(("outstanding", "expected"), [(1, 232), (2, 132)])
def test_dma_requests_in_flight(outstanding: int, expected: int):
    text = """
    load acc[0], dram[0x0], rows=16, cols=4, stride=16
    load acc[16], dram[0x100], rows=16, cols=4, stride=16
    finish
    """
    # One in flight: the second request waits for the first to finish (116 + 116). Two: it
    # issues at 1 and its data follows the first's on the port (116..132).
    result = run(text, small_machine(dma__max_outstanding=outstanding))
    assert result.cycles == expected


FULL = """
load acc[0], dram[0x0], rows=16, cols=4, stride=16 | push_next
nop.store | push_prev
nop.store | push_prev
store dram[0x200], acc[32], rows=1, cols=4, stride=16
nop.compute | pop_prev
nop.compute | pop_next
nop.compute | pop_next
finish
"""


@pytest.mark.parametrize(("depth", "expected"), [(1, 217), (2, 117)])
def test_push_into_a_full_token_queue_stalls_its_queue(depth: int, expected: int):
    # With room for one token, the second nop.store waits for compute to pop the first,
    # which compute does only after the load's token (116): the store then issues at 116
    # and ends 116 + 100 + 1. With room for two, the store issues at 3 and its data follows
    # the load's on the port: 116..117.
    result = run(FULL, small_machine(queues__token_depth=depth), functional=False)
    assert result.cycles == expected


@pytest.mark.parametrize(("depth", "expected"), [(2, 117), (8, 4)])
def test_full_instruction_queue_holds_dispatch(depth: int, expected: int):
    text = """
    load acc[0], dram[0x0], rows=16, cols=4, stride=16
    load acc[16], dram[0x0], rows=16, cols=4, stride=16
    load acc[32], dram[0x0], rows=16, cols=4, stride=16
    load acc[48], dram[0x0], rows=16, cols=4, stride=16
    vec.relu acc[0], rows=4
    finish
    """
    # The fourth load enters the load queue only when the second leaves it (at 116, after
    # the first's request completes); the vec behind it in program order is fetched at 117.
    result = run(text, small_machine(queues__instruction_depth=depth), functional=False)
    assert begin_of(result, 4)[0] == expected


def test_stats_partition_every_cycle():
    result = run(GEMMS)
    for stats in result.units.values():
        assert stats.busy + stats.stall + stats.idle == result.cycles
        assert min(stats.busy, stats.stall, stats.idle) >= 0
    assert result.useful_macs == 3 * 8 * 4 * 4
    assert result.mac_utilisation == pytest.approx(3 * 8 * 16 / (16 * result.cycles))
