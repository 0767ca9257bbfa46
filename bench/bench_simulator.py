"""Simulator speed and the modelled machine's utilisation on a 1024^3 int8 GEMM.

Prints, for the built-in 16x16 machine, the wall and CPU time of a functional run (values
computed and checked against numpy) and a timing-only run, as simulated cycles and
instructions per CPU second (on a shared machine the wall time counts other jobs' turns too;
the simulator runs its BLAS calls on one thread), and the MAC utilisation with and without
double-buffering. Figures, not assertions.

With ``--compiled`` the program is the one ``tensorize run --target npu`` simulates: the
int8 GEMM kernel tensorized and compiled by the NPU backend (a weight tile loaded whole and
read in parts, loops with steps), not the simulator's own builder's; only the functional
run is timed, ``--repeat`` times (the engine's speed on the program of issue 28's end-to-end
figure; with PYTHONPATH naming an earlier source tree, that tree's).

    PYTHONPATH=. python bench/bench_simulator.py [--size 1024] [--tiles ROWS,BLOCKS]
        [--timing-only] [--trace out.trace.json]
    PYTHONPATH=. python bench/bench_simulator.py --compiled [--size 2048] [--repeat N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from simulator import gemm_program, load_machine, simulate


def main() -> None:
    """Run the bench and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="M = N = K (default 1024)")
    parser.add_argument("--tiles", help="ROWS,BLOCKS: GEMM rows and column blocks per tile "
                        "(default: the builder's choice); 16,4 gives 16x16x16 GEMMs")
    parser.add_argument("--timing-only", action="store_true", help="skip the functional run")
    parser.add_argument("--trace", help="write the last run's Chrome trace here")
    parser.add_argument("--compiled", action="store_true",
                        help="the program the NPU backend compiles from the tensorized kernel")
    parser.add_argument("--repeat", type=int, default=1, help="--compiled: runs to time")
    args = parser.parse_args()
    if args.compiled:
        compiled(args.size, args.repeat)
        return
    config = load_machine()
    size = args.size
    tiles = tuple(int(x) for x in args.tiles.split(",")) if args.tiles else None
    start = time.perf_counter()
    program = gemm_program(size, size, size, config, tiles=tiles)
    built = time.perf_counter() - start
    count = len(program.program)
    print(f"machine {config.name}: {config.array.rows}x{config.array.cols} "
          f"{config.array.dataflow}, DRAM {config.dram.bytes_per_cycle} B/cycle")
    print(f"GEMM {size}^3 int8: {count} words (tiles of {program.tile_rows} rows x "
          f"{program.col_blocks} column blocks), built in {built:.2f} s")
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (size, size), dtype=np.int8)
    b = rng.integers(-128, 128, (size, size), dtype=np.int8)
    dram = program.dram(a, b)
    for functional in (False,) if args.timing_only else (True, False):
        start, cpu = time.perf_counter(), time.process_time()
        result = simulate(program.program, config, dram, functional=functional)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        mode = "functional + timed" if functional else "timing only"
        executed = sum(result.instructions.values())
        print(f"{mode:>19}: {wall:6.2f} s wall, {cpu:6.2f} s CPU, "
              f"{result.cycles / cpu:12,.0f} simulated cycles/CPU s, "
              f"{executed / cpu:9,.0f} instructions/CPU s")
        if functional:
            exact = np.array_equal(program.output(result.dram),
                                   a.astype(np.int32) @ b.astype(np.int32))
            print(f"{'':>19}  result matches numpy: {exact}")
    if args.trace:
        result.write_trace(args.trace)
    print(f"cycles {result.cycles:,} = {result.microseconds:,.1f} us at "
          f"{config.clock_mhz:g} MHz; MAC utilisation {100 * result.mac_utilisation:.2f}% "
          "(double-buffered)")
    single = gemm_program(size, size, size, config, double_buffer=False, tiles=tiles)
    slow = simulate(single.program, config, dram[:single.dram_bytes], functional=False)
    print(f"single-buffered: {slow.cycles:,} cycles, MAC utilisation "
          f"{100 * slow.mac_utilisation:.2f}%")
    print()
    print(result.summary())


def compiled(size: int, repeat: int) -> None:
    """Time the functional simulation of the GEMM program ``tensorize run --target npu``
    simulates at ``size``^3 (on random DRAM bytes), ``repeat`` times."""
    import suite_kernels  # bench/ is on the path: the benchmarks run as scripts

    from intrinsics import default_registry
    from targets import npu
    from tensorize.engine import auto_tensorize

    config, registry = load_machine(), default_registry()
    start = time.perf_counter()
    kernel = suite_kernels.builders()["gemm_int8"](m=size, n=size, k=size)
    func = auto_tensorize(kernel, "npu", registry=registry, config=config).func
    # The plan's programs, as a run compiles them.
    planned = npu.plan(func, config, lookup=registry.get)
    programs = [s.compiled for s in planned.stages if s.compiled is not None]
    if len(programs) != 1:
        raise SystemExit(f"the {size}^3 GEMM compiles to {len(programs)} NPU programs, "
                         "not one")
    program = programs[0]
    print(f"GEMM {size}^3 int8 compiled by the NPU backend: {len(program.program)} words, "
          f"in {time.perf_counter() - start:.2f} s")
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, program.dram_bytes, dtype=np.uint8)
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        result = simulate(program.program, config, image)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        executed = sum(result.instructions.values())
        print(f"functional + timed: {wall:6.2f} s wall, {cpu:6.2f} s CPU, {executed:,} "
              f"instructions ({1e6 * cpu / executed:.2f} us CPU each), "
              f"{result.cycles:,} cycles", flush=True)


if __name__ == "__main__":
    main()
