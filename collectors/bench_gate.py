"""The efficiency gate: is this run worse than its baseline, beyond noise and beyond tolerance?

Standard library only (the agent installs without numpy), and no Django: the server imports
this module too, so a run's page shows exactly the verdict the CI job printed.

Per KPI (one value per repeat on each side) the gate reports the baseline and current medians,
the relative change, a bootstrap confidence interval of that change, the two-sided
Mann-Whitney U p-value, and a verdict:

* ``fail``: the change is worse than the tolerance *and* significant (p < alpha);
* ``inconclusive``: worse than the tolerance but not significant (a regression within the
  noise), or the comparison cannot be made: too few repeats for the test ever to reach
  significance (asv's rule), missing values, a simulated run, a hardware change, no baseline;
* ``pass``: the change is within the tolerance (or an improvement).

Why Mann-Whitney U and medians: benchmark timings and energies are skewed by the odd slow
repeat, and a rank test does not assume normality (Welch's t-test would).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

PASS = "pass"
FAIL = "fail"
INCONCLUSIVE = "inconclusive"
NOT_MEASURED = "not measured"

DEFAULT_ALPHA = 0.05
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 12  # fixed: the same data always gives the same interval
EXACT_MAX_N = 25  # exact U distribution up to this many repeats per side (and no ties)


@dataclass(frozen=True)
class Kpi:
    key: str
    label: str
    unit: str
    higher_is_worse: bool
    tolerance_pct: float  # default: how much worse is still a pass
    digits: int


# The gated KPIs, in table order. Energy per inference is the GPU energy measured by NVML
# divided by the inferences: CPU/RAM energy from codecarbon is recorded with the run but not
# gated, because outside RAPL hosts it is an estimate from TDP and CPU load.
KPIS: tuple[Kpi, ...] = (
    Kpi("energy_per_inference_j", "GPU energy per inference", "J", True, 5.0, 4),
    Kpi("p99_ms", "p99 latency", "ms", True, 10.0, 2),
    Kpi("throughput_per_s", "Throughput", "inferences/s", False, 5.0, 2),
    Kpi("cost_per_1k_usd", "Cost per 1k inferences", "USD", True, 5.0, 4),
)
KPI_BY_KEY = {k.key: k for k in KPIS}


# --- statistics ------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) and the sizes of tied groups."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def _u_counts(n1: int, n2: int) -> list[int]:
    """How many of the C(n1+n2, n1) orderings give each U = 0..n1*n2 (no ties).

    The number of ways equals the number of partitions of U into at most n1 parts, each at
    most n2; built with the recurrence f(n1, n2, u) = f(n1-1, n2, u-n2) + f(n1, n2-1, u).
    """
    # table[a][b] is the count list for sizes (a, b); built bottom-up over a + b.
    prev = {(a, 0): [1] for a in range(n1 + 1)}
    prev.update({(0, b): [1] for b in range(n2 + 1)})
    table = dict(prev)
    for a in range(1, n1 + 1):
        for b in range(1, n2 + 1):
            size = a * b + 1
            counts = [0] * size
            left = table[(a - 1, b)]  # the largest value belongs to the first sample: +b
            for u, c in enumerate(left):
                counts[u + b] += c
            right = table[(a, b - 1)]
            for u, c in enumerate(right):
                counts[u] += c
            table[(a, b)] = counts
    return table[(n1, n2)]


@dataclass(frozen=True)
class MannWhitney:
    u: float  # U of the first sample (scipy's `statistic`)
    p_value: float  # two-sided
    method: str  # "exact" or "asymptotic"


def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> MannWhitney:
    """Two-sided Mann-Whitney U test, with scipy.stats.mannwhitneyu's formulas.

    The exact distribution (scipy's method="exact") when both samples have at most
    EXACT_MAX_N values and there are no ties; otherwise the normal approximation with the tie
    correction and a continuity correction of 0.5 (scipy's method="asymptotic").
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    ranks, ties = _ranks(list(x) + list(y))
    r1 = sum(ranks[:n1])
    u1 = r1 - n1 * (n1 + 1) / 2.0
    u2 = n1 * n2 - u1
    big = max(u1, u2)
    if not ties and n1 <= EXACT_MAX_N and n2 <= EXACT_MAX_N:
        counts = _u_counts(n1, n2)
        total = math.comb(n1 + n2, n1)
        upper = sum(counts[int(round(big)):])
        return MannWhitney(u1, min(1.0, 2.0 * upper / total), "exact")
    n = n1 + n2
    tie_term = sum(t**3 - t for t in ties) / (n * (n - 1))
    sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term))
    if sigma == 0:  # every value equal: no evidence of any difference
        return MannWhitney(u1, 1.0, "asymptotic")
    z = (big - n1 * n2 / 2.0 - 0.5) / sigma
    return MannWhitney(u1, min(1.0, math.erfc(z / math.sqrt(2.0))), "asymptotic")


