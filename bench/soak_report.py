#!/usr/bin/env python3
"""Reads the soak CSVs (bench/soak.sh) and writes the report: RSS at step 1k and at the last step, the
slope of a least-squares line through the samples after warm-up (step >= 1000), and an SVG plot of the
curves. Standard library only (the plot is written as SVG by hand).

usage: soak_report.py NATIVE.csv NODE.csv OUT.md OUT.svg
"""
import csv
import sys

WARMUP = 1000


def read(path):
    try:
        with open(path) as f:
            return [r for r in csv.DictReader(f) if r.get("step", "").isdigit()]
    except FileNotFoundError:
        return []


def slope(points):
    """Least-squares slope of (x, y) points, or None with fewer than two."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else None


def summary(name, rows, key):
    pts = [(int(r["step"]), int(r[key])) for r in rows if int(r[key]) >= 0]
    if not pts:
        return f"| {name} | no samples | | | | |", pts
    at = dict(pts)
    last_step, last = pts[-1]
    ref = at.get(WARMUP)
    after = [(s, v) for s, v in pts if s >= WARMUP]
    k = slope(after)
    diff = f"{100.0 * (last - ref) / ref:+.2f}%" if ref else "n/a"
    per_k = f"{k * 1000 / 2**20:+.3f} MiB" if k is not None else "n/a"
    ref_text = f"{ref / 2**20:.1f} MiB" if ref else "n/a"
    return (f"| {name} | {ref_text} | {last / 2**20:.1f} MiB at step {last_step} | {diff} | {per_k} | {len(pts)} |",
            pts)


def svg(series, out):
    """One panel: each series' MiB against step, on shared axes."""
    W, H, L, R, T, B = 760, 420, 70, 20, 30, 50
    xs = [s for _, pts, _ in series for s, _ in pts] or [0, 1]
    ys = [v / 2**20 for _, pts, _ in series for _, v in pts] or [0, 1]
    x0, x1 = 0, max(xs) or 1
    y0, y1 = 0, max(ys) * 1.1 or 1
    px = lambda x: L + (W - L - R) * (x - x0) / (x1 - x0)
    py = lambda y: H - B - (H - T - B) * (y - y0) / (y1 - y0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<text x="{L}" y="18" font-size="14">qkv soak: resident memory (and wasm heap) every 100 steps</text>',
             f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
             f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>']
    for i in range(6):
        y = y0 + (y1 - y0) * i / 5
        parts.append(f'<text x="{L-6}" y="{py(y)+4:.1f}" text-anchor="end">{y:.0f}</text>')
        parts.append(f'<line x1="{L}" y1="{py(y):.1f}" x2="{W-R}" y2="{py(y):.1f}" stroke="#ddd"/>')
        x = x0 + (x1 - x0) * i / 5
        parts.append(f'<text x="{px(x):.1f}" y="{H-B+16}" text-anchor="middle">{x:.0f}</text>')
    parts.append(f'<text x="{(L+W-R)/2}" y="{H-10}" text-anchor="middle">training step</text>')
    parts.append(f'<text x="16" y="{(T+H-B)/2}" transform="rotate(-90 16 {(T+H-B)/2})" text-anchor="middle">MiB</text>')
    for k, (name, pts, color) in enumerate(series):
        if pts:
            path = " ".join(f"{px(s):.1f},{py(v / 2**20):.1f}" for s, v in pts)
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{path}"/>')
        parts.append(f'<rect x="{W-R-230}" y="{T+8+16*k}" width="12" height="3" fill="{color}"/>')
        parts.append(f'<text x="{W-R-212}" y="{T+12+16*k}">{name}</text>')
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    native_csv, node_csv, out_md, out_svg = sys.argv[1:5]
    native, node = read(native_csv), read(node_csv)
    lines = ["| run | RSS at step 1000 | at the last step | change | slope after step 1000, per 1000 steps | samples |",
             "| --- | --- | --- | --- | --- | --- |"]
    row, native_pts = summary("native RSS", native, "rss_bytes")
    lines.append(row)
    row, node_pts = summary("Node (wasm) RSS", node, "rss_bytes")
    lines.append(row)
    row, heap_pts = summary("Node wasm heap size", node, "heap_bytes")
    lines.append(row)
    row, used_pts = summary("Node wasm heap in use", node, "heap_used_bytes")
    lines.append(row)
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")
    svg([("native RSS", native_pts, "#1f77b4"), ("Node RSS", node_pts, "#d62728"),
         ("wasm heap size", heap_pts, "#2ca02c"), ("wasm heap in use", used_pts, "#9467bd")], out_svg)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
