"""Small inline SVG charts for the operators' page (`lakehouse.quality.dashboard`): no script, no
library, no network, so the page is one file that opens anywhere.

Both charts take categorical x labels (runs, minutes, batches) and named series of values aligned
with them (None: no value there).

>>> svg = line_chart("Pass rate", ["run 1", "run 2"], {"pass rate %": [90.0, 100.0]}, y_label="%")
>>> svg.startswith('<svg class="chart"') and svg.count("<circle") == 2
True
"""

from __future__ import annotations

import math
from html import escape
from typing import Mapping, Sequence

PALETTE = ("#2f6fb3", "#d9822b", "#3a9e5c", "#c23b3b", "#7b5ea7", "#8c6d31", "#d45fa0", "#5f7a8c")
WIDTH, HEIGHT = 560, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 34, 40


def _fmt(value: float) -> str:
    """A tick or tooltip number: whole numbers without decimals, others with up to two."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def _scale_max(values: Sequence[float]) -> float:
    """The top of the y axis: four gridline steps of a readable size (1, 2 or 5 times a power of
    ten, at least 1 when every value is whole) reaching the largest value.

    >>> [_scale_max(v) for v in ([3], [2, 1], [97.5, 100], [36000], [0.3], [])]
    [4.0, 4.0, 100.0, 40000.0, 0.4, 4.0]
    """
    top = max(values, default=0.0)
    whole = all(float(v).is_integer() for v in values)
    if top <= 0:
        return 4.0
    raw = top / 4
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw - 1e-12)
    if whole:
        step = max(1.0, math.ceil(step))
    return float(step * 4)


def _frame(title: str, y_label: str, top: float, labels: Sequence[str], legend: Sequence[str], body: list[str]) -> str:
    plot_h = HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<text x="{LEFT}" y="14" class="chart-title">{escape(title)}</text>',
    ]
    for i in range(5):  # gridlines and y ticks
        y = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{_fmt(top * i / 4)}</text>')
    parts.append(f'<text x="12" y="{TOP + plot_h / 2:.1f}" transform="rotate(-90 12 {TOP + plot_h / 2:.1f})" text-anchor="middle" class="tick">{escape(y_label)}</text>')
    shown = sorted({0, len(labels) // 2, len(labels) - 1}) if labels else []
    for i in shown:  # first, middle and last x labels (more would overlap), kept inside the plot
        half = 3.2 * len(labels[i])  # about half the label's width at the tick font
        x = min(max(_x(i, len(labels)), LEFT + half), WIDTH - RIGHT - half)
        parts.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle" class="tick">{escape(labels[i])}</text>')
    x, row = LEFT, 0
    for i, name in enumerate(legend):  # wraps onto more rows below the plot
        width = 24 + 6.5 * len(name)
        if x + width > WIDTH and x > LEFT:
            x, row = LEFT, row + 1
        y = HEIGHT - 14 + 16 * row
        parts.append(f'<rect x="{x:.1f}" y="{y}" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>')
        parts.append(f'<text x="{x + 14:.1f}" y="{y + 9}" class="legend">{escape(name)}</text>')
        x += width
    height = HEIGHT + 16 * row
    parts[0] = parts[0].replace(f'viewBox="0 0 {WIDTH} {HEIGHT}"', f'viewBox="0 0 {WIDTH} {height}"').replace(f'height="{HEIGHT}"', f'height="{height}"')
    return "\n".join(parts + body + ["</svg>"])


def _x(i: int, n: int) -> float:
    plot_w = WIDTH - LEFT - RIGHT
    return LEFT + plot_w * (i + 0.5) / max(n, 1)


def _y(value: float, top: float) -> float:
    plot_h = HEIGHT - TOP - BOTTOM
    return TOP + plot_h - plot_h * value / top


def line_chart(title: str, labels: Sequence[str], series: Mapping[str, Sequence[float | None]], y_label: str = "") -> str:
    """One polyline per series, a dot (with its value as tooltip) per point; gaps at None."""
    top = _scale_max([v for values in series.values() for v in values if v is not None])
    body: list[str] = []
    for s, (name, values) in enumerate(series.items()):
        color = PALETTE[s % len(PALETTE)]
        run: list[str] = []
        for i, v in enumerate(list(values) + [None]):
            if v is None:
                if len(run) > 1:
                    body.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(run)}"/>')
                run = []
                continue
            x, y = _x(i, len(labels)), _y(v, top)
            run.append(f"{x:.1f},{y:.1f}")
            body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"><title>{escape(name)} {escape(labels[i])}: {_fmt(v)}</title></circle>')
    return _frame(title, y_label, top, labels, list(series), body)


def stacked_bar_chart(title: str, labels: Sequence[str], series: Mapping[str, Sequence[float | None]], y_label: str = "") -> str:
    """One bar per label, its series stacked in order (a None counts as 0)."""
    totals = [sum((values[i] or 0) for values in series.values()) for i in range(len(labels))]
    top = _scale_max(totals)
    width = max(2.0, (WIDTH - LEFT - RIGHT) / max(len(labels), 1) * 0.7)
    body: list[str] = []
    for i, label in enumerate(labels):
        base = 0.0
        for s, (name, values) in enumerate(series.items()):
            v = values[i] or 0
            if v <= 0:
                continue
            y_top, y_bottom = _y(base + v, top), _y(base, top)
            body.append(
                f'<rect class="bar" x="{_x(i, len(labels)) - width / 2:.1f}" y="{y_top:.1f}" width="{width:.1f}" '
                f'height="{y_bottom - y_top:.1f}" fill="{PALETTE[s % len(PALETTE)]}"><title>{escape(name)} {escape(label)}: {_fmt(v)}</title></rect>'
            )
            base += v
    return _frame(title, y_label, top, labels, list(series), body)
