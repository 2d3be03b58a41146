// Live loss curves with uPlot: one x (the step) and a few series; a series may skip steps (validation is
// measured every N steps), and uPlot joins its points across the gaps.
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export interface Series {
  label: string;
  stroke: string;
  width?: number;
  /** Draw points (for sparse series such as validation). */
  points?: boolean;
}

export interface LiveChart {
  /** Appends one x with a value per series (null: no value at this x). */
  push(x: number, values: readonly (number | null)[]): void;
  clear(): void;
}

export function liveChart(el: HTMLElement, yLabel: string, series: readonly Series[], height = 240): LiveChart {
  let data: (number | null)[][] = [[], ...series.map(() => [])];
  const width = () => Math.max(260, el.clientWidth || 600);
  const plot = new uPlot(
    {
      width: width(),
      height,
      scales: { x: { time: false } },
      axes: [{ label: "step" }, { label: yLabel }],
      series: [
        { label: "step" },
        ...series.map((s) => ({
          label: s.label,
          stroke: s.stroke,
          width: s.width ?? 2,
          spanGaps: true,
          points: { show: s.points ?? false, size: 6 },
        })),
      ],
    },
    data as uPlot.AlignedData,
    el,
  );
  // Follow the container's width (rotating a phone, resizing a window).
  new ResizeObserver(() => plot.setSize({ width: width(), height })).observe(el);
  let queued = false;
  const redraw = () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      plot.setData(data as uPlot.AlignedData);
    });
  };
  return {
    push(x, values) {
      data[0]!.push(x);
      series.forEach((_, i) => data[i + 1]!.push(values[i] ?? null));
      redraw();
    },
    clear() {
      data = [[], ...series.map(() => [])];
      redraw();
    },
  };
}
