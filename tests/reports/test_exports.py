"""Exports that are safe and whole (issue 30): CSV cells a spreadsheet would run are escaped
(OWASP, via defusedcsv); the PDF embeds DejaVu Sans and a Noto Sans CJK subset, so accented,
Greek, Cyrillic and CJK names are text in it; long tables and a cell naming every host of a
1,000-host team split across pages instead of failing with ReportLab's LayoutError."""

from __future__ import annotations

import csv
import io
import time
from collections import Counter

import pytest
from pypdf import PdfReader

from greenops.reports import csv_writer, month_figures, pdf_writer
from greenops.reports.month_figures import Month

NAMES = ["Équipe Ærø façade", "Ομάδα Δέλτα", "Команда Альфа", "視覚チーム", "한국어 팀",
         "数据中心"]
HOSTILE = ["=HYPERLINK(\"http://evil.example\",\"x\")", "+cmd|' /C calc'!A0", "-2+3",
           "@SUM(1+1)", "\tleading tab", "|pipe"]


def _text(pdf: bytes) -> str:
    reader = PdfReader(io.BytesIO(pdf))
    return " ".join(" ".join(p.extract_text() for p in reader.pages).split()), len(reader.pages)


def _fig_with_hosts(team, names: list[str]) -> dict:
    """A real month's figures (month_figures.month_figures) with one host row per name, copied
    from the shape the report writes for a host (costs and energies unknown: null)."""
    fig = month_figures.month_figures(team, Month(2026, 8))
    row = {"host": "", "provider": "aws", "region": "eu-west-3", "instance_type": "p4d.24xlarge",
           "purchase_option": "on_demand", "scope": "Scope 3 (cat. 1, cloud)", "site": "",
           "gpu_energy_kwh": 1.25, "cpu_ram_energy_kwh": None, "energy_kwh": 1.25,
           "facility_energy_kwh": -0.5, "co2e_kg": 0.5, "co2e_market_kg": None,
           "market_factor_source": "", "pue": 1.1, "pue_source": "", "intensity_g_per_kwh": 400,
           "intensity_source": "", "gpu_hours": 8.0, "gpu_util_pct": 50.0, "running_hours": 1.0,
           "billed_hours": 1.0, "cost_usd": 32.77, "price_source": "", "price_as_of": "",
           "price_problem": "", "idle_gpu_hours": 0.0, "idle_cost_usd": 0.0,
           "embodied_co2e_g_per_gpu_hour": None, "measurement": "measured (NVML counter)"}
    fig["hosts"] = [{**row, "host": n} for n in names]
    return fig


@pytest.fixture
def unicode_team(db):
    from greenops.teams.models import Team

    return Team.objects.create(name="視覚チーム Équipe Δ Команда", slug="vision-intl")


def test_csv_escapes_cells_a_spreadsheet_would_run(unicode_team):
    fig = _fig_with_hosts(unicode_team, HOSTILE + NAMES)
    data = csv_writer.write(fig)
    hosts = [r["host"] for r in csv.DictReader(io.StringIO(data.decode()))
             if r["row_type"] == "host"]
    # Each formula-looking name starts with ' (text in a spreadsheet); "-2+3" included, since
    # it is not a plain number; a | is escaped too. Plain names are untouched.
    assert hosts[:6] == ["'=HYPERLINK(\"http://evil.example\",\"x\")",
                         "'+cmd\\|' /C calc'!A0", "'-2+3", "'@SUM(1+1)", "'\tleading tab",
                         "'\\|pipe"]
    assert hosts[6:] == NAMES
    # Numbers, negative ones too, are numbers: the totals still read back.
    rows = list(csv.DictReader(io.StringIO(data.decode())))
    assert {r["facility_kwh"] for r in rows if r["row_type"] == "host"} == {"-0.5"}
    assert csv_writer.read_totals(data)["total"] is not None


def test_pdf_embeds_fonts_that_draw_every_script(unicode_team):
    fig = _fig_with_hosts(unicode_team, NAMES)
    pdf = pdf_writer.write(fig, revision=1)
    text, _ = _text(pdf)
    for name in [*NAMES, "視覚チーム Équipe Δ Команда"]:
        assert name in text, name
    # Embedded (FontFile2: TrueType), not the viewer's: DejaVu and the CJK subset.
    fonts = set()
    for page in PdfReader(io.BytesIO(pdf)).pages:
        for f in page["/Resources"]["/Font"].values():
            f = f.get_object()
            descriptor = f.get("/FontDescriptor")  # none: a base-14 font (never drawn here)
            if descriptor is not None and "/FontFile2" in descriptor.get_object():
                fonts.add(str(f["/BaseFont"]).split("+")[-1])
    assert {"DejaVuSans", "DejaVuSans-Bold"} <= fonts, fonts
    assert any(name.startswith("NotoSansCJK") for name in fonts), fonts


def test_a_1000_host_report_with_a_recommendation_naming_them_all_completes(unicode_team):
    names = [f"gpu-node-{i:04d}" for i in range(1000)]
    fig = _fig_with_hosts(unicode_team, names)
    fig["recommendations"]["items"] = [{
        "kind": "shut_idle", "subject": "1,000 idle hosts", "monthly_usd_saved": 12345.0,
        "reasoning": "Idle all month: " + ", ".join(names)}]
    started = time.monotonic()
    pdf = pdf_writer.write(fig, revision=1)  # raised LayoutError for ~300 names
    elapsed = time.monotonic() - started
    text, pages = _text(pdf)
    # The reasoning cell names all 1,000 (~16,000 characters), continued over rows that
    # split across pages; the host table lists the top hosts by cost (present.hosts' limit).
    assert pages >= 5, pages
    for i in (0, 1, 499, 500, 998, 999):
        assert f"gpu-node-{i:04d}" in text, i
    data = csv_writer.write(fig)
    # Header, total, 1,000 host rows, the workload and job rows, and the explicit "not
    # attributed" rows (hosts, workloads) that make the rows add up to the total (issue 29).
    kinds = Counter(r["row_type"] for r in csv.DictReader(io.StringIO(data.decode())))
    assert kinds["host"] == 1000 and kinds["total"] == 1
    assert data.decode().count("\r\n") == (1 + 1 + 1000 + len(fig["workloads"]) + len(fig["jobs"])
                                           + kinds["not_attributed"])
    assert kinds["not_attributed"] == 2
    print(f"1,000-host PDF: {pages} pages, {len(pdf) / 1024:.0f} KiB in {elapsed:.1f} s")
