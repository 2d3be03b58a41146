// checkBackend() in Node: the wasm core's CPU executor against plain loops, every op over ragged shapes, as the
// native BackendOps tests run it (ops/backend_check.cpp); in the browser the same sweep checks WebGPU
// (tests/e2e/webgpu.test.ts).
import { describe, expect, it } from "vitest";
import { checkBackend } from "../../web/dist/node.js";

describe("checkBackend", () => {
  it("finds every op of the wasm core within its bound of the reference loops", async () => {
    const check = await checkBackend();
    expect(check.backend).toBe("wasm");
    expect(check.against).toBe("reference");
    expect(check.results.length).toBeGreaterThan(500);
    const bad = check.results.filter((r) => !r.ok).map((r) => `${r.name}${r.detail} (error ${r.error}, tol ${r.tol})`);
    expect(bad).toEqual([]);
    // Exact outputs are exactly equal; the others are somewhere within their bound, not trivially 0 everywhere.
    expect(check.results.filter((r) => r.tol === 0).every((r) => r.error === 0)).toBe(true);
    expect(check.results.some((r) => r.tol > 0 && r.error > 0)).toBe(true);
  }, 300_000);

  it("checks the quantized-weight ops: the wasm SIMD128 kernels of gemm_quant, dequantize_rows and the embedding", async () => {
    const quant = await checkBackend({ group: "quant" });
    for (const op of ["gemm_quant", "dequantize_rows", "embedding_forward_quant"])
      expect(quant.results.some((r) => r.name.startsWith(`${op} `)), op).toBe(true);
    for (const f of ["f16", "bf16", "int8", "q4"]) expect(quant.results.some((r) => r.name.startsWith(`gemm_quant ${f} `)), f).toBe(true);
    const bad = quant.results.filter((r) => !r.ok).map((r) => `${r.name}${r.detail} (error ${r.error}, tol ${r.tol})`);
    expect(bad).toEqual([]);
  }, 300_000);

  it("runs one group, and names an unknown one", async () => {
    const gemm = await checkBackend({ group: "gemm" });
    expect(gemm.results.length).toBeGreaterThan(0);
    expect(gemm.results.filter((r) => !r.name.startsWith("gemm ")).map((r) => r.name)).toEqual([]);
    expect(gemm.results.filter((r) => !r.ok).map((r) => `${r.name}${r.detail} (error ${r.error}, tol ${r.tol})`)).toEqual([]);
    await expect(checkBackend({ group: "gem" })).rejects.toThrow(/group = "gem" is unknown: expected copies, gemm/);
  }, 300_000);
});
