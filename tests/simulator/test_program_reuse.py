"""A program simulated again reuses its checked tree (simulator.engine._structure: a
network's layers of one shape run one program): every figure and the DRAM image are the
same on every run, as with a fresh copy of the program, and a malformed program faults on
every run, never cached."""

from __future__ import annotations

import numpy as np
import pytest

from ir.errors import SimulatorFault
from simulator import Finish, Nop, Queue, gemm_program, load_machine, simulate
from tests.simulator.test_fast_paths import figures
from tests.simulator.test_programs import operands


def test_a_program_run_again_gives_every_figure_of_its_first_run():
    config = load_machine()
    gemm = gemm_program(64, 48, 80, config)
    a, b = operands(64, 48, 80, seed=5)
    image = gemm.dram(a, b)
    first = figures(simulate(gemm.program, config, image))
    again = figures(simulate(gemm.program, config, image))
    fresh = figures(simulate(tuple(list(gemm.program)), config, image))
    assert again == first and fresh == first
    np.testing.assert_array_equal(gemm.output(simulate(gemm.program, config, image).dram),
                                  a.astype(np.int32) @ b.astype(np.int32))


def test_a_malformed_program_faults_on_every_run():
    config = load_machine()
    program = (Finish(), Nop(queue=Queue.COMPUTE), Finish())
    for _ in range(2):
        with pytest.raises(SimulatorFault, match="FINISH before the end"):
            simulate(program, config, np.zeros(64, np.uint8))
