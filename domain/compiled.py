"""The compiled twins of pure domain functions (``lb_native``), when they are built.

Domain modules keep their Python reference and take the compiled twin from
here when ``lb_native`` is installed (docs/DESIGN.md lists the pieces); one
place decides whether it is.
"""

from __future__ import annotations

import importlib

#: The crate built from ``native/`` (``scripts/bootstrap.sh``).
MODULE = "lb_native"


def compiled(name: str) -> object | None:
    """``lb_native.<name>``, or None when the crate (or that name in it) is not built."""
    try:
        module = importlib.import_module(MODULE)
    except ImportError:
        return None
    return getattr(module, name, None)


def built(name: str, *args: object) -> object | None:
    """``lb_native.<name>(*args)``: a compiled twin built with its constants (None: not built)."""
    make = compiled(name)
    return make(*args) if callable(make) else None
