"""The report as a PDF, rendered offline with ReportLab (pip only: no system libraries, no
browser) from a report's stored figures, through the same text rows as the page (present.py)."""

from __future__ import annotations

import contextvars
import io

from reportlab.graphics.charts.barcharts import VerticalBarChart
from reportlab.graphics.shapes import Drawing, String
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4, landscape
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import mm
from reportlab.platypus import (
    KeepTogether,
    Paragraph,
    SimpleDocTemplate,
    Spacer,
    Table,
    TableStyle,
)

from greenops import chart_style
from greenops.reports import fonts, present

GREEN = colors.HexColor(chart_style.colour(0))  # the house chart colour (greenops/chart_style.py)
GREY = colors.HexColor("#f1f3f2")
PAGE = landscape(A4)


def _styles() -> dict:
    base = getSampleStyleSheet()
    regular, bold = fonts.body_fonts()  # DejaVu Sans, embedded: accents, Greek, Cyrillic
    for style in base.byName.values():
        if hasattr(style, "fontName"):  # paragraph styles (list styles have none)
            style.fontName = bold if "Bold" in style.fontName else regular
    return {
        "title": ParagraphStyle("title", parent=base["Title"], alignment=0, fontSize=18,
                                textColor=GREEN, spaceAfter=2 * mm),
        "h2": ParagraphStyle("h2", parent=base["Heading2"], fontSize=12, spaceBefore=4 * mm,
                             spaceAfter=1.5 * mm, textColor=GREEN),
        "body": ParagraphStyle("body", parent=base["BodyText"], fontSize=8.5, leading=11),
        "cell": ParagraphStyle("cell", parent=base["BodyText"], fontSize=7.5, leading=9),
        "note": ParagraphStyle("note", parent=base["BodyText"], fontSize=7.5, leading=9.5,
                               textColor=colors.HexColor("#555555")),
        "banner": ParagraphStyle("banner", parent=base["BodyText"], fontSize=9, leading=12,
                                 backColor=colors.HexColor("#fff4d6"), borderPadding=3,
                                 spaceAfter=2 * mm),
    }


# The CJK font of the report being written (fonts.cjk_font of its characters), or None.
_CJK_FONT: contextvars.ContextVar[str | None] = contextvars.ContextVar("cjk_font", default=None)
# A cell longer than this is continued on the next row(s): a table splits between rows only,
# and one cell naming ~300 hosts was taller than a page (ReportLab's LayoutError).
CELL_MAX_CHARS = 1500


def _esc(text: str) -> str:
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return fonts.markup(escaped, _CJK_FONT.get())


def _chunks(text: str, size: int = CELL_MAX_CHARS) -> list[str]:
    """`text` in pieces of at most `size` characters, cut after a comma or space if one is
    near, so a list of names breaks between names."""
    out = []
    while len(text) > size:
        cut = max(text.rfind(", ", 0, size), text.rfind(" ", 0, size))
        cut = cut + 1 if cut > size // 2 else size
        out.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    return [*out, text]


def _split_rows(rows: list[list[str]]) -> list[list[str]]:
    """Rows whose long cells go on over continuation rows (other cells blank there)."""
    out = []
    for row in rows:
        pieces = [_chunks(c) for c in row]
        for i in range(max(len(p) for p in pieces)):
            out.append([p[i] if i < len(p) else "" for p in pieces])
    return out


def _table(t: present.Table, st: dict, width: float) -> list:
    out: list = [Paragraph(_esc(t.title), st["h2"])]
    if not t.rows:
        out.append(Paragraph(_esc(t.empty), st["body"]))
    else:
        data = [[Paragraph(f"<b>{_esc(h)}</b>", st["cell"]) for h in t.headers]]
        data += [[Paragraph(_esc(c), st["cell"]) for c in r] for r in _split_rows(t.rows)]
        table = Table(data, repeatRows=1, colWidths=_widths(t, width), splitByRow=1)
        table.setStyle(TableStyle([
            ("BACKGROUND", (0, 0), (-1, 0), GREY),
            ("LINEBELOW", (0, 0), (-1, 0), 0.6, GREEN),
            ("LINEBELOW", (0, 1), (-1, -1), 0.25, colors.HexColor("#dddddd")),
            ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ]))
        out.append(table)
    out += [Paragraph(_esc(n), st["note"]) for n in t.notes]
    return out


def _widths(t: present.Table, width: float) -> list[float]:
    """Column widths by how much text each column holds, so prose columns ("Why") get room
    and short figures do not: average cell length, kept between 8 and 60 characters."""
    weights = []
    for i, header in enumerate(t.headers):
        cells = [min(len(r[i]), CELL_MAX_CHARS) for r in t.rows] + [min(len(header), 14)]
        weights.append(min(max(sum(cells) / len(cells), 8.0), 60.0))
    total = sum(weights)
    return [width * w / total for w in weights]


def _bar_chart(title: str, labels: list[str], values: list[float], unit: str,
               width: float, height: float = 58 * mm) -> Drawing:
    d = Drawing(width, height)
    d.add(String(0, height - 10, f"{title} ({unit})", fontSize=9, fillColor=GREEN))
    chart = VerticalBarChart()
    chart.x, chart.y = 32, 24
    chart.width, chart.height = width - 44, height - 44
    chart.data = [values or [0.0]]
    chart.categoryAxis.categoryNames = labels or [""]
    chart.categoryAxis.labels.fontSize = 6
    chart.categoryAxis.labels.angle = 0 if len(labels) <= 8 else 90
    chart.categoryAxis.labels.dy = -2 if len(labels) <= 8 else -8
    chart.valueAxis.labels.fontSize = 6
    chart.valueAxis.valueMin = 0
    chart.bars[0].fillColor = GREEN
    chart.bars[0].strokeColor = None
    d.add(chart)
    return d


