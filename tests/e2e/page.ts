// What the e2e pages that compute and report share: running one page to its `window.__result`, and comparing
// the WebGPU executor's floats with the wasm core's.
import type { BrowserContext, Page } from "playwright-core";
import { expect } from "vitest";

/**
 * Opens `url` in a new page of `context` (after `before`, e.g. an init script), waits for the page to set
 * `window.__result`, and returns it. A page error, or a result with an `error`, fails the test.
 */
export async function pageResult(
  context: BrowserContext,
  url: string,
  options: { timeout: number; polling: number; before?: (page: Page) => Promise<unknown> },
): Promise<Record<string, unknown>> {
  const page = await context.newPage();
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  try {
    if (options.before) await options.before(page);
    await page.goto(url);
    await page.waitForFunction(() => "__result" in window, null, { timeout: options.timeout, polling: options.polling });
    const r = (await page.evaluate(() => (window as unknown as { __result: Record<string, unknown> }).__result)) as Record<string, unknown>;
    expect(r.error).toBeUndefined();
    expect(errors).toEqual([]);
    return r;
  } finally {
    await page.close();
  }
}

/** |got - want| <= tol * max(1, |want|), element by element (got: WebGPU's, want: the wasm core's), naming the first that is not. */
export function expectClose(got: unknown, want: unknown, tol: number, what: string): void {
  const g = got as number[], w = want as number[];
  expect(g.length, what).toBe(w.length);
  for (let i = 0; i < w.length; i++) {
    const bound = tol * Math.max(1, Math.abs(w[i]!));
    if (!(Math.abs(g[i]! - w[i]!) <= bound)) expect.fail(`${what}[${i}]: webgpu ${g[i]}, wasm ${w[i]} (bound ${bound})`);
  }
}
