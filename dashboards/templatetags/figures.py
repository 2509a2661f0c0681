"""Numbers as people read them: thousands separators, and small figures keep their
significant digits (a codecarbon run of 4.6e-05 kWh is not "0.0000")."""

from __future__ import annotations

import math

from django import template

register = template.Library()


@register.filter
def num(value: float | int | None, digits: int = 2) -> str:
    """`digits` decimals with thousands separators; three significant digits instead when the
    decimals would show fewer than two (0.000046 with 2 decimals). None is an en dash."""
    if value is None:
        return "–"
    v = float(value)
    if not math.isfinite(v):
        return "–"
    digits = int(digits)
    if digits > 0 and v != 0 and abs(v) < 10 ** (1 - digits):
        # 3 significant digits: 0.0000461 -> "0.0000461", 0.0123 -> "0.0123"
        decimals = max(digits, 2 - math.floor(math.log10(abs(v))))
        return f"{v:,.{decimals}f}"
    return f"{v:,.{digits}f}"


@register.filter
def signed_pct(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:+,.1f} %"
