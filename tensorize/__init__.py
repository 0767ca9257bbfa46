"""tensorize: map tensor programs onto hardware tensor instructions.

The engine lives here (matching, schedule primitives, rewriting); the IR is in :mod:`ir`,
intrinsic descriptions in :mod:`intrinsics`, code generators in :mod:`targets` and the
simulated NPU in :mod:`simulator`.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    # tensorize.compile_model, loaded on first use: importing the package stays light.
    if name == "compile_model":
        from tensorize.api import compile_model

        return compile_model
    raise AttributeError(f"module 'tensorize' has no attribute {name!r}")
