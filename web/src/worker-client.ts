// The browser side of the Worker protocol (protocol.ts): sends requests, matches replies by id, and
// detects a crashed Worker. Kept apart from browser.ts (which starts the Worker) so that it depends on no
// browser global and its failure handling is tested in Node with a stand-in Worker (tests/web).

import type { CallType, Calls, CancelRequest, Request, Response } from "./protocol.js";
import type { Backend, TokenStream } from "./platform.js";

/** What the client needs of a Worker: the DOM Worker has it, and so does a test's stand-in. */
export interface WorkerLike {
  onmessage: ((e: MessageEvent<Response>) => void) | null;
  onerror: ((e: ErrorEvent) => void) | null;
  onmessageerror: ((e: MessageEvent) => void) | null;
  postMessage(message: unknown, transfer?: Transferable[]): void;
  terminate(): void;
}

/** Sends requests to the worker and matches replies by id. */
export class WorkerClient implements Backend {
  private nextId = 1;
  private readonly pending = new Map<
    number,
    { resolve: (out: unknown) => void; reject: (e: Error) => void; onToken?: (token: number) => void }
  >();
  private failure: Error | undefined;

  constructor(private readonly worker: WorkerLike) {
    worker.onmessage = (e: MessageEvent<Response>) => {
      const r = e.data;
      const p = this.pending.get(r.id);
      if (!p) return;
      if ("token" in r) {
        p.onToken?.(r.token); // a stream's token: its reply comes later
        return;
      }
      this.pending.delete(r.id);
      if ("err" in r) {
        // The same class as in Node (a wrong JS type is a TypeError), the name as thrown.
        const err = r.err.name === "TypeError" ? new TypeError(r.err.message) : new Error(r.err.message);
        err.name = r.err.name;
        p.reject(err);
        // A trap or abort in the core: this call failed with it, and the core can no longer be trusted.
        if (r.err.fatal) this.fail(new Error(r.err.message));
      } else {
        p.resolve(r.out);
      }
    };
    worker.onerror = (e: ErrorEvent) => {
      e.preventDefault();
      this.fail(
        new Error(
          `qkv: the core's worker crashed (${e.message || "the worker script could not be loaded"}); ` +
            "the models it held are lost. Call init() again to start a new worker",
        ),
      );
    };
    worker.onmessageerror = () => this.fail(new Error("qkv: a message from the core's worker could not be read"));
  }

  /** The error that ended this worker, or undefined while it serves calls. */
  failed(): Error | undefined {
    return this.failure;
  }

  /**
   * Ends the worker: its pending calls and every later call reject with `e`. The worker is terminated,
   * since a crashed core would otherwise keep its memory (and its pthreads) alive.
   */
  fail(e: Error): void {
    if (this.failure) return;
    this.failure = e;
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
    this.worker.terminate();
  }

  send<K extends CallType>(type: K, input: Calls[K]["in"]): Promise<Calls[K]["out"]> {
    return this.request(type, input).reply;
  }

  call<K extends Exclude<CallType, "init" | "stream">>(type: K, input: Calls[K]["in"]): Promise<Calls[K]["out"]> {
    return this.send(type, input);
  }

  stream(input: Calls["stream"]["in"], onToken: (token: number) => void): TokenStream {
    const { id, reply } = this.request("stream", input, onToken);
    return {
      result: reply.then((out) => out.tokens),
      stop: () => {
        // Once the reply came (or the worker failed) there is nothing left to stop.
        if (this.pending.has(id)) this.worker.postMessage({ type: "cancel", id } satisfies CancelRequest);
      },
    };
  }

  private request<K extends CallType>(
    type: K,
    input: Calls[K]["in"],
    onToken?: (token: number) => void,
  ): { id: number; reply: Promise<Calls[K]["out"]> } {
    if (this.failure) return { id: 0, reply: Promise.reject(this.failure) };
    const id = this.nextId++;
    const reply = new Promise<Calls[K]["out"]>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (out: unknown) => void, reject, ...(onToken && { onToken }) });
      try {
        this.worker.postMessage({ type, id, in: input } as Request);
      } catch (e) {
        // An input that cannot be cloned: this call fails, the worker is fine.
        this.pending.delete(id);
        reject(e instanceof Error ? e : new Error(String(e)));
      }
    });
    return { id, reply };
  }
}
