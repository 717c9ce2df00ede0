"""How the report writes a number in its tables."""

from __future__ import annotations

import math


def fmt(v, digits: int = 3) -> str:
    """A value as the tables show it: thousands separated, 3 significant digits, empty if missing."""
    if hasattr(v, "item"):  # numpy scalar
        v = v.item()
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if isinstance(v, (bool,)):
        return "yes" if v else ""
    if isinstance(v, (int,)) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1000):
        return f"{int(v):,}"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if 0 < abs(v) < 0.001:
            return "< 0.001"
        return f"{v:.{digits}g}"
    return str(v)
