"""The efficiency gate: is this run worse than its baseline, beyond tolerance and beyond noise?

Standard library only (the agent installs on GPU hosts without numpy or scipy), and no Django:
the server imports this module too, so a run's page shows exactly the verdict the CI job
printed.

How a KPI is judged. Every value is turned into a "worse" log: log(value) for a KPI where
higher is worse, -log(value) for throughput. The change is then a log-ratio, and the tolerance
a threshold t = log(1 + tolerance). Two designs:

* Paired (the default: ``--base-dir``/``--base-ref`` runs base and head alternately on one
  runner, AB BA AB ...): pair i gives r_i = worse-log(head_i) - worse-log(base_i); slow drift of
  the runner is in both halves of a pair and cancels. The test is a one-sided Wilcoxon
  signed-rank test of H0 "median r <= t" (exact distribution when there are no ties); the
  change is the Hodges-Lehmann estimate (median of the Walsh averages of r) and the interval its
  exact (1 - 2 alpha) confidence interval, so a KPI fails exactly when its interval lies wholly
  beyond the tolerance.
* Unpaired (a stored baseline: ``--baseline FILE`` or ``--baseline-branch``): the same with the
  Mann-Whitney U test of worse-log(head) - t against worse-log(base), the Hodges-Lehmann shift
  (median of all head-base differences) and its exact interval. The two sides were measured at
  different times, so the report says that the comparison crosses time: runner drift between
  then and now reads as change.

One decision per gate: energy per inference is the primary KPI and the only gated one unless
``--gate KPI`` adds others; gated KPIs are Holm-corrected over the measurements they come
from (throughput and cost per 1k are both wall time over inferences: one measurement, one
hypothesis, however many KPIs show it). The other KPIs are secondary: shown, never deciding.

Verdicts: ``fail`` when the (Holm-adjusted) p < alpha; ``pass`` when the estimate is within the
tolerance and the interval rules out a worsening of 4x the tolerance; ``inconclusive`` when the
estimate is beyond the tolerance but not significantly, or the runs are too noisy to rule out
4x the tolerance (more repeats would decide), or when the comparison cannot be made (too few
repeats, missing values, an estimated energy, a simulated run, a hardware change, no
baseline). A runner without a usable GPU is its own verdict, ``no gpu``, with its own exit code.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from statistics import NormalDist

PASS = "pass"
FAIL = "fail"
INCONCLUSIVE = "inconclusive"
NOT_MEASURED = "not measured"
WORSE = "worse"  # a secondary KPI beyond its tolerance, significantly: shown, never gating
NO_GPU = "no gpu"

EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3, NO_GPU: 4}

DEFAULT_ALPHA = 0.05
EXACT_MAX_N = 25  # exact U distribution up to this many repeats per side (and no ties)
EXACT_MAX_PAIRS = 60  # exact signed-rank distribution up to this many pairs (and no ties)
PRIMARY = "energy_per_inference_j"
# A pass must rule out a worsening of this many times the tolerance (20 % for energy's 5 %):
# the upper end of the interval has to stay below it, else the gate is undecided and runs more
# pairs. With runner noise in the range this costs nothing; on a very noisy runner it
# turns a lucky "pass" of a real regression into "more repeats would decide".
RULE_OUT_FACTOR = 4.0


@dataclass(frozen=True)
class Kpi:
    key: str
    label: str
    unit: str
    higher_is_worse: bool
    tolerance_pct: float  # default: how much worse is still a pass
    digits: int
    measurement: str  # KPIs from the same measurement are one piece of evidence, not several


# The KPIs, in table order. Energy per inference is the GPU energy measured by NVML divided by
# the inferences: CPU/RAM energy from codecarbon is recorded with the run but not gated,
# because outside RAPL hosts it is an estimate from TDP and CPU load.
KPIS: tuple[Kpi, ...] = (
    Kpi(PRIMARY, "GPU energy per inference", "J", True, 5.0, 4, "GPU energy counter"),
    Kpi("p99_ms", "p99 latency", "ms", True, 10.0, 2, "latency samples"),
    Kpi("throughput_per_s", "Throughput", "inferences/s", False, 5.0, 2, "wall time"),
    Kpi("cost_per_1k_usd", "Cost per 1k inferences", "USD", True, 5.0, 4, "wall time"),
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


@lru_cache(maxsize=128)
def _signed_rank_counts(n: int) -> tuple[int, ...]:
    """How many of the 2^n sign patterns give each W+ = 0..n(n+1)/2 (ranks 1..n, no ties)."""
    counts = [1]
    for k in range(1, n + 1):
        new = [0] * (len(counts) + k)
        for w, c in enumerate(counts):
            new[w] += c
            new[w + k] += c
        counts = new
    return tuple(counts)


@lru_cache(maxsize=256)
def _u_tail(n1: int, n2: int) -> tuple[float, ...]:
    """P(U >= u) for u = 0..n1*n2 under H0 (exact, no ties)."""
    return _tails(_u_counts(n1, n2), math.comb(n1 + n2, n1))


@lru_cache(maxsize=128)
def _w_tail(n: int) -> tuple[float, ...]:
    """P(W+ >= w) for w = 0..n(n+1)/2 under H0 (exact, no ties)."""
    return _tails(list(_signed_rank_counts(n)), 2**n)


def _tails(counts: Sequence[int], total: int) -> tuple[float, ...]:
    out = [0.0] * len(counts)
    running = 0
    for i in range(len(counts) - 1, -1, -1):
        running += counts[i]
        out[i] = running / total
    return tuple(out)


def _critical(tail: Sequence[float], alpha: float) -> int | None:
    """The smallest c with P(stat >= c) <= alpha; None when no value is that unlikely."""
    for c, p in enumerate(tail):
        if p <= alpha:
            return c
    return None


@dataclass(frozen=True)
class ShiftTest:
    """A rank test of "the worse-log change is above the threshold", with its estimate."""

    estimate: float  # Hodges-Lehmann estimate of the worse-log change
    lower: float | None  # the (1 - 2 alpha) interval of it; None with too few repeats
    upper: float | None
    p_value: float  # one-sided: small means "worse than the threshold"
    p_better: float  # one-sided: small means "better than no change" (an improvement)
    method: str


def _normal_upper(stat: float, mean: float, var: float) -> float:
    if var <= 0:
        return 1.0 if stat <= mean else 0.0
    z = (stat - mean - 0.5) / math.sqrt(var)  # continuity correction, as scipy
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _signed_rank_p(d: Sequence[float]) -> tuple[float, str]:
    """One-sided Wilcoxon signed-rank p of "median d > 0" (zeros dropped, as scipy's
    zero_method="wilcox"); exact without ties, else the tie-corrected normal approximation."""
    nz = [x for x in d if x != 0.0]
    n = len(nz)
    if n == 0:
        return 1.0, "exact"
    ranks, ties = _ranks([abs(x) for x in nz])
    w_plus = sum(r for r, x in zip(ranks, nz, strict=True) if x > 0)
    if not ties and n <= EXACT_MAX_PAIRS:
        return _w_tail(n)[int(round(w_plus))], "exact"
    var = n * (n + 1) * (2 * n + 1) / 24.0 - sum(t**3 - t for t in ties) / 48.0
    return _normal_upper(w_plus, n * (n + 1) / 4.0, var), "normal"


def _mann_whitney_upper(x: Sequence[float], y: Sequence[float]) -> tuple[float, str]:
    """One-sided p of "x tends to be above y" (Mann-Whitney U)."""
    n1, n2 = len(x), len(y)
    ranks, ties = _ranks(list(x) + list(y))
    u = sum(ranks[:n1]) - n1 * (n1 + 1) / 2.0
    if not ties and n1 <= EXACT_MAX_N and n2 <= EXACT_MAX_N:
        return _u_tail(n1, n2)[int(round(u))], "exact"
    n = n1 + n2
    tie_term = sum(t**3 - t for t in ties) / (n * (n - 1))
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    return _normal_upper(u, n1 * n2 / 2.0, var), "normal"


def _interval(sorted_stats: Sequence[float], tail: Sequence[float] | None, n_stats: int,
              var: float, alpha: float) -> tuple[float | None, float | None]:
    """The exact rank interval: with c the critical value of the statistic that counts how
    many of ``sorted_stats`` lie above a candidate shift, the shifts not rejected one-sidedly
    at alpha on either side run from the (M - c + 1)-th to the c-th smallest."""
    if tail is not None:
        c = _critical(tail, alpha)
    else:
        c = math.ceil(n_stats / 2.0 + NormalDist().inv_cdf(1 - alpha) * math.sqrt(var) + 0.5)
    if c is None or c > n_stats or c < 1:
        return None, None
    return sorted_stats[n_stats - c], sorted_stats[c - 1]


def paired_shift(base: Sequence[float], head: Sequence[float], threshold: float,
                 alpha: float) -> ShiftTest:
    """``base``/``head`` are worse-logs, pair i measured back to back on one runner."""
    r = [h - b for b, h in zip(base, head, strict=True)]
    n = len(r)
    walsh = sorted((r[i] + r[j]) / 2.0 for i in range(n) for j in range(i, n))
    p, method = _signed_rank_p([x - threshold for x in r])
    p_better, _ = _signed_rank_p([-x for x in r])
    tail = _w_tail(n) if n <= EXACT_MAX_PAIRS else None
    lower, upper = _interval(walsh, tail, len(walsh), n * (n + 1) * (2 * n + 1) / 24.0, alpha)
    return ShiftTest(median(walsh), lower, upper, p, p_better, f"Wilcoxon signed-rank, {method}")


def unpaired_shift(base: Sequence[float], head: Sequence[float], threshold: float,
                   alpha: float) -> ShiftTest:
    """``base``/``head`` are worse-logs measured at different times (no pairs)."""
    diffs = sorted(h - b for h in head for b in base)
    n1, n2 = len(head), len(base)
    p, method = _mann_whitney_upper([h - threshold for h in head], base)
    p_better, _ = _mann_whitney_upper(base, head)
    tail = _u_tail(n1, n2) if n1 <= EXACT_MAX_N and n2 <= EXACT_MAX_N else None
    lower, upper = _interval(diffs, tail, len(diffs), n1 * n2 * (n1 + n2 + 1) / 12.0, alpha)
    return ShiftTest(median(diffs), lower, upper, p, p_better, f"Mann-Whitney U, {method}")


def min_p(n_base: int, n_head: int, paired: bool) -> float:
    """The smallest one-sided p-value the exact test can reach with these repeats."""
    if paired:
        return 0.5 ** min(n_base, n_head)
    return 1.0 / math.comb(n_base + n_head, n_head)


def repeats_needed(alpha: float, paired: bool) -> int:
    return next(n for n in range(2, 200) if min_p(n, n, paired) < alpha)


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone)."""
    order = sorted(p_values, key=lambda k: p_values[k])
    m = len(order)
    out, running = {}, 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (m - i) * p_values[key]))
        out[key] = running
    return out