def _charts(fig: dict, width: float) -> list:
    days = fig["daily"]
    half = width / 2 - 4 * mm
    daily = _bar_chart("Facility energy per day", [d["day"][-2:] for d in days],
                       [d["facility_energy_kwh"] for d in days], "kWh", half)
    options = [o for o in fig["cost_by_option"] if o["hosts"]]
    cost = _bar_chart("Cost by purchase option", [o["label"] for o in options],
                      [o["cost_usd"] or 0.0 for o in options], "USD", half)
    row = Table([[daily, cost]], colWidths=[half + 4 * mm, half + 4 * mm])
    return [row]


def _texts(node):
    """Every string in the report's figures (to find the CJK characters it will draw)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _texts(k)
            yield from _texts(v)
    elif isinstance(node, list | tuple):
        for v in node:
            yield from _texts(v)


def write(fig: dict, revision: int | None = None, difference: list | None = None,
          previous_provisional: bool = False) -> bytes:
    chars = fonts.cjk_chars(_texts([fig, difference or []]))
    token = _CJK_FONT.set(fonts.cjk_font(chars) if chars else None)
    try:
        return _write(fig, revision, difference, previous_provisional)
    finally:
        _CJK_FONT.reset(token)


def _write(fig: dict, revision: int | None, difference: list | None,
           previous_provisional: bool) -> bytes:
    st = _styles()
    buf = io.BytesIO()
    title = f"GreenOps monthly report: {fig['team']['name']}, {fig['month_label']}"
    doc = SimpleDocTemplate(buf, pagesize=PAGE, leftMargin=14 * mm, rightMargin=14 * mm,
                            topMargin=12 * mm, bottomMargin=12 * mm, title=title,
                            author="GreenOps", subject=f"{fig['month']} revision {revision}")
    width = PAGE[0] - 28 * mm
    story: list = [Paragraph(_esc(title), st["title"])]
    meta = (f"Revision {revision or '–'} · {fig['time_zone']} calendar month · methodology "
            f"{fig['methodology_version']} · {fig['hours_with_data']} of "
            f"{fig['hours_in_month']} hours with data")
    story.append(Paragraph(_esc(present.window_line(fig)), st["body"]))
    story.append(Paragraph(_esc(meta), st["body"]))
    if not fig["closed"]:
        story.append(Paragraph("Provisional: the month had not ended when this was generated.",
                               st["banner"]))
    if fig["methodology"]["simulated"]:
        story.append(Paragraph("Includes simulated data: these figures are not measurements.",
                               st["banner"]))
    if not fig["hours_with_data"]:
        story.append(Paragraph("No telemetry for this month: every figure below is zero "
                               "because nothing ran or reported, not because it is unknown.",
                               st["banner"]))
    if difference:
        before = (f"revision {revision - 1}, generated before the month closed" if
                  previous_provisional else f"revision {revision - 1}")
        story.append(Paragraph(_esc(f"Restated: revision {revision} changes "
                                    f"{len(difference)} figure(s) of {before} "
                                    "(listed at the end)."), st["banner"]))
    story += _table(present.summary(fig), st, width)
    story.append(Spacer(1, 3 * mm))
    story += _charts(fig, width)
    for t in present.sections(fig)[1:]:
        parts = _table(t, st, width)
        # Short tables stay on one page with their heading; long ones may break.
        story += [KeepTogether(parts)] if len(t.rows) < 15 else parts
    story.append(Paragraph("Methodology", st["h2"]))
    for label, text in present.methodology(fig):
        story.append(Paragraph(f"<b>{_esc(label)}:</b> {_esc(text)}", st["body"]))
    if difference:
        story += _table(present.Table(
            "difference", f"Changes against revision {revision - 1}",
            ["Figure", "Before", "After", "Change"],
            [[d["figure"], _plain(d["before"]), _plain(d["after"]), _plain(d["change"])]
             for d in difference]), st, width)

    foot = ParagraphStyle("foot", parent=st["note"], fontSize=7, leading=8,
                          textColor=colors.HexColor("#777777"))

    def footer(canvas, doc_) -> None:
        canvas.saveState()
        # A Paragraph, not drawString: the team's name may need the CJK font.
        line = Paragraph(_esc(f"{title} · revision {revision or '–'}"), foot)
        line.wrapOn(canvas, PAGE[0] - 60 * mm, 10 * mm)
        line.drawOn(canvas, 14 * mm, 6 * mm)
        canvas.setFont(fonts.body_fonts()[0], 7)
        canvas.setFillColor(colors.HexColor("#777777"))
        canvas.drawRightString(PAGE[0] - 14 * mm, 7 * mm, f"page {doc_.page}")
        canvas.restoreState()

    doc.build(story, onFirstPage=footer, onLaterPages=footer)
    return buf.getvalue()


def _plain(value) -> str:
    if value is None:
        return present.UNKNOWN
    if isinstance(value, float):
        return f"{value:,.6g}"
    return str(value)