def smallest_p(n1: int, n2: int) -> float:
    """The smallest two-sided p-value the exact test can give for these sample sizes."""
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap_change_ci(base: Sequence[float], head: Sequence[float], level: float = 0.95,
                        resamples: int = BOOTSTRAP_RESAMPLES,
                        seed: int = BOOTSTRAP_SEED) -> tuple[float, float] | None:
    """Percentile bootstrap interval of median(head) / median(base) - 1, as fractions.

    Each side is resampled with replacement on its own (the repeats are independent). None
    when a resampled baseline median can be zero, where a relative change means nothing.
    """
    rng = random.Random(seed)
    changes = []
    for _ in range(resamples):
        b = median(rng.choices(base, k=len(base)))
        h = median(rng.choices(head, k=len(head)))
        if b == 0:
            return None
        changes.append(h / b - 1.0)
    changes.sort()
    tail = (1.0 - level) / 2.0
    return _percentile(changes, tail), _percentile(changes, 1.0 - tail)


# --- the verdict per KPI ---------------------------------------------------------------------


@dataclass
class Row:
    kpi: str
    label: str
    unit: str
    baseline: float | None = None  # median over the baseline's repeats
    current: float | None = None  # median over this run's repeats
    change_pct: float | None = None  # (current / baseline - 1) x 100
    interval_pct: tuple[float, float] | None = None  # bootstrap 95 % interval of the change
    p_value: float | None = None
    tolerance_pct: float = 0.0
    verdict: str = INCONCLUSIVE
    reason: str = ""
    digits: int = 2


@dataclass
class Comparison:
    """A whole gate result: one row per KPI, the overall verdict and what the baseline was."""

    verdict: str
    rows: list[Row]
    baseline: str  # e.g. "main @ 1a2b3c4 (stored run 17)" or "merge base 1a2b3c4, interleaved"
    reason: str = ""
    alpha: float = DEFAULT_ALPHA
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        doc = asdict(self)
        for row in doc["rows"]:
            if row["interval_pct"] is not None:
                row["interval_pct"] = list(row["interval_pct"])
        return doc

    @classmethod
    def from_dict(cls, doc: dict) -> Comparison:
        rows = []
        for r in doc.get("rows", []):
            r = dict(r)
            if r.get("interval_pct") is not None:
                r["interval_pct"] = tuple(r["interval_pct"])
            rows.append(Row(**r))
        return cls(verdict=doc["verdict"], rows=rows, baseline=doc.get("baseline", ""),
                   reason=doc.get("reason", ""), alpha=doc.get("alpha", DEFAULT_ALPHA),
                   notes=list(doc.get("notes", [])))

    @property
    def exit_code(self) -> int:
        return {PASS: 0, FAIL: 1}.get(self.verdict, 3)


def _values(samples: Sequence[float | None]) -> tuple[list[float], int]:
    present = [float(v) for v in samples if v is not None]
    return present, len(samples) - len(present)