# --- the verdict per KPI ---------------------------------------------------------------------


@dataclass
class Row:
    kpi: str
    label: str
    unit: str
    baseline: float | None = None  # median over the baseline's repeats
    current: float | None = None  # median over this run's repeats
    change_pct: float | None = None  # Hodges-Lehmann estimate of (current / baseline - 1) x 100
    interval_pct: tuple[float, float] | None = None  # its (1 - 2 alpha) interval
    p_value: float | None = None  # one-sided, of "worse than the tolerance"
    tolerance_pct: float = 0.0
    verdict: str = INCONCLUSIVE
    reason: str = ""
    digits: int = 2
    gated: bool = True  # False: a secondary KPI, shown but never deciding
    p_adjusted: float | None = None  # Holm-adjusted over the gated measurements
    measurement: str = ""


@dataclass
class Comparison:
    """A whole gate result: one row per KPI, the overall verdict and what the baseline was."""

    verdict: str
    rows: list[Row]
    baseline: str  # e.g. "main @ 1a2b3c4 (stored run 17)" or "merge base 1a2b3c4, interleaved"
    reason: str = ""
    alpha: float = DEFAULT_ALPHA
    notes: list[str] = field(default_factory=list)
    paired: bool = False  # True: interleaved pairs on one runner
    crosses_time: bool = False  # True: the baseline was measured at another time
    pairs: int = 0  # pairs used (paired) or repeats per side (unpaired: the smaller side)

    def as_dict(self) -> dict:
        doc = asdict(self)
        for row in doc["rows"]:
            if row["interval_pct"] is not None:
                row["interval_pct"] = list(row["interval_pct"])
        return doc

    @classmethod
    def from_dict(cls, doc: dict) -> Comparison:
        names = set(Row.__dataclass_fields__)
        rows = []
        for r in doc.get("rows", []):
            r = {k: v for k, v in dict(r).items() if k in names}
            if r.get("interval_pct") is not None:
                r["interval_pct"] = tuple(r["interval_pct"])
            rows.append(Row(**r))
        return cls(verdict=doc["verdict"], rows=rows, baseline=doc.get("baseline", ""),
                   reason=doc.get("reason", ""), alpha=doc.get("alpha", DEFAULT_ALPHA),
                   notes=list(doc.get("notes", [])), paired=bool(doc.get("paired", False)),
                   crosses_time=bool(doc.get("crosses_time", False)),
                   pairs=int(doc.get("pairs") or 0))

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.verdict, EXIT_CODES[INCONCLUSIVE])

    @property
    def gated_kpis(self) -> list[str]:
        return [r.kpi for r in self.rows if r.gated]

    def method_text(self) -> str:
        """One paragraph: how the verdict was reached (report footer and run page)."""
        gated = [r.label for r in self.rows if r.gated]
        secondary = [r.label for r in self.rows if not r.gated]
        if self.paired:
            how = (f"{self.pairs} interleaved pairs of base and head on one runner (order AB BA "
                   "AB …, so drift cancels); one-sided Wilcoxon signed-rank test of the per-pair "
                   "ratio against the tolerance")
        else:
            how = ("repeats of a stored baseline against this run's; one-sided Mann–Whitney U "
                   "test of the ratio against the tolerance")
        level = round((1 - 2 * self.alpha) * 100)
        text = (f"Decided by {', '.join(gated) or 'no KPI'}"
                f"{' (Holm-corrected over their measurements)' if len(gated) > 1 else ''}: "
                f"{how}, p < {self.alpha:g}. The change is the Hodges–Lehmann estimate and the "
                f"interval its {level} % interval: a KPI fails exactly when the whole interval "
                "is beyond its tolerance.")
        if secondary:
            text += f" Secondary, shown but not gated: {', '.join(secondary)}."
        return text


