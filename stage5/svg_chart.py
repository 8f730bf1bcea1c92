"""A very small SVG chart writer: panels with linear or log axes, lines, bars, markers and shaded spans.

The simulator redraws four plots on every control change and must stay well inside 100 ms on a slow laptop
or a shared Colab CPU. Matplotlib's Agg renderer takes hundreds of milliseconds for four panels there; this
writes the same picture as SVG text in a few milliseconds, and any browser draws it. It does only what the
simulator's panels need.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from itertools import count

import numpy as np

COLOURS = {"C0": "#1f77b4", "C1": "#ff7f0e", "C2": "#2ca02c", "C3": "#d62728", "grey": "#7f7f7f",
           "dark": "#444444", "light": "#dddddd"}
_ids = count()


@dataclass(frozen=True)
class Scale:
    """Data range [lo, hi] on a linear or log axis."""

    lo: float
    hi: float
    log: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)) or self.hi <= self.lo:
            raise ValueError(f"an axis needs finite lo < hi, got [{self.lo}, {self.hi}]")
        if self.log and self.lo <= 0:
            raise ValueError(f"a log axis needs lo > 0, got {self.lo}")

    def frac(self, v: np.ndarray | float) -> np.ndarray:
        """Position in [0, 1] along the axis (outside for values off the range)."""
        v = np.asarray(v, dtype=float)
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                return (np.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        return (v - self.lo) / (self.hi - self.lo)

    def ticks(self) -> list[float]:
        if self.log:
            first, last = math.ceil(math.log10(self.lo) - 1e-9), math.floor(math.log10(self.hi) + 1e-9)
            step = max(1, math.ceil((last - first + 1) / 6))
            return [10.0 ** e for e in range(first, last + 1, step)]
        raw = (self.hi - self.lo) / 5
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
        start = math.ceil(self.lo / step - 1e-9) * step
        return [start + i * step for i in range(int((self.hi - start) / step + 1e-9) + 1)]


def tick_label(v: float) -> str:
    """Short labels: 1, 20, 1.5, 2k, 10k, 1M."""
    a = abs(v)
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:.3g}"


@dataclass
class Panel:
    """One plot: a frame at (x, y) of size (w, h) pixels, its scales, and what has been drawn in it."""

    x: float
    y: float
    w: float
    h: float
    xs: Scale
    ys: Scale
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    ys2: Scale | None = None  # a second y scale on the right
    ylabel2: str = ""
    ylabel_colour: str = "dark"
    ylabel2_colour: str = "dark"
    xticks: list[tuple[float, str]] | None = None  # categorical axis (bars): (position, label)
    items: list[str] = field(default_factory=list)

    def _px(self, xv, yv, right: bool = False) -> tuple[np.ndarray, np.ndarray]:
        ys = self.ys2 if right and self.ys2 else self.ys
        return self.x + self.xs.frac(xv) * self.w, self.y + self.h - ys.frac(yv) * self.h

    def line(self, xv, yv, colour: str = "C0", width: float = 1.6, dash: str = "", right: bool = False) -> None:
        px, py = self._px(xv, yv, right)
        ok = np.isfinite(px) & np.isfinite(py)
        runs, run = [], []
        for a, b, good in zip(px, py, ok, strict=True):  # NaN breaks the line
            if good:
                run.append(f"{a:.1f},{b:.1f}")
            elif run:
                runs.append(run)
                run = []
        if run:
            runs.append(run)
        style = f' stroke-dasharray="{dash}"' if dash else ""
        for r in runs:
            self.items.append(f'<polyline points="{" ".join(r)}" fill="none" stroke="{COLOURS.get(colour, colour)}" '
                              f'stroke-width="{width}"{style}/>')

    def vline(self, xv: float, colour: str = "grey", dash: str = "4 3", width: float = 1.2) -> None:
        px = float(self.x + self.xs.frac(xv) * self.w)
        if math.isfinite(px):
            self.items.append(f'<line x1="{px:.1f}" y1="{self.y}" x2="{px:.1f}" y2="{self.y + self.h}" '
                              f'stroke="{COLOURS.get(colour, colour)}" stroke-width="{width}"'
                              + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")

    def hline(self, yv: float, colour: str = "grey", dash: str = "2 3") -> None:
        py = float(self.y + self.h - self.ys.frac(yv) * self.h)
        if math.isfinite(py):
            self.items.append(f'<line x1="{self.x}" y1="{py:.1f}" x2="{self.x + self.w}" y2="{py:.1f}" '
                              f'stroke="{COLOURS.get(colour, colour)}" stroke-dasharray="{dash}"/>')

    def xspan(self, x0: float, x1: float, colour: str = "light") -> None:
        a, b = (float(self.x + self.xs.frac(v) * self.w) for v in (x0, x1))
        a, b = max(a, self.x), min(b, self.x + self.w)
        if b > a:
            self.items.insert(0, f'<rect x="{a:.1f}" y="{self.y}" width="{b - a:.1f}" height="{self.h}" '
                                 f'fill="{COLOURS.get(colour, colour)}"/>')

    def point(self, xv: float, yv: float, colour: str = "C3", r: float = 5) -> None:
        px, py = (float(v) for v in self._px(xv, yv))
        if math.isfinite(px) and math.isfinite(py):
            self.items.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{r}" fill="{COLOURS.get(colour, colour)}"/>')

    def bar(self, xv: float, bottom: float, height: float, colour: str, width: float = 0.6) -> None:
        px0 = float(self.x + self.xs.frac(xv - width / 2) * self.w)
        px1 = float(self.x + self.xs.frac(xv + width / 2) * self.w)
        _, top = self._px(0, bottom + height)
        _, base = self._px(0, bottom)
        self.items.append(f'<rect x="{px0:.1f}" y="{float(top):.1f}" width="{px1 - px0:.1f}" '
                          f'height="{max(0.0, float(base - top)):.1f}" fill="{COLOURS.get(colour, colour)}"/>')

    def note(self, text: str, fx: float, fy: float, colour: str = "dark", anchor: str = "start") -> None:
        """Text at a fraction (fx, fy) of the frame, from its top left."""
        self.items.append(f'<text x="{self.x + fx * self.w:.1f}" y="{self.y + fy * self.h:.1f}" font-size="10" '
                          f'fill="{COLOURS.get(colour, colour)}" text-anchor="{anchor}">{html.escape(text)}</text>')

    def render(self) -> str:
        clip = f"clip{next(_ids)}"
        out = [f'<clipPath id="{clip}"><rect x="{self.x}" y="{self.y}" width="{self.w}" height="{self.h}"/>'
               "</clipPath>", f'<g clip-path="url(#{clip})">', *self.items, "</g>",
               f'<rect x="{self.x}" y="{self.y}" width="{self.w}" height="{self.h}" fill="none" stroke="#333"/>']
        xt = self.xticks if self.xticks is not None else [(v, tick_label(v)) for v in self.xs.ticks()]
        for v, label in xt:
            px = float(self.x + self.xs.frac(v) * self.w)
            out.append(f'<line x1="{px:.1f}" y1="{self.y + self.h}" x2="{px:.1f}" y2="{self.y + self.h + 4}" '
                       'stroke="#333"/>')
            out.append(f'<text x="{px:.1f}" y="{self.y + self.h + 15}" font-size="9" text-anchor="middle">'
                       f"{html.escape(label)}</text>")
        for scale, right in ((self.ys, False), (self.ys2, True)):
            if scale is None:
                continue
            edge = self.x + self.w if right else self.x
            for v in scale.ticks():
                py = float(self.y + self.h - scale.frac(v) * self.h)
                tick = 4 if right else -4
                out.append(f'<line x1="{edge}" y1="{py:.1f}" x2="{edge + tick}" y2="{py:.1f}" stroke="#333"/>')
                out.append(f'<text x="{edge + (7 if right else -7)}" y="{py + 3:.1f}" font-size="9" '
                           f'text-anchor="{"start" if right else "end"}">{tick_label(v)}</text>')
        out.append(f'<text x="{self.x + self.w / 2}" y="{self.y - 8}" font-size="11" text-anchor="middle" '
                   f'font-weight="bold">{html.escape(self.title)}</text>')
        out.append(f'<text x="{self.x + self.w / 2}" y="{self.y + self.h + 30}" font-size="10" '
                   f'text-anchor="middle">{html.escape(self.xlabel)}</text>')
        for label, right, colour in ((self.ylabel, False, self.ylabel_colour),
                                     (self.ylabel2, True, self.ylabel2_colour)):
            if label:
                lx = self.x + self.w + 44 if right else self.x - 42
                cy = self.y + self.h / 2
                out.append(f'<text x="{lx}" y="{cy}" font-size="10" text-anchor="middle" '
                           f'fill="{COLOURS.get(colour, colour)}" transform="rotate(-90 {lx} {cy})">'
                           f"{html.escape(label)}</text>")
        return "".join(out)


# Room around a panel's frame for its tick labels, axis labels and title (pixels): left, top, right, bottom.
MARGINS = (65, 30, 60, 40)


def svg_panels(panels: list[Panel], min_width: int = 340) -> str:
    """Each panel as its own SVG, cut out of the shared canvas by its viewBox, in a row that wraps: side by side
    where the column is wide enough, one under another on a phone. Each scales to its share of the column
    (never above the size drawn), so the labels stay legible instead of shrinking with the whole figure."""
    left, top, right, bottom = MARGINS
    cells = []
    for p in panels:
        w, h = p.w + left + right, p.h + top + bottom
        cells.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="{p.x - left} {p.y - top} {w} {h}" '
                     f'preserveAspectRatio="xMidYMid meet" font-family="sans-serif" '
                     f'style="display:block;flex:1 1 {min_width}px;max-width:{w}px;height:auto;background:#fff">'
                     f"{p.render()}</svg>")
    return f'<div class="stage5-plots" style="display:flex;flex-wrap:wrap;max-width:100%">{"".join(cells)}</div>'
