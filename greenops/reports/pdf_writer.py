"""The report as a PDF, rendered offline with ReportLab (pip only: no system libraries, no
browser) from a report's stored figures, through the same text rows as the page (present.py)."""

from __future__ import annotations

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

from greenops import charts
from greenops.reports import present

GREEN = colors.HexColor(charts.colour(0))  # the house chart colour (greenops/charts.py)
GREY = colors.HexColor("#f1f3f2")
PAGE = landscape(A4)


def _styles() -> dict:
    base = getSampleStyleSheet()
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


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _table(t: present.Table, st: dict, width: float) -> list:
    out: list = [Paragraph(_esc(t.title), st["h2"])]
    if not t.rows:
        out.append(Paragraph(_esc(t.empty), st["body"]))
    else:
        data = [[Paragraph(f"<b>{_esc(h)}</b>", st["cell"]) for h in t.headers]]
        data += [[Paragraph(_esc(c), st["cell"]) for c in r] for r in t.rows]
        table = Table(data, repeatRows=1, colWidths=_widths(t, width))
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
        cells = [len(r[i]) for r in t.rows] + [min(len(header), 14)]
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


def write(fig: dict, revision: int | None = None, difference: list | None = None,
          previous_provisional: bool = False) -> bytes:
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

    def footer(canvas, doc_) -> None:
        canvas.saveState()
        canvas.setFont("Helvetica", 7)
        canvas.setFillColor(colors.HexColor("#777777"))
        canvas.drawString(14 * mm, 7 * mm, f"{title} · revision {revision or '–'}")
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