def _values(samples: Sequence[float | None]) -> tuple[list[float], int]:
    present = [float(v) for v in samples if v is not None]
    return present, len(samples) - len(present)


def _worse_log(kpi: Kpi, value: float) -> float:
    return math.log(value) if kpi.higher_is_worse else -math.log(value)


def _change_pct(kpi: Kpi, worse_log: float) -> float:
    """A worse-log change back to the KPI's own relative change, in percent."""
    return (math.exp(worse_log if kpi.higher_is_worse else -worse_log) - 1.0) * 100.0


def compare_kpi(kpi: Kpi, base: Sequence[float | None], head: Sequence[float | None],
                tolerance_pct: float | None = None, alpha: float = DEFAULT_ALPHA,
                paired: bool = False) -> tuple[Row, ShiftTest | None]:
    """The row of one KPI before the gate's decision, and its test (None: no test possible;
    the row's reason says why)."""
    tol = kpi.tolerance_pct if tolerance_pct is None else tolerance_pct
    row = Row(kpi.key, kpi.label, kpi.unit, tolerance_pct=tol, digits=kpi.digits,
              measurement=kpi.measurement)
    b, b_missing = _values(base)
    h, h_missing = _values(head)
    if b:
        row.baseline = median(b)
    if h:
        row.current = median(h)
    if not b and not h:
        row.verdict, row.reason = NOT_MEASURED, "measured on neither side"
        return row, None
    if not b or not h:
        side = "the baseline" if not b else "this run"
        row.reason = f"not measured in {side}"
        return row, None
    if b_missing or h_missing:
        row.reason = (f"{b_missing + h_missing} repeat(s) without a value: every repeat "
                      "needs one")
        return row, None
    if min(b) <= 0 or min(h) <= 0:
        row.reason = "a value of zero: no relative change"
        return row, None
    if paired and len(b) != len(h):
        paired = False  # cannot happen from the agent; compared unpaired rather than wrongly
    if min_p(len(b), len(h), paired) >= alpha:
        row.reason = (f"too few repeats ({len(b)} baseline, {len(h)} this run): the test "
                      f"cannot reach p < {alpha:g}; use --repeat "
                      f"{repeats_needed(alpha, paired)} or more")
        return row, None
    # The tolerance in the KPI's own terms: energy up to +5 %, throughput down to -5 %.
    if kpi.higher_is_worse:
        threshold = math.log1p(tol / 100.0)
    else:  # a drop of 100 % or more can never be "beyond" the tolerance
        threshold = -math.log1p(-tol / 100.0) if tol < 100.0 else math.inf
    wb = [_worse_log(kpi, v) for v in b]
    wh = [_worse_log(kpi, v) for v in h]
    test = (paired_shift if paired else unpaired_shift)(wb, wh, threshold, alpha)
    row.change_pct = _change_pct(kpi, test.estimate)
    if test.lower is not None and test.upper is not None:
        ends = sorted((_change_pct(kpi, test.lower), _change_pct(kpi, test.upper)))
        row.interval_pct = (ends[0], ends[1])
    row.p_value = test.p_value
    return row, test


