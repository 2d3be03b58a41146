// The seam between the platform-neutral API (index.ts) and the entries (node.ts, browser.ts).

import type { CallType, Calls } from "./protocol.js";
import type { InitOptions, RuntimeInfo } from "./types.js";

export type ModelCallType = Exclude<CallType, "init">;

/** Serves model calls: directly on the caller's thread (Node) or through a Worker (browser). */
export interface Backend {
  call<K extends ModelCallType>(type: K, input: Calls[K]["in"]): Promise<Calls[K]["out"]>;
  /** The error that ended this backend (a crashed worker or core), or undefined while it serves calls. */
  failed(): Error | undefined;
}

export interface Platform {
  /** Loads the core and reports what runs. `threads` is already resolved. */
  load(options: InitOptions & { threads: number }): Promise<{ backend: Backend; info: RuntimeInfo }>;
  /** Default thread count: the logical cores, capped at 8. */
  defaultThreads(): number;
}

let current: Platform | undefined;

export function setPlatform(p: Platform): void {
  current = p;
}

export function getPlatform(): Platform {
  if (!current) throw new Error('qkv: import "qkv" (its node or browser entry), not an internal module');
  return current;
}

/** At most 8 threads: the small models qkv trains in a page do not scale past that. */
export const MAX_DEFAULT_THREADS = 8;
