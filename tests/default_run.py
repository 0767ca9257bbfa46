"""Which cases of a parametrized test the default run takes: the first few, one of each
behaviour; the rest run in CI's slow pass (``-m slow``), so the default run stays within
its three minutes on two cores while CI still runs every case."""

from __future__ import annotations

from collections.abc import Sequence

import pytest


def first_by_default(cases: Sequence[object], keep: int) -> list[object]:
    """``cases`` with every one after the first ``keep`` marked slow (a tuple case is one
    case of several arguments)."""
    return [case if index < keep else
            pytest.param(*(case if isinstance(case, tuple) else (case,)),
                         marks=pytest.mark.slow)
            for index, case in enumerate(cases)]
