"""The schedule primitives, each a function ``f(func, *args) -> (new_func, handles)``.

Each module of this package lists its primitives in ``__all__``; every one of them becomes a
:class:`~tensorize.schedule.Schedule` method of the same name (and an entry of
:data:`PRIMITIVES`), so adding a primitive is adding a module (or a function to one). They are
not re-exported here, so a module and its primitive may share a name.
"""

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

PRIMITIVES: dict[str, Callable[..., Any]] = {}

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    for _name in getattr(_module, "__all__", ()):
        if _name in PRIMITIVES:
            raise ImportError(f"schedule primitive {_name!r} is defined twice "
                              f"({PRIMITIVES[_name].__module__} and {_module.__name__})")
        PRIMITIVES[_name] = getattr(_module, _name)

__all__ = ["PRIMITIVES"]
