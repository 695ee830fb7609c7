"""Rates over the last minutes as charts drawn on the server: an SVG line per series, in
the page itself (no script, no library to load, nothing from the network)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from fmq.console.sampler import Rate

WIDTH, HEIGHT = 560, 120
#: Left margin for the scale's labels, bottom margin for the time labels.
LEFT, BOTTOM = 56, 18
COLOURS = ("#2b6cb0", "#c05621", "#2f855a")


@dataclass(frozen=True)
class Series:
    label: str
    rates: Sequence[Rate]


def _number(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def line_chart(chart_id: str, title: str, series: Sequence[Series], span_ms: int) -> Markup:
    """An SVG chart of ``series`` over the last ``span_ms`` (the newest sample at the right
    edge); each series' last value is in the legend, so the page reads without the chart."""
    ends = [r.at_ms for s in series for r in s.rates]
    top = max([r.value for s in series for r in s.rates] + [1.0])
    right = max(ends) if ends else 0
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - BOTTOM - 6
    parts = [f'<svg class="chart" id="{escape(chart_id)}" role="img" viewBox="0 0 {WIDTH} '
             f'{HEIGHT}" width="{WIDTH}" height="{HEIGHT}"><title>{escape(title)}</title>',
             f'<line x1="{LEFT}" y1="6" x2="{LEFT}" y2="{6 + plot_h}" class="axis"/>',
             f'<line x1="{LEFT}" y1="{6 + plot_h}" x2="{WIDTH - 4}" y2="{6 + plot_h}" '
             f'class="axis"/>',
             f'<text x="{LEFT - 4}" y="12" text-anchor="end">{_number(top)}/s</text>',
             f'<text x="{LEFT - 4}" y="{6 + plot_h}" text-anchor="end">0</text>',
             f'<text x="{LEFT}" y="{HEIGHT - 3}">−{span_ms // 60_000} min</text>',
             f'<text x="{WIDTH - 4}" y="{HEIGHT - 3}" text-anchor="end">now</text>']
    legend = []
    for n, s in enumerate(series):
        colour = COLOURS[n % len(COLOURS)]
        points = " ".join(
            f"{LEFT + plot_w * (1 - (right - r.at_ms) / span_ms):.1f},"
            f"{6 + plot_h * (1 - r.value / top):.1f}"
            for r in s.rates if right - r.at_ms <= span_ms)
        if points:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" '
                         f'points="{points}"/>')
        last = _number(s.rates[-1].value) + "/s" if s.rates else "no sample yet"
        legend.append(f'<span class="legend" style="color:{colour}">{escape(s.label)}: '
                      f'<span class="last">{last}</span></span>')
    parts.append("</svg>")
    return Markup(f'<figure class="chart"><figcaption>{escape(title)}</figcaption>'
                  f'{"".join(parts)}<div>{" ".join(legend)}</div></figure>')
