"""Hardware families described as data.

One YAML file per family (``cuda.yaml``, ``arm.yaml``, ``npu.yaml`` here, and any a user adds)
declares the family's memory scopes and its intrinsics: iteration space, operands, semantics
as one statement of the kernel language, emit templates per backend, cost and a link to the
vendor manual; the NPU's file also holds the simulator's ``machine:`` parameters, and a CPU
target's file its ``cpu:`` description (triple, features, registers, how its code runs).
``docs/intrinsics.md`` documents the format.

Loading validates a file and reports every problem at its YAML line
(:class:`ir.IntrinsicSpecError`). :func:`default_registry` gathers the built-in families and
the user's (``--intrinsics-dir``, ``TENSORIZE_INTRINSICS_PATH``); :func:`self_check` runs each
intrinsic's semantics against an independent numpy model; :func:`lower_call` turns an
``IntrinsicCall`` into loops an executor can run.
"""

from intrinsics.cpu_target import BACKEND as CPU_BACKEND
from intrinsics.loader import check_family, load_family
from intrinsics.lowering import lower_call, lowerer
from intrinsics.model import (
    Cost,
    CpuTarget,
    Family,
    Intrinsic,
    Operand,
    Scope,
    StrideRule,
    feature_names,
)
from intrinsics.registry import (
    ENV_VAR,
    Registry,
    check_registry,
    default_registry,
    load_registry,
    search_dirs,
)
from intrinsics.selfcheck import Checker, CheckResult, self_check

__all__ = [
    "CPU_BACKEND", "ENV_VAR", "CheckResult", "Checker", "Cost", "CpuTarget", "Family",
    "Intrinsic", "Operand", "Registry", "Scope", "StrideRule",
    "check_family", "check_registry", "default_registry", "feature_names", "load_family", "load_registry", "lower_call", "lowerer",
    "search_dirs", "self_check",
]
