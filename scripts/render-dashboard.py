#!/usr/bin/env python3
"""Render deploy/grafana/zarrgate.json to a PNG, from a live Prometheus.

Grafana cannot run here, so this draws what Grafana would: for every panel
of the dashboard it runs the panel's queries through Prometheus's HTTP API
(/api/v1/query_range, the dashboard's template variables replaced: $job and
$instance by ".+" as "All" does, $__rate_interval by --rate-interval) and
draws the series in the dashboard's grid (24 columns, rows of gridPos.h),
in a dark Grafana-like style with titles, legends and units.

How docs/img/dashboard.png was made (scripts/render-dashboard.sh does all
of it): Debian's prometheus 2.42 (apt-get install prometheus) scraping, every
5 s, a gateway (--shared-memory, --memory-limit 512MiB), a store worker over
a directory and a codec worker, all on 127.0.0.1 with --admin-listen; a
load of slab writes and reads (scripts/dashboard-load.go: 2, then 6, 3 and
10 concurrent callers, ~5 minutes) through the Go client; then

    ~/.cache/zarrgate/venv-client/bin/python scripts/render-dashboard.py \\
        --prometheus http://127.0.0.1:59090 --minutes 5 -o docs/img/dashboard.png

Needs matplotlib (pip install matplotlib; it is not a test requirement).
"""

import argparse
import json
import math
import re
import sys
import time
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, MultipleLocator  # noqa: E402

BG = "#111217"
PANEL = "#181b1f"
BORDER = "#2c3235"
TEXT = "#ccccdc"
DIM = "#8e8e9a"
GRID = "#2a2d33"
# Grafana's classic palette.
COLORS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2",
          "#b877d9", "#705da0", "#37872d", "#fade2a", "#447ebc", "#c15c17",
          "#890f02", "#0a437c", "#6d1f62", "#584477"]


