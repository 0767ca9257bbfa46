"""Runners: one per target kind with intrinsics (npu, cpu, cuda), each with the same typed
steps, the host's one step (the untouched kernel on the reference executor), and the run
context they all take. See :mod:`tensorize.runners.runner` for the route a
kernel takes, :mod:`tensorize.runners.context` for the settings made at the edge."""

from tensorize.runners.context import (
    MAX_BYTES,
    ContextError,
    RunContext,
    cpu_targets,
    make_context,
)
from tensorize.runners.report import Note, RunReport, Step
from tensorize.runners.runner import (
    RUNNERS,
    RunOptions,
    RunOutcome,
    Runner,
    Tensorization,
    reduction_blocks,
    run_kernel,
    runner_for,
)

__all__ = [
    "MAX_BYTES", "RUNNERS", "ContextError", "Note", "RunContext", "RunOptions", "RunOutcome",
    "RunReport", "Runner", "Step", "Tensorization", "cpu_targets", "make_context",
    "reduction_blocks", "run_kernel", "runner_for",
]
