"""The run context: every setting a run needs, made once at the edge (the CLI, the Python
API, a sweep point) and passed down. Nothing below the edge falls back to a default registry
or machine: what a runner uses is what the context holds.

``make_context`` checks what the edge was given (the target against the loaded descriptions,
the features against the target's, the machine) and raises ContextError, a user error
worded for options, when something does not apply.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from intrinsics import Registry, feature_names
from ir.errors import TensorizeError
from simulator import MachineConfig

# The most the kernel's buffers (parameters and intermediates) may take together: a run
# holds several copies of each.
MAX_BYTES = 4 << 30
# The target kinds a runner exists for; a target's kind comes from its YAML (``cpu:``,
# ``machine:``, ``gpu:`` sections), never from its name.
KINDS = ("host", "npu", "cpu", "cuda")


class ContextError(TensorizeError):
    """A setting of the run that does not apply (an unknown target, a feature the target
    lacks); the message names the option and says how to fix it."""


@dataclass(frozen=True)
class RunContext:
    """Where and how a kernel runs.

    ``registry``: the intrinsic descriptions; ``target`` its name, ``kind`` its kind (one of
    :data:`KINDS`); ``features``: a CPU target's features (``+neon,+dotprod``), None for
    other kinds; ``machine``: the NPU the simulator runs (for kind npu always set);
    ``seed``: the random inputs' seed; ``max_bytes``: the most the kernel's buffers may take;
    ``threads``: the most cores a native CPU run uses (split by output rows:
    ``tensorize.engine.cpu_threads``); None: all cores, unasked (an emulated run then says
    nothing of threads); ``arch``: cuda's architecture to schedule and compile for
    (``sm_90a``: Hopper's wgmma GEMM), None: every architecture of the ``gpu:`` section.
    """

    registry: Registry
    target: str
    kind: str
    features: str | None = None
    machine: MachineConfig | None = field(default=None, repr=False)
    seed: int = 0
    max_bytes: int = MAX_BYTES
    threads: int | None = 1
    arch: str | None = None


def make_context(registry: Registry, target: str, *, features: str | None = None,
                 machine: MachineConfig | None = None, seed: int = 0,
                 max_bytes: int = MAX_BYTES, threads: int | None = 1,
                 arch: str | None = None) -> RunContext:
    """The context for ``target`` in ``registry``. ``features`` (CPU targets) edits the
    target's defaults: ``+x`` adds, ``-x`` removes; ``machine`` is the NPU to run (default
    for kind npu: the built-in one); ``threads`` the most cores a native CPU run uses
    (None: all of them); ``arch`` the one architecture a cuda target is scheduled and
    compiled for (:func:`cuda_architectures` lists those allowed).
    Raises ContextError for a target no description declares, or settings that do not apply
    to its kind."""
    kind = target_kind(registry, target)
    if arch is not None and kind != "cuda":
        raise ContextError(f"--arch applies to a target of kind cuda, got --target {target} "
                           f"of kind {kind}")
    if arch is not None and arch not in cuda_architectures(registry, target):
        raise ContextError(f"--arch requires an architecture of {target}'s descriptions "
                           f"({', '.join(cuda_architectures(registry, target))}), got "
                           f"{arch!r}")
    if features is not None and kind != "cpu":
        raise ContextError(f"--features applies to a CPU target ({cpu_targets(registry)}), "
                           f"got --target {target}")
    if machine is not None and kind != "npu":
        raise ContextError(f"--machine applies to an NPU target, got --target {target} of "
                           f"kind {kind}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ContextError(f"--threads requires a positive integer, got {threads!r}")
    chosen = cpu_features(registry, target, features) if kind == "cpu" else None
    if kind == "npu" and machine is None:
        from simulator import load_machine

        machine = load_machine()
    return RunContext(registry, target, kind, chosen, machine, seed, max_bytes, threads,
                      arch)


def cuda_architectures(registry: Registry, target: str) -> list[str]:
    """The architectures ``--arch`` takes for a cuda target: its ``gpu:`` section's, then
    the architecture-specific variant of one of them that an intrinsic needs (``feature:
    sm_90a``, the wgmma family, which runs with sm_90's limits)."""
    named = list(registry.gpu(target).architectures)
    variants = {i.feature for i in registry.for_target(target) if i.feature is not None
                and i.feature.endswith("a") and i.feature.removesuffix("a") in named}
    return named + sorted(variants)


def target_kind(registry: Registry, target: str) -> str:
    """The kind of ``target``: host, or what its description declares; ContextError for a
    target no loaded description declares (with the closest name)."""
    if target == "host":
        return "host"
    if target in registry.targets:
        return registry.target_kind(target)
    known = ", ".join(sorted(registry.targets))
    close = difflib.get_close_matches(target, list(registry.targets), n=1)
    hint = f"; did you mean {close[0]}?" if close else \
        "; describe it in a family file and pass its directory with --intrinsics-dir"
    raise ContextError(f"--target requires host or a target a description declares "
                       f"({known}), got {target!r}{hint}")


def cpu_targets(registry: Registry) -> str:
    """The CPU targets the loaded descriptions declare, for a message."""
    return ", ".join(t for t in registry.targets if registry.target_kind(t) == "cpu")


def cpu_features(registry: Registry, target: str, spec: str | None) -> str:
    """The CPU target's features: its description's defaults, with ``spec``'s ``+x`` added
    and ``-x`` removed; a feature neither the defaults nor an intrinsic of the target names
    is refused."""
    defaults = registry.cpu(target).default_features or ""
    if spec is None:
        return defaults
    chosen = [f for f in defaults.split(",") if f]
    known = sorted(feature_names(defaults)
                   | {i.feature for i in registry.for_target(target) if i.feature})
    for item in (f.strip() for f in spec.split(",")):
        name = item[1:]
        if item[:1] not in ("+", "-") or name not in known:
            raise ContextError(f"--features requires +name or -name of a known feature "
                               f"({', '.join(known)}), got {item!r}")
        at = next((n for n, f in enumerate(chosen) if f[1:] == name), None)
        if at is None:
            chosen.append(item)
        else:
            chosen[at] = item
    return ",".join(chosen)