def query_range(base, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{q}", timeout=60) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def substitute(expr, rate_interval):
    expr = expr.replace("$__rate_interval", rate_interval)
    expr = re.sub(r"\$\{?(job|instance)\}?", ".+", expr)
    if "$" in expr:
        raise ValueError(f"a template variable this script does not know: {expr}")
    return expr


def legend(fmt, labels):
    if not fmt:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()


def scale(unit):
    """A tick formatter for a Grafana unit."""
    def si(v, units, base):
        a = abs(v)
        for i in range(len(units) - 1, -1, -1):
            if a >= base ** i or i == 0:
                x = v / base ** i
                return f"{x:.3g} {units[i]}".strip()
    if unit == "bytes":
        return lambda v, _: si(v, ["B", "KiB", "MiB", "GiB", "TiB"], 1024)
    if unit == "Bps":
        return lambda v, _: si(v, ["B/s", "KiB/s", "MiB/s", "GiB/s"], 1024)
    if unit == "percentunit":
        return lambda v, _: f"{v * 100:.3g}%"
    if unit == "s":
        def sec(v, _):
            a = abs(v)
            if a == 0:
                return "0"
            if a < 1e-3:
                return f"{v * 1e6:.3g} µs"
            if a < 1:
                return f"{v * 1e3:.3g} ms"
            return f"{v:.3g} s"
        return sec
    suffix = {"reqps": " req/s", "ops": " ops/s", "cps": " c/s"}.get(unit, "")

    def short(v, _):
        x = si(v, ["", "K", "M", "G"], 1000)
        return x + suffix
    return short


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dashboard", default="deploy/grafana/zarrgate.json")
    ap.add_argument("--prometheus", default="http://127.0.0.1:59090")
    ap.add_argument("--minutes", type=float, default=5, help="the time range: the last N minutes")
    ap.add_argument("--end", type=float, help="end of the range (Unix seconds; default now)")
    ap.add_argument("--step", type=float, default=5)
    ap.add_argument("--rate-interval", default="30s", help="what $__rate_interval becomes")
    ap.add_argument("--width", type=float, default=20, help="inches (at --dpi)")
    ap.add_argument("--dpi", type=int, default=90)
    ap.add_argument("-o", "--output", default="docs/img/dashboard.png")
    args = ap.parse_args()

    with open(args.dashboard) as f:
        dash = json.load(f)
    panels = []
    for p in dash["panels"]:
        panels.append(p)
        panels.extend(p.get("panels", []))  # a collapsed row's panels
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    end = args.end or time.time()
    start = end - args.minutes * 60

    unit_px = 30  # Grafana's grid: one unit of height is 30 px
    col_in = args.width / 24
    row_in = unit_px / 1500 * args.width  # the same aspect as a 1500 px wide Grafana
    fig = plt.figure(figsize=(args.width, rows * row_in + 0.6), dpi=args.dpi, facecolor=BG)
    H = rows * row_in + 0.6

    def rect(gp):
        pad = 0.06
        x0 = gp["x"] * col_in + pad
        w = gp["w"] * col_in - 2 * pad
        top = 0.6 + gp["y"] * row_in + pad
        h = gp["h"] * row_in - 2 * pad
        return [x0 / args.width, 1 - (top + h) / H, w / args.width, h / H]

    fig.text(0.006, 1 - 0.3 / H, f"{dash['title']}   ·   job: All   instance: All   ·   last {args.minutes:g} min "
             f"({time.strftime('%H:%M', time.gmtime(start))}–{time.strftime('%H:%M', time.gmtime(end))} UTC)",
             color=TEXT, fontsize=13, va="center", weight="bold")
    empty = []
    for p in panels:
        gp = p["gridPos"]
        if p["type"] == "row":
            fig.text(rect(gp)[0], rect(gp)[1] + rect(gp)[3] / 2, "▾ " + p["title"], color=TEXT,
                     fontsize=12, weight="bold", va="center")
            continue
        x0, y0, w, h = rect(gp)
        # The panel: a box, its title, then the plot inside.
        box = fig.add_axes([x0, y0, w, h])
        box.set_facecolor(PANEL)
        box.set_xticks([])
        box.set_yticks([])
        for s in box.spines.values():
            s.set_color(BORDER)
        box.text(0.01, 0.985, p["title"], transform=box.transAxes, color=TEXT, fontsize=10.5,
                 weight="bold", va="top")
        series = []
        for t in p.get("targets", []):
            expr = substitute(t["expr"], args.rate_interval)
            for r in query_range(args.prometheus, expr, start, end, args.step):
                pts = [(float(ts), float(v)) for ts, v in r["values"]]
                pts = [(ts, v) for ts, v in pts if math.isfinite(v)]
                if pts:
                    series.append((legend(t.get("legendFormat", ""), r["metric"]), pts))
        if not series:
            empty.append(p["title"])
        n_leg = len(series)
        leg_cols = 2 if n_leg > 4 and gp["w"] >= 8 else 1
        leg_rows = min(math.ceil(n_leg / leg_cols), 5)
        leg_h = (leg_rows * 0.15 + 0.05) / (h * H)
        ax = fig.add_axes([x0 + w * 0.115, y0 + h * (leg_h + 0.1), w * 0.87, h * (0.8 - leg_h - 0.1)])
        ax.set_facecolor(PANEL)
        for s in ax.spines.values():
            s.set_visible(False)
        ax.grid(True, color=GRID, linewidth=0.6)
        ax.tick_params(colors=DIM, labelsize=8, length=0)
        defaults = p.get("fieldConfig", {}).get("defaults", {})
        ax.yaxis.set_major_formatter(FuncFormatter(scale(defaults.get("unit", "short"))))
        ax.yaxis.set_major_locator(MaxNLocator(4))
        ax.xaxis.set_major_locator(MultipleLocator(60 * max(1, round(args.minutes / 6))))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: time.strftime("%H:%M", time.gmtime(v))))
        ax.set_xlim(start, end)
        handles = []
        top = 0
        # The legend as Grafana's sorted by mean, largest first; series
        # that were zero throughout (every gRPC code is created at zero)
        # are drawn but left out of it.
        series.sort(key=lambda s: (-sum(v for _, v in s[1]) / len(s[1]), s[0]))
        for i, (name, pts) in enumerate(series):
            xs, ys = zip(*pts)
            c = COLORS[i % len(COLORS)]
            (ln,) = ax.plot(xs, ys, color=c, linewidth=1.2, label=name)
            ax.fill_between(xs, ys, color=c, alpha=0.08, linewidth=0)
            if any(v != 0 for v in ys):
                handles.append(ln)
            top = max(top, max(ys))
        lo = defaults.get("min", None)
        hi = defaults.get("max", None)
        ax.set_ylim(bottom=lo if lo is not None else None,
                    top=hi if hi is not None and top <= hi else (top * 1.15 if top > 0 else 1))
        if not series:
            ax.text(0.5, 0.5, "No data", transform=ax.transAxes, color=DIM, ha="center", va="center")
        if handles:
            shown = handles[: leg_rows * leg_cols]
            more = len(handles) - len(shown)
            fig.legend(handles=shown, loc="lower left", ncol=leg_cols, frameon=False,
                             bbox_to_anchor=(x0 + w * 0.01, y0 + h * 0.01), fontsize=7.5,
                             labelcolor=TEXT, handlelength=1.2, columnspacing=1.0,
                             borderaxespad=0, labelspacing=0.25)
            if more:
                box.text(0.99, 0.02, f"+{more} more", transform=box.transAxes, color=DIM,
                         fontsize=7.5, ha="right", va="bottom")
    fig.savefig(args.output, dpi=args.dpi, facecolor=BG)
    # A palette of 96 colours keeps the PNG small (the docs hold it).
    from PIL import Image
    Image.open(args.output).convert("RGB").quantize(colors=96, method=Image.Quantize.MEDIANCUT).save(
        args.output, optimize=True)
    print(f"wrote {args.output}: {len(panels)} panels, {len(empty)} without data {empty}")


if __name__ == "__main__":
    sys.exit(main())
