// Attention maps on a plain canvas: one cell per (query, key) pair, token labels on both axes and a colour
// legend. Attention weights are probabilities, so the scale is fixed at [0, 1]: maps stay comparable
// across heads, layers and training steps.

/** How a token shows as an axis label: invisible characters get a visible stand-in. */
export function tokenLabel(t: string): string {
  if (t === " ") return "␣";
  if (t === "\n") return "⏎";
  if (t === "\t") return "⇥";
  return t;
}

/** Sequential blue scale (ColorBrewer "Blues" end points): 0 is near white, 1 dark blue. */
export function colour(v: number): string {
  const x = Math.min(1, Math.max(0, v));
  const lo = [247, 251, 255];
  const hi = [8, 48, 107];
  const c = lo.map((l, i) => Math.round(l + (hi[i]! - l) * x));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

export interface HeatmapOptions {
  /** Row labels (queries), one per row. */
  rows: readonly string[];
  /** Column labels (keys), one per column. */
  cols: readonly string[];
  /** Axis titles. */
  rowTitle: string;
  colTitle: string;
}

/** The last map drawn on each canvas, to redraw it at a new width. */
const drawn = new WeakMap<HTMLCanvasElement, { weights: Float32Array; o: HeatmapOptions; width: number }>();

/**
 * Draws `weights` (rows × cols, row-major) into `canvas`, sized to its container's width, and draws it again
 * when that width changes (a rotated phone, a resized window). Throws naming the argument when the sizes
 * disagree.
 */
export function drawHeatmap(canvas: HTMLCanvasElement, weights: Float32Array, o: HeatmapOptions): void {
  const box = canvas.parentElement;
  if (box && !drawn.has(canvas)) {
    new ResizeObserver(() => {
      const last = drawn.get(canvas);
      if (last && box.clientWidth > 0 && box.clientWidth !== last.width) draw(canvas, last.weights, last.o);
    }).observe(box);
  }
  draw(canvas, weights, o);
}

function draw(canvas: HTMLCanvasElement, weights: Float32Array, o: HeatmapOptions): void {
  const R = o.rows.length;
  const C = o.cols.length;
  if (weights.length !== R * C) {
    throw new Error(`weights.length = ${weights.length}: expected rows × cols = ${R} × ${C} = ${R * C}`);
  }
  const ctx = canvas.getContext("2d");
  if (!ctx) throw new Error("canvas: no 2D context");
  const font = "12px ui-monospace, SFMono-Regular, Menlo, monospace";
  ctx.font = font;
  const labelW = Math.max(...o.rows.map((r) => ctx.measureText(r).width), 8) + 22;
  const legendW = 56;
  const boxWidth = canvas.parentElement?.clientWidth ?? 0;
  drawn.set(canvas, { weights, o, width: boxWidth });
  const cssWidth = Math.max(200, boxWidth || 400);
  // Cells are square, at most 32 px, and the whole map fits the width (a phone gets small cells).
  const cell = Math.max(6, Math.min(32, Math.floor((cssWidth - labelW - legendW - 8) / Math.max(C, 1))));
  // Column labels wider than a cell (words) are written at 45 degrees, which needs more room above.
  const colW = Math.max(...o.cols.map((c) => ctx.measureText(c).width), 0);
  const slanted = colW > cell - 4;
  const top = slanted ? 28 + Math.ceil(colW * Math.SQRT1_2) : 40;
  const cssHeight = top + cell * R + 8;
  const dpr = window.devicePixelRatio || 1;
  canvas.style.width = `${cssWidth}px`;
  canvas.style.height = `${cssHeight}px`;
  canvas.width = Math.round(cssWidth * dpr);
  canvas.height = Math.round(cssHeight * dpr);
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, cssWidth, cssHeight);
  ctx.font = font;

  for (let r = 0; r < R; r++) {
    for (let c = 0; c < C; c++) {
      ctx.fillStyle = colour(weights[r * C + c]!);
      ctx.fillRect(labelW + c * cell, top + r * cell, cell, cell);
    }
  }
  ctx.strokeStyle = "#c8ccd4";
  ctx.strokeRect(labelW - 0.5, top - 0.5, C * cell + 1, R * cell + 1);

  // Labels, skipped when the cells are too small to hold them.
  ctx.fillStyle = "#1d2330";
  ctx.textBaseline = "middle";
  if (cell >= 10) {
    ctx.textAlign = "right";
    o.rows.forEach((l, r) => ctx.fillText(l, labelW - 6, top + r * cell + cell / 2));
    if (slanted) {
      ctx.textAlign = "left";
      o.cols.forEach((l, c) => {
        ctx.save();
        ctx.translate(labelW + c * cell + cell / 2, top - 6);
        ctx.rotate(-Math.PI / 4);
        ctx.fillText(l, 0, 0);
        ctx.restore();
      });
    } else {
      ctx.textAlign = "center";
      o.cols.forEach((l, c) => ctx.fillText(l, labelW + c * cell + cell / 2, top - 10));
    }
  }
  ctx.fillStyle = "#666";
  ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "left";
  ctx.fillText(`${o.colTitle} →`, labelW, 12);
  ctx.save();
  ctx.translate(10, top + (R * cell) / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.textAlign = "center";
  ctx.fillText(`${o.rowTitle} →`, 0, 0);
  ctx.restore();

  // Legend: the scale from 0 (bottom) to 1 (top).
  const lx = labelW + C * cell + 14;
  const lh = Math.max(40, Math.min(R * cell, 160));
  const grad = ctx.createLinearGradient(0, top + lh, 0, top);
  grad.addColorStop(0, colour(0));
  grad.addColorStop(0.5, colour(0.5));
  grad.addColorStop(1, colour(1));
  ctx.fillStyle = grad;
  ctx.fillRect(lx, top, 12, lh);
  ctx.strokeRect(lx - 0.5, top - 0.5, 13, lh + 1);
  ctx.fillStyle = "#444";
  ctx.textAlign = "left";
  ctx.fillText("1", lx + 16, top + 4);
  ctx.fillText("0.5", lx + 16, top + lh / 2);
  ctx.fillText("0", lx + 16, top + lh - 4);
  canvas.setAttribute(
    "aria-label",
    `Attention heatmap, ${R} ${o.rowTitle} by ${C} ${o.colTitle}; darker is more attention (scale 0 to 1).`,
  );
}