def _decide(row: Row, test: ShiftTest, p: float, alpha: float, gated: bool) -> None:
    # In the KPI's own terms: +8 % energy is "8.0 % worse", -8 % throughput "8.0 % lower".
    kpi = KPI_BY_KEY[row.kpi]
    change = row.change_pct or 0.0
    worse_pct = change if kpi.higher_is_worse else -change
    worse = f"{abs(change):.1f} % {'worse' if kpi.higher_is_worse else 'lower'}"
    tol = row.tolerance_pct
    if p < alpha:
        row.verdict = FAIL if gated else WORSE
        row.reason = (f"{worse}, beyond the {tol:g} % tolerance (p = {p:.3g}"
                      f"{' after Holm' if gated and row.p_adjusted != row.p_value else ''})")
    elif worse_pct <= tol and (worst := _worst_plausible(kpi, row)) is not None \
            and worst >= RULE_OUT_FACTOR * tol:
        # Within tolerance on the estimate, but so noisy that a large regression is still
        # inside the interval: a pass would be a guess (a real 20 % regression passed like
        # this on a loaded 2-core runner).
        row.verdict = INCONCLUSIVE
        row.reason = (f"{worse} (within the {tol:g} % tolerance) but too noisy to rule out "
                      f"{RULE_OUT_FACTOR * tol:g} % (the interval reaches {worst:.1f} %): more "
                      "repeats would decide")
    elif worse_pct <= tol:
        row.verdict = PASS
        row.reason = "improved" if test.p_better < alpha else f"within the {tol:g} % tolerance"
    else:
        row.verdict = INCONCLUSIVE
        row.reason = (f"{worse} but not significantly beyond the {tol:g} % "
                      f"tolerance (p = {p:.3g}): more repeats would decide")


