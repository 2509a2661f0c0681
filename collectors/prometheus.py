"""A parser for the Prometheus text exposition format (version 0.0.4), standard library only.

Enough of the format for scraping inference servers: ``# TYPE`` lines, samples with labels
(escaped quotes, backslashes and newlines in label values), the special values ``NaN``,
``+Inf`` and ``-Inf``, and an optional timestamp after the value (ignored: the agent stamps a
window with its own clock). Metric names may contain colons, as vLLM's do (``vllm:...``).
OpenMetrics' ``# EOF`` is accepted too. A malformed line raises :class:`ParseError`: a
scrape that cannot be read whole is dropped, never half-counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs: hashable, order-free


class ParseError(ValueError):
    pass


@dataclass
class Exposition:
    """One scrape: every sample by metric name, and each family's declared type."""

    samples: dict[str, dict[Labels, float]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)  # family name -> counter, histogram...

    def series(self, name: str) -> dict[Labels, float]:
        return self.samples.get(name, {})

    def has(self, name: str) -> bool:
        return name in self.samples


_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_labels(text: str, pos: int, lineno: int) -> tuple[Labels, int]:
    """Parse ``{a="x",b="y"}`` starting at the ``{``; returns the labels and the end index."""
    labels: list[tuple[str, str]] = []
    pos += 1
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos < n and text[pos] == "}":
            return tuple(sorted(labels)), pos + 1
        eq = text.find("=", pos)
        if eq < 0:
            raise ParseError(f"line {lineno}: label without '='")
        name = text[pos:eq].strip()
        if not name or not (name[0].isalpha() or name[0] == "_"):
            raise ParseError(f"line {lineno}: bad label name {name!r}")
        pos = eq + 1
        if pos >= n or text[pos] != '"':
            raise ParseError(f"line {lineno}: label value must be quoted")
        pos += 1
        value: list[str] = []
        while True:
            if pos >= n:
                raise ParseError(f"line {lineno}: unterminated label value")
            ch = text[pos]
            if ch == "\\" and pos + 1 < n:
                value.append(_ESCAPES.get(text[pos + 1], "\\" + text[pos + 1]))
                pos += 2
            elif ch == '"':
                pos += 1
                break
            else:
                value.append(ch)
                pos += 1
        labels.append((name, "".join(value)))
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos < n and text[pos] == ",":
            pos += 1
        elif pos < n and text[pos] == "}":
            continue
        else:
            raise ParseError(f"line {lineno}: expected ',' or '}}' after a label")


def _parse_value(token: str, lineno: int) -> float:
    try:
        value = float(token)  # Python reads NaN, +Inf, -Inf, 1e3 and Go's float formats
    except ValueError:
        raise ParseError(f"line {lineno}: bad sample value {token!r}") from None
    return value


def parse(text: str) -> Exposition:
    out = Exposition()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                out.types[parts[2]] = parts[3].strip().lower()
            continue  # HELP, EOF and plain comments
        brace = line.find("{")
        space = min((i for i in (line.find(" "), line.find("\t")) if i >= 0), default=-1)
        if brace >= 0 and (space < 0 or brace < space):
            name = line[:brace]
            labels, end = _parse_labels(line, brace, lineno)
            rest = line[end:].split()
        else:
            if space < 0:
                raise ParseError(f"line {lineno}: sample without a value")
            name, labels, rest = line[:space], (), line[space:].split()
        if not name or not rest or len(rest) > 2:
            raise ParseError(f"line {lineno}: expected 'name[{{labels}}] value [timestamp]'")
        value = _parse_value(rest[0], lineno)
        series = out.samples.setdefault(name, {})
        if labels in series:
            raise ParseError(f"line {lineno}: duplicate series {name}{dict(labels)}")
        series[labels] = value
    return out


def without(labels: Labels, *names: str) -> Labels:
    return tuple((k, v) for k, v in labels if k not in names)


def label(labels: Labels, name: str) -> str | None:
    for k, v in labels:
        if k == name:
            return v
    return None


def le_value(text: str) -> float:
    """A bucket bound: ``"0.3"``, ``"1e+06"`` or ``"+Inf"``."""
    value = float(text)
    if math.isnan(value):
        raise ParseError(f"bucket bound is NaN: {text!r}")
    return value
