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