def compare_kpi(kpi: Kpi, base: Sequence[float | None], head: Sequence[float | None],
                tolerance_pct: float | None = None, alpha: float = DEFAULT_ALPHA) -> Row:
    tol = kpi.tolerance_pct if tolerance_pct is None else tolerance_pct
    row = Row(kpi.key, kpi.label, kpi.unit, tolerance_pct=tol, digits=kpi.digits)
    b, b_missing = _values(base)
    h, h_missing = _values(head)
    if b:
        row.baseline = median(b)
    if h:
        row.current = median(h)
    if not b and not h:
        row.verdict, row.reason = NOT_MEASURED, "measured on neither side"
        return row
    if not b or not h:
        side = "the baseline" if not b else "this run"
        row.reason = f"not measured in {side}"
        return row
    if b_missing or h_missing:
        row.reason = (f"{b_missing + h_missing} repeat(s) without a value: every repeat "
                      "needs one")
        return row
    assert row.baseline is not None and row.current is not None
    if row.baseline == 0:
        row.reason = "baseline is zero: no relative change"
        return row
    change = row.current / row.baseline - 1.0
    row.change_pct = change * 100.0
    ci = bootstrap_change_ci(b, h)
    row.interval_pct = (ci[0] * 100.0, ci[1] * 100.0) if ci else None
    floor = smallest_p(len(b), len(h))
    if floor >= alpha:
        needed = next(n for n in range(2, 100) if smallest_p(n, n) < alpha)
        row.reason = (f"too few repeats ({len(b)} baseline, {len(h)} this run): the test "
                      f"cannot reach p < {alpha:g}; use --repeat {needed} or more")
        return row
    test = mann_whitney_u(h, b)
    row.p_value = test.p_value
    worse_pct = row.change_pct if kpi.higher_is_worse else -row.change_pct
    significant = test.p_value < alpha
    if worse_pct <= tol:
        row.verdict = PASS
        if worse_pct < 0 and significant:
            row.reason = "improved"
        else:
            row.reason = f"within the {tol:g} % tolerance"
        return row
    if significant:
        row.verdict = FAIL
        row.reason = (f"{abs(row.change_pct):.1f} % worse, beyond the {tol:g} % tolerance "
                      f"(p = {test.p_value:.3g})")
    else:
        row.reason = (f"{abs(row.change_pct):.1f} % worse but within the noise "
                      f"(p = {test.p_value:.3g} >= {alpha:g}): repeat with more runs")
    return row


def all_inconclusive(reason: str, baseline: str, alpha: float = DEFAULT_ALPHA,
                     head: dict[str, Sequence[float | None]] | None = None) -> Comparison:
    """A comparison that could not be made at all (no baseline, simulated, new hardware)."""
    rows = []
    for kpi in KPIS:
        values, _ = _values((head or {}).get(kpi.key, []))
        rows.append(Row(kpi.key, kpi.label, kpi.unit, current=median(values) if values else None,
                        tolerance_pct=kpi.tolerance_pct, reason=reason, digits=kpi.digits))
    return Comparison(INCONCLUSIVE, rows, baseline, reason=reason, alpha=alpha)


def estimated_kpis(energy_methods: Iterable[str | None]) -> dict[str, str]:
    """KPIs whose figures are estimates for these repeats, with the reason: GPU energy
    integrated from power readings (no usable energy counter) is an estimate, and estimates
    are reported but never gated."""
    methods = set(energy_methods)
    if methods and methods != {"counter"}:
        return {"energy_per_inference_j": "GPU energy integrated from power readings in some "
                "repeats (no usable NVML energy counter): an estimate, not gated"}
    return {}


