"""tensorize: map tensor programs onto hardware tensor instructions.

The engine lives here (matching, schedule primitives, rewriting); the IR is in :mod:`ir`,
intrinsic descriptions in :mod:`intrinsics`, code generators in :mod:`targets` and the
simulated NPU in :mod:`simulator`.
"""

__version__ = "0.1.0"
