"""Phase lines: one line on stderr for each long, otherwise silent phase of a command
(building the example models, onnxruntime's reference run, a CUDA emulation).

The library takes a *phase hook*, a callable that names a phase and returns a context
manager around it, and never prints; the edge makes the hook with :func:`phase_printer`.
A phase shorter than ``after`` seconds prints nothing. A longer one prints ``WHAT ...`` once
it has run that long (from a timer thread, since the phase itself may sit in onnxruntime or a
compiled emulation) and finishes the line with its time when it ends. As for the other
progress lines, the edge turns them off under ``--json`` and when stderr is not a terminal.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TextIO

PhaseHook = Callable[[str], AbstractContextManager[object]]

# A phase that ends sooner is not worth a line.
AFTER_SECONDS = 2.0


def no_phases(what: str) -> AbstractContextManager[object]:
    """The hook that prints nothing (for ``--json``, a log, or a library caller)."""
    return nullcontext()


def phase_printer(enabled: bool, stream: TextIO | None = None,
                  after: float = AFTER_SECONDS) -> PhaseHook:
    """The phase hook of a command: :func:`no_phases` unless ``enabled`` and ``stream``
    (default stderr) is a terminal; otherwise each phase of over ``after`` seconds gets one
    line on ``stream``."""
    out = stream if stream is not None else sys.stderr
    if not enabled or not getattr(out, "isatty", lambda: False)():
        return no_phases

    def hook(what: str) -> AbstractContextManager[object]:
        return _phase(what, out, after)
    return hook


@contextmanager
def _phase(what: str, stream: TextIO, after: float) -> Iterator[None]:
    start = time.perf_counter()
    lock = threading.Lock()
    shown = ended = False

    def show() -> None:
        nonlocal shown
        with lock:
            # The timer may fire just as the phase ends: then there is nothing to announce.
            if not ended:
                print(f"{what} ...", end="", file=stream, flush=True)
                shown = True

    timer = threading.Timer(after, show)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            ended = True
            if shown:
                print(f" {time.perf_counter() - start:.1f} s", file=stream, flush=True)