def compare(base: dict[str, Sequence[float | None]], head: dict[str, Sequence[float | None]],
            baseline: str, tolerances: dict[str, float] | None = None,
            alpha: float = DEFAULT_ALPHA, estimated: dict[str, str] | None = None
            ) -> Comparison:
    """Gate ``head`` against ``base``: per-KPI lists of one value per repeat. ``estimated``
    names KPIs whose values are estimates (see estimated_kpis): shown, inconclusive."""
    tolerances = tolerances or {}
    rows = [compare_kpi(k, base.get(k.key, []), head.get(k.key, []), tolerances.get(k.key),
                        alpha) for k in KPIS]
    for row in rows:
        if row.kpi in (estimated or {}) and row.verdict in (PASS, FAIL):
            row.verdict, row.reason = INCONCLUSIVE, (estimated or {})[row.kpi]
    gated = [r for r in rows if r.verdict != NOT_MEASURED]
    energy = rows[0]
    if energy.verdict == NOT_MEASURED:
        reason = ("energy per inference was not measured: give --count or --count-from and "
                  "run on GPUs with NVML")
        energy.verdict, energy.reason = INCONCLUSIVE, reason
        return Comparison(INCONCLUSIVE, rows, baseline, reason=reason, alpha=alpha)
    if any(r.verdict == FAIL for r in gated):
        failed = ", ".join(r.label for r in gated if r.verdict == FAIL)
        return Comparison(FAIL, rows, baseline, reason=f"regression: {failed}", alpha=alpha)
    if any(r.verdict == INCONCLUSIVE for r in gated):
        which = "; ".join(f"{r.label}: {r.reason}" for r in gated if r.verdict == INCONCLUSIVE)
        return Comparison(INCONCLUSIVE, rows, baseline, reason=which, alpha=alpha)
    return Comparison(PASS, rows, baseline, reason="no KPI worse than its tolerance",
                      alpha=alpha)


# --- the table, as text for the log and as Markdown for a pull-request comment ---------------

HEADERS = ("KPI", "baseline", "this run", "change", "95% interval", "verdict")


def _num(value: float | None, digits: int) -> str:
    if value is None:
        return "unknown"
    return f"{value:,.{digits}f}"


def table_cells(comparison: Comparison) -> list[tuple[str, ...]]:
    """The table both renderings print, one tuple of cell texts per KPI."""
    cells = []
    for r in comparison.rows:
        unit = f" {r.unit}" if r.unit else ""
        change = "–" if r.change_pct is None else f"{r.change_pct:+.1f} %"
        interval = ("–" if r.interval_pct is None
                    else f"{r.interval_pct[0]:+.1f} … {r.interval_pct[1]:+.1f} %")
        verdict = r.verdict if not r.reason else f"{r.verdict}: {r.reason}"
        cells.append((f"{r.label} ({r.unit})" if unit else r.label, _num(r.baseline, r.digits),
                      _num(r.current, r.digits), change, interval, verdict))
    return cells


def render_text(comparison: Comparison) -> str:
    cells = [HEADERS, *table_cells(comparison)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADERS) - 1)]
    lines = []
    for row in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True))
                     + "  " + row[-1])
    head = f"GreenOps efficiency gate: {comparison.verdict.upper()}"
    lines = [head, f"baseline: {comparison.baseline}", *lines]
    if comparison.reason:
        lines.append(f"{comparison.verdict}: {comparison.reason}")
    lines.extend(comparison.notes)
    return "\n".join(lines) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(comparison: Comparison) -> str:
    icon = {PASS: "✅", FAIL: "❌"}.get(comparison.verdict, "⚠️")
    lines = [f"### {icon} GreenOps efficiency gate: {comparison.verdict}", "",
             f"Baseline: {_md_escape(comparison.baseline)}", "",
             "| " + " | ".join(HEADERS) + " |",
             "|" + "|".join(["---"] + ["---:"] * 4 + ["---"]) + "|"]
    for row in table_cells(comparison):
        lines.append("| " + " | ".join(_md_escape(c) for c in row) + " |")
    lines.append("")
    if comparison.reason:
        lines.append(f"**{comparison.verdict}**: {_md_escape(comparison.reason)}")
        lines.append("")
    lines.append(f"Fails only when a change is beyond its tolerance and significant "
                 f"(two-sided Mann–Whitney U, p < {comparison.alpha:g}); intervals are "
                 "bootstrap 95 % intervals of the change in medians.")
    for note in comparison.notes:
        lines.append("")
        lines.append(_md_escape(note))
    return "\n".join(lines) + "\n"
