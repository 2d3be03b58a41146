// The seam between the platform-neutral API (index.ts) and the entries (node.ts, browser.ts).

import type { CallType, Calls } from "./protocol.js";
import type { InitOptions, RuntimeInfo } from "./types.js";

export type ModelCallType = Exclude<CallType, "init" | "stream">;

/** A generation under way (Backend.stream). */
export interface TokenStream {
  /** All the new tokens, once generation ended (by itself, or after {@link stop}). */
  readonly result: Promise<Int32Array>;
  /** Ends generation in the core after the token being made; `result` then resolves to the tokens so far. */
  stop(): void;
}

/** Serves model calls: directly on the caller's thread (Node) or through a Worker (browser). */
export interface Backend {
  call<K extends ModelCallType>(type: K, input: Calls[K]["in"]): Promise<Calls[K]["out"]>;
  /**
   * Generates token by token: `onToken` gets each new token as the core makes it, in order and never
   * synchronously inside this call, before `result` resolves. Between two tokens the core's thread is free,
   * so that a stop() or another call is served at once.
   */
  stream(input: Calls["stream"]["in"], onToken: (token: number) => void): TokenStream;
  /** The error that ended this backend (a crashed worker or core), or undefined while it serves calls. */
  failed(): Error | undefined;
}

export interface Platform {
  /** Loads the core and reports what runs. `threads` is already resolved and `relaxedSimd` checked. */
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

/**
 * Whether this engine runs relaxed SIMD: it validates a function of one `f32x4.relaxed_madd`. (The Worker
 * that hosts the core in a browser runs on the same engine as the page that asks.)
 */
export function hasRelaxedSimd(): boolean {
  // (func (param v128 v128 v128) (result v128) local.get 0 local.get 1 local.get 2 f32x4.relaxed_madd)
  const body = [0x00, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0xfd, 0x85, 0x02, 0x0b];
  const module = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x01, 0x60, 0x03, 0x7b, 0x7b, 0x7b, 0x01,
    0x7b, 0x03, 0x02, 0x01, 0x00, 0x0a, body.length + 2, 0x01, body.length, ...body];
  try {
    return typeof WebAssembly === "object" && WebAssembly.validate(new Uint8Array(module));
  } catch {
    return false;
  }
}

/** Whether to load the relaxed-SIMD build: as asked (runtime.ts has checked a `true`), else where it runs. */
export function useRelaxedSimd(options: InitOptions): boolean {
  return options.relaxedSimd ?? hasRelaxedSimd();
}
