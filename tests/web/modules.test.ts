// The package's modules form a tree: no import circle, types.ts at the bottom, so each module can be read
// (and loaded) knowing only what it imports. Type-only imports count: a circle of types is a circle to read.
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const src = fileURLToPath(new URL("../../web/src", import.meta.url));

function imports(file: string): string[] {
  const text = readFileSync(path.join(src, file), "utf8");
  const out: string[] = [];
  for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^;]*?\bfrom\s*["'](\.\/[^"']+)["']/g))
    out.push(m[1]!.replace(/^\.\//, "").replace(/\.js$/, ".ts"));
  return out;
}

describe("web/src modules", () => {
  const files = readdirSync(src).filter((f) => f.endsWith(".ts"));
  const graph = new Map(files.map((f) => [f, imports(f)]));

  it("import no circle", () => {
    const circles: string[] = [];
    const state = new Map<string, "open" | "done">();
    const visit = (f: string, trail: string[]) => {
      if (state.get(f) === "done") return;
      if (state.get(f) === "open") {
        circles.push([...trail.slice(trail.indexOf(f)), f].join(" -> "));
        return;
      }
      state.set(f, "open");
      for (const g of graph.get(f) ?? []) visit(g, [...trail, f]);
      state.set(f, "done");
    };
    for (const f of files) visit(f, []);
    expect(circles).toEqual([]);
  });

  it("have types.ts at the bottom, importing nothing of the package", () => {
    expect(graph.get("types.ts")).toEqual([]);
    expect(graph.get("version.ts")).toEqual([]);
  });

  it("found the imports they have", () => {
    expect(graph.get("model.ts")).toContain("tokenizer.ts");
    expect(graph.get("tokenizer.ts")).toContain("checkpoint.ts");
    expect(files.length).toBeGreaterThan(15);
  });
});
