"""Reading a rendered page's KPI cards and the label of its figures in tests."""

from __future__ import annotations

import re


def card(html: str, key: str) -> str:
    """The text of the card data-kpi=`key` (its figure, "unknown", ...); fails if absent."""
    m = re.search(rf'data-kpi="{re.escape(key)}">([^<]*)<', html)
    assert m, f"no {key} card"
    return m.group(1).strip()


def figures_state(html: str, kind: str, absent: str | None = None) -> str:
    """data-`kind`-state of the page ("costs", "kpis": refreshing, computing, ...). Without one,
    `absent` if given (current figures carry no label), else the test fails."""
    m = re.search(rf'data-{kind}-state="(\w+)"', html)
    if m:
        return m.group(1)
    assert absent is not None, f"no {kind} figures label"
    return absent