def _worst_plausible(kpi: Kpi, row: Row) -> float | None:
    """The worse end of the row's interval, as a worsening in percent (None: no interval)."""
    if row.interval_pct is None:
        return None
    return row.interval_pct[1] if kpi.higher_is_worse else -row.interval_pct[0]


def all_inconclusive(reason: str, baseline: str, alpha: float = DEFAULT_ALPHA,
                     head: dict[str, Sequence[float | None]] | None = None,
                     verdict: str = INCONCLUSIVE, gated: Iterable[str] = (PRIMARY,),
                     ) -> Comparison:
    """A comparison that could not be made at all (no baseline, simulated, new hardware, no
    GPU). The reason is the comparison's, said once: the rows carry none of their own."""
    gated = set(gated)
    rows = []
    for kpi in KPIS:
        values, _ = _values((head or {}).get(kpi.key, []))
        rows.append(Row(kpi.key, kpi.label, kpi.unit, current=median(values) if values else None,
                        tolerance_pct=kpi.tolerance_pct, verdict=verdict, digits=kpi.digits,
                        gated=kpi.key in gated, measurement=kpi.measurement))
    return Comparison(verdict, rows, baseline, reason=reason, alpha=alpha)


def estimated_kpis(energy_methods: Iterable[str | None]) -> dict[str, str]:
    """KPIs whose figures are estimates for these repeats, with the reason: GPU energy
    integrated from power readings (no usable energy counter) is an estimate, and estimates
    are reported but never gated."""
    methods = set(energy_methods)
    if methods and methods != {"counter"}:
        return {PRIMARY: "GPU energy integrated from power readings in some "
                "repeats (no usable NVML energy counter): an estimate, not gated"}
    return {}


