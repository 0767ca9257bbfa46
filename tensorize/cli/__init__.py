"""The ``tensorize`` command line.

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds its
parser and sets ``handler`` to a function taking the parsed arguments and returning an exit
status: 0 success, 1 the work failed (a check, a validation), 2 bad usage or bad input.

A subcommand's module is imported only when that subcommand runs, so ``tensorize --help``
loads no backend. Everything, imports included, happens inside :func:`main`'s error handling:
a user error prints ``error: ...`` (and, with ``--json``, a JSON object with ``"ok": false``
on stdout), Ctrl-C exits 130 quietly at any moment (see :func:`_exit_on_interrupt`), a closed
stdout (``tensorize run ... | head``) exits quietly,
and anything unexpected prints one line naming it (``TENSORIZE_DEBUG=1`` shows the
traceback). The handler runs on a thread with a deep stack, so deep kernels do not run out
of Python's recursion limit.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

EXIT_INTERRUPTED = 130


def _exit_on_interrupt() -> None:
    """Make Ctrl-C end the console command quietly, whatever it is doing: importing numpy
    (whose import turns an interrupt into a misleading ImportError), inside LLVM, or in the
    interpreter's own shutdown (where an interrupt would print a traceback). The process's
    worker processes (a sweep's pool or local cluster) are killed with it; every finished
    sweep point is already on disk."""

    def interrupted(signum: int, frame: FrameType | None) -> None:
        os.write(2, b"interrupted\n")
        multiprocessing = sys.modules.get("multiprocessing")  # no children without it
        if multiprocessing is not None:
            for child in multiprocessing.active_children():
                child.kill()
        os._exit(EXIT_INTERRUPTED)

    signal.signal(signal.SIGINT, interrupted)


def _is_console_command() -> bool:
    """Whether this process is the ``tensorize`` command (its console script, or
    ``python -m tensorize``), not a Python program that imports the CLI."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    name, folder = os.path.basename(main_file), os.path.basename(os.path.dirname(main_file))
    return name in ("tensorize", "tensorize.exe") or (name, folder) == ("__main__.py",
                                                                          "tensorize")


# First, before the imports below: the console command's interrupts are handled from here on
# (the interpreter's own start-up, before this line, is the only window left).
if _is_console_command():
    _exit_on_interrupt()

import argparse  # noqa: E402  (after the interrupt handler, on purpose)
import importlib  # noqa: E402
import json  # noqa: E402
import threading  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import Any  # noqa: E402

from tensorize import __version__

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
# What a shell reports for a command stopped by writing to a closed pipe (128 + SIGPIPE); by
# Ctrl-C, EXIT_INTERRUPTED above (128 + SIGINT).
EXIT_BROKEN_PIPE = 141

# The subcommands: name -> (module, one-line help). The module is imported only when the
# subcommand is the one given.
COMMANDS = {
    "run": ("tensorize.cli.run_cmd",
            "tensorize a kernel for a target, validate it and run it"),
    "intrinsics": ("tensorize.cli.intrinsics_cmd",
                   "list, show and validate hardware intrinsic descriptions"),
    "model": ("tensorize.cli.model_cmd",
              "tensorize every layer of an ONNX model, run it and check it against onnxruntime"),
    "sweep": ("tensorize.cli.sweep_cmd",
              "simulate workloads on a grid of NPU machines, locally or on a Dask cluster"),
}

# The handler's thread: a stack deep enough for this recursion limit (a frame of the IR's
# recursive walks takes well under 8 KiB of C stack).
STACK_BYTES = 256 << 20
RECURSION_LIMIT = 20_000

DESCRIPTION = """\
Map tensor programs onto hardware tensor instructions.

Kernels are Python files with @T.prim_func functions (see examples/script/) or a build()
returning a PrimFunc (see examples/te/). Exit status: 0 success, 1 a check or validation
failed, 2 bad usage or bad input, 130 interrupted.
Set TENSORIZE_DEBUG=1 to see internal tracebacks."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser. ``command``, when given, is registered in full (its module
    imported); the others are listed by name and help only."""
    parser = argparse.ArgumentParser(
        prog="tensorize", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"tensorize {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, summary) in COMMANDS.items():
        if name == command:
            importlib.import_module(module).register(subparsers)
        else:
            subparsers.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tensorize`` console command; returns the exit status.

    In the console command, Ctrl-C ends the process at once with status 130
    (:func:`_exit_on_interrupt`); called from Python, KeyboardInterrupt ends the command and
    it returns 130."""
    args: argparse.Namespace | None = None
    try:
        words = list(sys.argv[1:] if argv is None else argv)
        parser = build_parser(next((w for w in words if not w.startswith("-")), None))
        args = parser.parse_args(words)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        with warnings.catch_warnings():
            warnings.showwarning = _warning_lines(warnings.showwarning,
                                                  forward=not _is_console_command())
            status = _on_deep_stack(args.handler, args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE
    except Exception as err:
        if os.environ.get("TENSORIZE_DEBUG"):
            raise
        return _report(err, bool(getattr(args, "json", False)))


# The packages whose warnings print as ``warning: MESSAGE``: the message names what it is
# about (a cache file and its entry), so the line of our code that warned is left out.
OWN_PACKAGES = ("tensorize", "ir", "intrinsics", "targets", "simulator")


def _warning_lines(python_shows: Callable[..., None], forward: bool) -> Callable[..., None]:
    """A ``warnings.showwarning`` printing a warning of our own packages as ``warning:
    MESSAGE`` on stderr, as errors print, and any other as ``python_shows`` does. With
    ``forward`` (:func:`main` called from Python, not as the console command) our warnings
    go on to ``python_shows`` as well, so the caller can still catch them."""

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        own = category.__module__.split(".")[0] in OWN_PACKAGES
        if own:
            print(f"warning: {message}", file=file or sys.stderr)
        if forward or not own:
            python_shows(message, category, filename, lineno, file, line)

    return show


def _on_deep_stack(handler: Callable[[argparse.Namespace], int],
                   args: argparse.Namespace) -> int:
    """``handler(args)`` on a thread with a deep stack and a raised recursion limit; what it
    raises is raised here. The thread is a daemon, so Ctrl-C (delivered here, to the main
    thread) ends the command without waiting for it."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["status"] = handler(args)
        except BaseException as err:  # handed to the main thread, which reports it
            outcome["error"] = err

    previous_stack = threading.stack_size(STACK_BYTES)
    try:
        worker = threading.Thread(target=work, name="tensorize", daemon=True)
        worker.start()
    finally:
        threading.stack_size(previous_stack)
    previous_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous_limit, RECURSION_LIMIT))
    try:
        worker.join()
    finally:
        sys.setrecursionlimit(previous_limit)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["status"]


def _report(err: Exception, as_json: bool) -> int:
    """Print a user error (TensorizeError) or an internal one; returns the exit status."""
    from ir.errors import TensorizeError

    if isinstance(err, TensorizeError):
        message, status = str(err), EXIT_USAGE
    else:
        message = (f"internal error: {type(err).__name__}: {err} (set TENSORIZE_DEBUG=1 for "
                   "the traceback)")
        status = EXIT_FAILED
    if as_json:
        print(json.dumps({"ok": False, "error": message}, indent=2))
    print(message if status == EXIT_FAILED else f"error: {message}", file=sys.stderr)
    return status


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush at exit does not fail on
    the closed pipe again (the recipe of Python's signal module documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (captured, replaced)
        pass
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
