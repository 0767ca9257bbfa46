"""The front end's public edge: errors leave it without the parser's own stack frames."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from ir.errors import TensorizeError

P = ParamSpec("P")
R = TypeVar("R")


def user_facing(fn: Callable[P, R]) -> Callable[P, R]:
    """Re-raise a TensorizeError from ``fn`` with the front end's frames dropped.

    The error already names the user's file and line; our frames would only hide it. Set the
    environment variable ``TENSORIZE_DEBUG`` to keep them.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except TensorizeError as err:
            if os.environ.get("TENSORIZE_DEBUG"):
                raise
            raise err.with_traceback(None) from None

    return wrapper
