// Small DOM helpers shared by the tabs.

/** The element matching `sel`; throws naming it when the page lacks it (a broken page fails loudly). */
export function $<T extends HTMLElement = HTMLElement>(sel: string): T {
  const el = document.querySelector<T>(sel);
  if (!el) throw new Error(`the page has no element ${sel}`);
  return el;
}

export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** Fills a <dl> with key/value pairs. */
export function facts(dl: HTMLElement, entries: Record<string, string | number>): void {
  dl.replaceChildren();
  for (const [k, v] of Object.entries(entries)) {
    // A <div> per pair (allowed in a <dl>) so that the stats can lay out as cards.
    const div = document.createElement("div");
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = String(v);
    div.append(dt, dd);
    dl.append(div);
  }
}

/** The number in input `sel`; throws naming the field and the range when it is not a number in [lo, hi]. */
export function numberInput(sel: string, lo: number, hi: number): number {
  const el = $<HTMLInputElement>(sel);
  const v = Number(el.value);
  if (el.value.trim() === "" || !Number.isFinite(v) || v < lo || v > hi) {
    const name = el.closest("label")?.textContent?.trim().split(/\s+/)[0] ?? sel;
    throw new Error(`${name} = ${JSON.stringify(el.value)}: expected a number in [${lo}, ${hi}]`);
  }
  return v;
}

/** Fills a <select> with 0..n-1, keeping the current choice where it still exists. */
export function indexOptions(select: HTMLSelectElement, n: number, label: (i: number) => string): void {
  const keep = Number(select.value) || 0;
  select.replaceChildren(
    ...Array.from({ length: n }, (_, i) => {
      const o = document.createElement("option");
      o.value = String(i);
      o.textContent = label(i);
      return o;
    }),
  );
  select.value = String(keep < n ? keep : 0);
}