def compare(base: dict[str, Sequence[float | None]], head: dict[str, Sequence[float | None]],
            baseline: str, tolerances: dict[str, float] | None = None,
            alpha: float = DEFAULT_ALPHA, excluded: dict[str, str] | None = None,
            paired: bool = False, gated: Iterable[str] = (PRIMARY,),
            crosses_time: bool | None = None) -> Comparison:
    """Gate ``head`` against ``base``: per-KPI lists of one value per repeat (with ``paired``,
    value i of each side is pair i). ``excluded`` names KPIs that cannot be compared here
    (an estimated energy, settings that differ between the sides), with the reason: shown,
    inconclusive. ``gated``: the KPIs that decide (energy per inference always does)."""
    tolerances = tolerances or {}
    excluded = excluded or {}
    gated_keys = {PRIMARY, *gated}
    rows, tests = [], {}
    for k in KPIS:
        row, test = compare_kpi(k, base.get(k.key, []), head.get(k.key, []),
                                tolerances.get(k.key), alpha, paired)
        row.gated = k.key in gated_keys
        if k.key in excluded and row.verdict != NOT_MEASURED:
            row.verdict, row.reason, test = INCONCLUSIVE, excluded[k.key], None
            row.p_value = row.change_pct = row.interval_pct = None
        rows.append(row)
        if test is not None:
            tests[k.key] = test
    # Holm over the gated measurements: KPIs of one measurement are one hypothesis (its
    # smallest p), so a slow run is one piece of evidence, not three.
    by_measurement: dict[str, float] = {}
    for row in rows:
        if row.gated and row.kpi in tests:
            p = tests[row.kpi].p_value
            by_measurement[row.measurement] = min(p, by_measurement.get(row.measurement, 1.0))
    adjusted = holm(by_measurement)
    for row in rows:
        test = tests.get(row.kpi)
        if test is None:
            continue
        if row.gated:
            row.p_adjusted = adjusted[row.measurement]
            _decide(row, test, row.p_adjusted, alpha, True)
        else:
            _decide(row, test, test.p_value, alpha, False)
    n = max((len([v for v in head.get(k.key, []) if v is not None]) for k in KPIS), default=0)
    result = Comparison(INCONCLUSIVE, rows, baseline, alpha=alpha, paired=paired,
                        crosses_time=(not paired) if crosses_time is None else crosses_time,
                        pairs=n)
    gated_rows = [r for r in rows if r.gated and r.verdict != NOT_MEASURED]
    energy = rows[0]
    if energy.verdict == NOT_MEASURED:
        energy.verdict = INCONCLUSIVE
        energy.reason = ""
        result.reason = ("energy per inference was not measured: give --count or --count-from "
                         "and run on GPUs with NVML")
        return result
    if failed := [r for r in gated_rows if r.verdict == FAIL]:
        result.verdict = FAIL
        result.reason = "regression: " + ", ".join(r.label for r in failed)
    elif unsure := [r for r in gated_rows if r.verdict == INCONCLUSIVE]:
        result.reason = (", ".join(r.label for r in unsure)
                         + " undecided (its row says why)")
    else:
        result.verdict = PASS
        result.reason = ("no gated KPI worse than its tolerance"
                         if len(gated_rows) > 1 else f"{energy.label} {energy.reason}")
    return result


