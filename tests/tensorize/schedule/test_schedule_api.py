"""The Schedule's own surface: every primitive declared on the class (not attached at
import), and snapshot/restore undoing what was applied since."""

from __future__ import annotations

import ast
import inspect

from ir import assert_structural_equal
from tensorize.schedule import Schedule
from tensorize.schedule.primitives import PRIMITIVES
from tests.tensorize.schedule.kernels import assert_same_results, gemm_int8


def test_every_primitive_is_declared_in_the_class_body():
    tree = ast.parse(inspect.getsource(Schedule))
    declared = {target.id for node in tree.body[0].body if isinstance(node, ast.Assign)
                for target in node.targets if isinstance(target, ast.Name)}
    assert set(PRIMITIVES) <= declared


def test_a_method_carries_its_primitives_name_and_doc():
    assert Schedule.split.__name__ == "split"
    assert Schedule.split.__doc__ == PRIMITIVES["split"].__doc__


def test_restore_undoes_the_primitives_applied_since_the_snapshot():
    func = gemm_int8()
    sch = Schedule(func)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 8])
    kept = sch.func
    before = sch.snapshot()
    steps = len(sch.trace.steps)
    j = sch.get_loops(sch.get_block("C"))[2]
    sch.split(j, [None, 4])
    assert sch.func is not kept
    sch.restore(before)
    assert sch.func is kept
    assert len(sch.trace.steps) == steps
    replayed = Schedule.replay(func, sch.replay_trace())
    assert_structural_equal(replayed.func, kept)
    assert_same_results(func, sch.func)
