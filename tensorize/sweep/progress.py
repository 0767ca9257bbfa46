"""The progress line on stderr: points done and failed out of the total, the rate and the
ETA. On a terminal it is redrawn in place; elsewhere (a log, CI) it is printed at most every
``interval`` seconds, and always at the end."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts finished points and reports them; ``total`` counts the points to run."""

    def __init__(self, total: int, resumed: int, stream: TextIO | None = None,
                 interval: float = 5.0) -> None:
        self.total = total
        self.resumed = resumed
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.done = resumed
        self.failed = 0
        self._last = ""
        self.start = time.monotonic()
        self._shown = self.start
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def update(self, failed: bool) -> None:
        """One more point finished (``failed``: with an error)."""
        self.done += 1
        self.failed += failed
        now = time.monotonic()
        if self._tty or now - self._shown >= self.interval:
            self._shown = now
            self._show(end="\r" if self._tty else "\n")

    def finish(self) -> None:
        """The last line (unless it is the line last shown)."""
        if self.line() != self._last or self._tty:
            self._show(end="\n")

    @property
    def elapsed(self) -> float:
        """Seconds since the sweep started."""
        return time.monotonic() - self.start

    def line(self) -> str:
        """The progress line's text."""
        ran = self.done - self.resumed
        rate = ran / self.elapsed if self.elapsed > 0 else 0.0
        left = self.total - self.done
        eta = _duration(left / rate) if rate > 0 and left else ("0s" if not left else "?")
        resumed = f" ({self.resumed} resumed)" if self.resumed else ""
        return (f"sweep: {self.done}/{self.total} points done{resumed}, {self.failed} failed, "
                f"{rate:.2f} points/s, ETA {eta}")

    def _show(self, end: str) -> None:
        self._last = self.line()
        print(self._last, end=end, file=self.stream, flush=True)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes \
        else f"{secs}s"