def wants_more_pairs(comparison: Comparison) -> bool:
    """True when the gate is undecided only because a gated KPI's estimate is beyond its
    tolerance but not significantly so: more repeats can settle it (the agent then runs
    --repeat-step more pairs, up to --max-repeat; the simulation does the same)."""
    undecided = [r for r in comparison.rows if r.gated and r.verdict == INCONCLUSIVE]
    return (comparison.verdict == INCONCLUSIVE and bool(undecided)
            and all(r.p_value is not None for r in undecided))


# --- the table, as text for the log and as Markdown for a pull-request comment ---------------

HEADERS = ("KPI", "baseline", "this run", "change", "interval", "verdict")


def _num(value: float | None, digits: int) -> str:
    if value is None:
        return "unknown"
    return f"{value:,.{digits}f}"


def _verdict_cell(r: Row) -> str:
    if r.gated:
        return r.verdict if not r.reason else f"{r.verdict}: {r.reason}"
    text = "secondary" if r.verdict == NOT_MEASURED else f"secondary, {r.verdict}"
    return f"{text}: {r.reason}" if r.reason else text


def table_cells(comparison: Comparison) -> list[tuple[str, ...]]:
    """The table both renderings print, one tuple of cell texts per KPI."""
    cells = []
    for r in comparison.rows:
        unit = f" {r.unit}" if r.unit else ""
        change = "–" if r.change_pct is None else f"{r.change_pct:+.1f} %"
        interval = ("–" if r.interval_pct is None
                    else f"{r.interval_pct[0]:+.1f} … {r.interval_pct[1]:+.1f} %")
        cells.append((f"{r.label} ({r.unit})" if unit else r.label, _num(r.baseline, r.digits),
                      _num(r.current, r.digits), change, interval, _verdict_cell(r)))
    return cells


def _headline(comparison: Comparison) -> list[str]:
    lines = [f"baseline: {comparison.baseline}"]
    if comparison.crosses_time and comparison.verdict != NO_GPU:
        lines.append("this comparison crosses time: the baseline was measured earlier, so "
                     "runner drift between then and now reads as change (interleave with "
                     "--base-dir or --base-ref where possible)")
    return lines


def render_text(comparison: Comparison) -> str:
    cells = [HEADERS, *table_cells(comparison)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADERS) - 1)]
    lines = []
    for row in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True))
                     + "  " + row[-1])
    head = f"GreenOps efficiency gate: {comparison.verdict.upper()}"
    lines = [head, *_headline(comparison), *lines]
    if comparison.reason:
        lines.append(f"{comparison.verdict}: {comparison.reason}")
    lines.extend(comparison.notes)
    return "\n".join(lines) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(comparison: Comparison) -> str:
    icon = {PASS: "✅", FAIL: "❌", NO_GPU: "⛔"}.get(comparison.verdict, "⚠️")
    headline = _headline(comparison)
    lines = [f"### {icon} GreenOps efficiency gate: {comparison.verdict}", "",
             f"Baseline: {_md_escape(comparison.baseline)}", ""]
    if len(headline) > 1:
        lines += [f"> **Note:** {_md_escape(headline[1][0].upper() + headline[1][1:])}.", ""]
    lines += ["| " + " | ".join(HEADERS) + " |",
              "|" + "|".join(["---"] + ["---:"] * 4 + ["---"]) + "|"]
    for row in table_cells(comparison):
        lines.append("| " + " | ".join(_md_escape(c) for c in row) + " |")
    lines.append("")
    if comparison.reason:
        lines.append(f"**{comparison.verdict}**: {_md_escape(comparison.reason)}")
        lines.append("")
    if comparison.verdict != NO_GPU and any(r.p_value is not None for r in comparison.rows):
        lines.append(_md_escape(comparison.method_text()))
    for note in comparison.notes:
        lines.append("")
        lines.append(_md_escape(note))
    return "\n".join(lines) + "\n"
