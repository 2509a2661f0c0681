"""Unicode fonts for the report PDF, embedded from Debian's maintained font packages.

ReportLab's built-in Helvetica covers Latin-1 only: a team called "Équipe Δ", "Команда" or
"視覚チーム" came out as black boxes. The PDF now embeds
- DejaVu Sans (fonts-dejavu-core) for Latin with accents, Greek and Cyrillic, and
- Noto Sans CJK (fonts-noto-cjk) for Chinese, Japanese and Korean. Its outlines are CFF, which
  ReportLab cannot embed, so the few CJK characters a report uses are cut out of it with
  fontTools and their outlines converted to TrueType (quadratic) curves: a subset of some KB,
  made once per set of characters.
Fonts are looked for at Debian's paths, then under the usual font directories (other
distributions, /usr/local, REPORT_FONT_DIRS). Without DejaVu the PDF falls back to Helvetica and
says so in the log; without Noto CJK, CJK text uses ReportLab's built-in STSong-Light CID font,
which PDF viewers supply (not embedded).
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import re
from pathlib import Path

from fontTools import subset
from fontTools.pens.cu2quPen import Cu2QuPen
from fontTools.pens.ttGlyphPen import TTGlyphPen
from fontTools.ttLib import TTCollection, newTable
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.pdfbase.ttfonts import TTFont

log = logging.getLogger(__name__)

FONT_DIRS = ("/usr/share/fonts", "/usr/local/share/fonts", "/usr/share/fonts/truetype",
             os.path.expanduser("~/.fonts"), os.path.expanduser("~/.local/share/fonts"))
KNOWN = {  # file name -> Debian's path, searched first
    "DejaVuSans.ttf": "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf": "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",
    "NotoSansCJK-Regular.ttc": "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
}
SANS, SANS_BOLD = "GreenOpsSans", "GreenOpsSans-Bold"
CID_FALLBACK = "STSong-Light"

# Han, kana, Hangul, CJK punctuation and full-width forms: drawn with the CJK font.
CJK = re.compile(r"[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u30ff\u3130-\u318f\u3190-\u9fff"
                 r"\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0002fa1f]+")


def find(name: str) -> Path | None:
    """A font file by name: Debian's path, else the first found under FONT_DIRS and the
    directories in REPORT_FONT_DIRS (colon-separated)."""
    known = KNOWN.get(name)
    if known and os.path.exists(known):
        return Path(known)
    extra = [d for d in os.environ.get("REPORT_FONT_DIRS", "").split(":") if d]
    for base in (*extra, *FONT_DIRS):
        root = Path(base)
        if root.is_dir():
            for hit in root.rglob(name):
                return hit
    return None


@functools.cache
def body_fonts() -> tuple[str, str]:
    """(regular, bold) font names for the PDF: DejaVu Sans, registered once per process."""
    regular, bold = find("DejaVuSans.ttf"), find("DejaVuSans-Bold.ttf")
    if regular is None:
        log.warning("DejaVuSans.ttf not found (apt install fonts-dejavu-core): report PDFs "
                    "use Helvetica and draw non-Latin names as boxes")
        return "Helvetica", "Helvetica-Bold"
    pdfmetrics.registerFont(TTFont(SANS, str(regular)))
    pdfmetrics.registerFont(TTFont(SANS_BOLD, str(bold or regular)))
    pdfmetrics.registerFontFamily(SANS, normal=SANS, bold=SANS_BOLD, italic=SANS,
                                  boldItalic=SANS_BOLD)
    return SANS, SANS_BOLD


def cjk_chars(texts) -> str:
    """The distinct CJK characters in `texts`, sorted (the subset to cut)."""
    return "".join(sorted({c for t in texts for run in CJK.findall(t) for c in run}))


@functools.lru_cache(maxsize=64)
def cjk_font(chars: str) -> str:
    """A registered font name that draws `chars`: a TrueType subset of Noto Sans CJK, else
    ReportLab's built-in (not embedded) CID font."""
    source = find("NotoSansCJK-Regular.ttc")
    if source is not None:
        try:
            name = "GreenOpsCJK-" + hashlib.sha1(chars.encode()).hexdigest()[:12]
            pdfmetrics.registerFont(TTFont(name, io.BytesIO(_truetype_subset(source, chars))))
            return name
        except Exception:  # a font file of another layout: fall back rather than fail
            log.warning("could not cut a CJK subset from %s", source, exc_info=True)
    else:
        log.warning("NotoSansCJK-Regular.ttc not found (apt install fonts-noto-cjk): CJK "
                    "text uses the viewer's %s", CID_FALLBACK)
    pdfmetrics.registerFont(UnicodeCIDFont(CID_FALLBACK))
    return CID_FALLBACK


def _truetype_subset(path: Path, chars: str) -> bytes:
    """The glyphs of `chars` from a CFF-outline OpenType collection, as a TrueType font."""
    collection = TTCollection(str(path), lazy=True)
    # The Simplified Chinese face if the collection has one (its Han glyphs read naturally
    # for most names), else the first.
    font = next((f for f in collection.fonts if " SC" in f["name"].getDebugName(1) or ""),
                collection.fonts[0])
    options = subset.Options()
    options.layout_features = []
    options.notdef_outline = True
    options.name_IDs = ["*"]
    options.drop_tables += ["VORG", "vhea", "vmtx", "GSUB", "GPOS", "BASE", "DSIG"]
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=[ord(c) for c in chars])
    subsetter.subset(font)

    order = font.getGlyphOrder()
    glyph_set = font.getGlyphSet()
    glyphs = {}
    for name in order:
        pen = TTGlyphPen(glyph_set)
        glyph_set[name].draw(Cu2QuPen(pen, max_err=1.0, reverse_direction=True))
        glyphs[name] = pen.glyph()
    font["loca"] = newTable("loca")
    font["glyf"] = glyf = newTable("glyf")
    glyf.glyphOrder = order
    glyf.glyphs = glyphs
    del font["CFF "]
    glyf.compile(font)
    hmtx = font["hmtx"]
    for name, glyph in glyphs.items():
        if hasattr(glyph, "xMin"):
            hmtx[name] = (hmtx[name][0], glyph.xMin)
    maxp = font["maxp"] = newTable("maxp")
    maxp.tableVersion = 0x00010000
    for field in ("maxZones", "maxTwilightPoints", "maxStorage", "maxFunctionDefs",
                  "maxInstructionDefs", "maxStackElements", "maxSizeOfInstructions",
                  "maxComponentElements"):
        setattr(maxp, field, 1 if field == "maxZones" else 0)
    font["post"].formatType = 3.0
    font.sfntVersion = "\x00\x01\x00\x00"
    out = io.BytesIO()
    font.save(out)
    return out.getvalue()


def markup(escaped: str, cjk_name: str | None) -> str:
    """Paragraph markup (already XML-escaped) with each CJK run in the CJK font."""
    if not cjk_name:
        return escaped
    return CJK.sub(lambda m: f'<font name="{cjk_name}">{m.group(0)}</font>', escaped)
