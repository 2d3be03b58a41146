// The GPU worker: owns the GPUDevice and runs the core's command stream (webgpu/protocol.ts) on it.
//
// The qkv Worker starts it when init({ backend }) asks for WebGPU: "open" requests the adapter and device and
// answers with the adapter and its limits (or why there is none); "start" hands over the shared wasm memory
// and the control block's address, and from then on this worker reads commands out of the ring whenever the
// core wakes it (Atomics.waitAsync on the ring's head), encodes the kernels into one command buffer, and
// answers the commands the core waits for (Download, Sync) through the control block.

import { Control, Op, type GpuReply, type GpuRequest } from "./webgpu/protocol.js";
import { PARAM_WORDS, kernelLayout, type Dispatcher } from "./webgpu/dispatch.js";
import { GpuKernels } from "./webgpu/kernels.js";

const scope = self as unknown as DedicatedWorkerGlobalScope;
let device: GPUDevice | undefined;

function post(r: GpuReply): void {
  scope.postMessage(r);
}

async function open(): Promise<GpuReply> {
  const gpu = (navigator as Navigator & { gpu?: GPU }).gpu;
  if (!gpu) {
    return {
      type: "unavailable",
      reason: "this browser has no WebGPU (navigator.gpu is undefined; it needs a secure context and a recent browser)",
    };
  }
  const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" });
  if (!adapter) return { type: "unavailable", reason: "navigator.gpu.requestAdapter() found no GPU adapter" };
  const info = adapter.info;
  const name = [info?.vendor, info?.architecture, info?.device, info?.description].filter((s) => s).join(" ") || "unknown adapter";
  // The arena is one storage buffer bound whole: ask for the most the adapter allows.
  const limits = {
    maxBufferSize: adapter.limits.maxBufferSize,
    maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
  };
  try {
    device = await adapter.requestDevice({ requiredLimits: limits });
  } catch (e) {
    return { type: "unavailable", reason: `requestDevice failed on ${name}: ${(e as Error).message}` };
  }
  // A software adapter (SwiftShader): "auto" prefers the wasm core, which is faster on the same CPU.
  const fallback = (info as GPUAdapterInfo & { isFallbackAdapter?: boolean })?.isFallbackAdapter === true || /swiftshader/i.test(name);
  return { type: "opened", adapter: name, fallback, ...limits };
}

/** The arena, the parameter slots and the command encoder of the batch being built. */
class Stream implements Dispatcher {
  private arena: GPUBuffer | undefined;
  private bindGroup: GPUBindGroup | undefined;
  private readonly params: GPUBuffer;
  private readonly staged = new Uint32Array(SLOTS * (256 / 4));
  private slot = 0;
  private encoder: GPUCommandEncoder | undefined;
  private pass: GPUComputePassEncoder | undefined;
  private staging: GPUBuffer | undefined;
  private readonly layout: ReturnType<typeof kernelLayout>;
  readonly kernels: GpuKernels;

  constructor(private readonly device: GPUDevice) {
    this.layout = kernelLayout(device);
    this.kernels = new GpuKernels(device, this.layout.layout);
    this.params = device.createBuffer({ size: SLOTS * 256, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  }

  dispatch(pipeline: GPUComputePipeline, params: Uint32Array, x: number, y = 1, z = 1): void {
    if (x === 0 || y === 0 || z === 0) return;
    if (params.length > PARAM_WORDS) throw new Error(`qkv webgpu: ${params.length} parameter words (at most ${PARAM_WORDS})`);
    if (this.slot === SLOTS) this.submit();
    this.staged.set(params, this.slot * 64);
    const pass = this.computePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, this.bindGroup!, [this.slot * 256]);
    pass.dispatchWorkgroups(x, y, z);
    this.slot++;
  }

  /** Grows the arena to at least `bytes`, keeping its contents (a copy on the queue, in order). */
  capacity(bytes: number): void {
    const old = this.arena;
    if (old && old.size >= bytes) return;
    const limit = Math.min(this.device.limits.maxBufferSize, this.device.limits.maxStorageBufferBindingSize);
    const size = Math.min(limit, Math.max(align(bytes, 256), old ? old.size * 2 : 1 << 20));
    if (size < bytes) throw new Error(`the arena needs ${bytes} bytes, more than the device's buffer limit of ${limit}`);
    const arena = this.device.createBuffer({
      size,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
    });
    if (old) {
      this.endPass();
      this.commandEncoder().copyBufferToBuffer(old, 0, arena, 0, old.size);
      this.submit();
      old.destroy();
    }
    this.arena = arena;
    this.bindGroup = this.device.createBindGroup({
      layout: this.layout.bindGroupLayout,
      entries: [
        { binding: 0, resource: { buffer: arena } },
        { binding: 1, resource: { buffer: this.params, size: PARAM_WORDS * 4 } },
      ],
    });
  }

  /** bytes from the wasm memory into the arena, after the work queued before them. */
  upload(dst: number, src: Uint8Array): void {
    this.submit();
    const n = align(src.byteLength, 4);
    this.device.queue.writeBuffer(this.arena!, dst, src.buffer, src.byteOffset, n);
  }

  /** The arena's bytes [src, src + bytes) once the work before them is done. */
  async download(src: number, bytes: number): Promise<Uint8Array> {
    const n = align(bytes, 4);
    if (!this.staging || this.staging.size < n) {
      this.staging?.destroy();
      this.staging = this.device.createBuffer({ size: Math.max(n, 1 << 16), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    }
    this.endPass();
    this.commandEncoder().copyBufferToBuffer(this.arena!, src, this.staging, 0, n);
    this.submit();
    await this.staging.mapAsync(GPUMapMode.READ, 0, n);
    const out = new Uint8Array(this.staging.getMappedRange(0, n).slice(0, bytes));
    this.staging.unmap();
    return out;
  }

  /** Sends what was encoded: the parameters of its dispatches first (writeBuffer runs before the submit). */
  submit(): void {
    if (!this.encoder) return;
    this.endPass();
    if (this.slot) this.device.queue.writeBuffer(this.params, 0, this.staged, 0, this.slot * 64);
    this.device.queue.submit([this.encoder.finish()]);
    this.encoder = undefined;
    this.slot = 0;
  }

  private commandEncoder(): GPUCommandEncoder {
    return (this.encoder ??= this.device.createCommandEncoder());
  }
  private computePass(): GPUComputePassEncoder {
    return (this.pass ??= this.commandEncoder().beginComputePass());
  }
  private endPass(): void {
    this.pass?.end();
    this.pass = undefined;
  }
}

/** Parameter slots (256 bytes each) per command buffer; a longer batch is split. */
const SLOTS = 2048;

function align(n: number, a: number): number {
  return Math.ceil(n / a) * a;
}

/** Atomics.waitAsync (ES2024; Chromium has it since 87), typed here for the ES2022 library. */
const waitAsync = (Atomics as unknown as {
  waitAsync(a: Int32Array, index: number, value: number): { async: boolean; value: Promise<string> | string };
}).waitAsync;

/** Reads and runs the ring until the device is lost. */
async function serve(memory: WebAssembly.Memory, control: number, gpu: GPUDevice): Promise<void> {
  const base = control >> 2;
  let i32 = new Int32Array(memory.buffer);
  let u32 = new Uint32Array(memory.buffer);
  const ringWords = Atomics.load(i32, base + Control.RingWords);
  const ring = base + Control.Words;
  const stream = new Stream(gpu);
  let failed = false;

  const report = (status: number, message: string) => {
    if (Atomics.load(i32, base + Control.Status) !== 0) return;
    const bytes = new TextEncoder().encode(message.slice(0, 1000));
    new Uint8Array(memory.buffer, control + Control.Message * 4, bytes.length).set(bytes);
    Atomics.store(i32, base + Control.MessageBytes, bytes.length);
    Atomics.store(i32, base + Control.Status, status);
    failed = true;
    Atomics.notify(i32, base + Control.Reply);
    Atomics.notify(i32, base + Control.Tail);
  };
  gpu.addEventListener("uncapturederror", (e) => report(1, (e as GPUUncapturedErrorEvent).error.message));
  void gpu.lost.then((info) => {
    report(2, info.message || info.reason || "unknown reason");
    post({ type: "lost", reason: info.message || String(info.reason) });
  });
  // Every batch of work runs inside a validation and an out-of-memory error scope, popped at each wait.
  gpu.pushErrorScope("out-of-memory");
  gpu.pushErrorScope("validation");
  const answer = (ticket: number) => {
    Atomics.store(i32, base + Control.Reply, ticket | 0);
    Atomics.notify(i32, base + Control.Reply);
  };

  for (;;) {
    if (u32.buffer !== memory.buffer) {
      i32 = new Int32Array(memory.buffer); // the wasm memory grew: new views (same SharedArrayBuffer contents)
      u32 = new Uint32Array(memory.buffer);
    }
    let tail = Atomics.load(i32, base + Control.Tail);
    const head = Atomics.load(i32, base + Control.Head);
    if (head === tail) {
      stream.submit();
      const w = waitAsync(i32, base + Control.Head, head);
      if (w.async) await w.value;
      continue;
    }
    while (tail !== head) {
      const at = ring + tail;
      const word = u32[at]!;
      const op = word >>> 16;
      const n = word & 0xffff;
      if (op === Op.Wrap) {
        tail = 0;
        continue;
      }
      const a = u32.subarray(at + 1, at + n);
      if (op === Op.Download || op === Op.Sync) {
        const ticket = a[a.length - 1]!;
        if (!failed) {
          try {
            if (op === Op.Download) {
              const data = await stream.download(a[2]!, a[3]!);
              new Uint8Array(memory.buffer, a[0]!, data.length).set(data);
            } else {
              stream.submit();
              await gpu.queue.onSubmittedWorkDone();
            }
            // An error of the work before this point is known now, not later: the core must not take a
            // result that came out of a failed dispatch.
            const validation = await gpu.popErrorScope();
            const memoryError = await gpu.popErrorScope();
            const error = validation ?? memoryError;
            gpu.pushErrorScope("out-of-memory");
            gpu.pushErrorScope("validation");
            if (error) report(1, error.message);
          } catch (e) {
            report(1, (e as Error).message);
          }
        }
        answer(ticket);
      } else if (!failed) {
        try {
          if (op === Op.Capacity) stream.capacity(a[0]!);
          else if (op === Op.Upload) stream.upload(a[0]!, new Uint8Array(memory.buffer, (at + 3) * 4, a[1]!));
          else stream.kernels.encode(op, a, stream);
        } catch (e) {
          report(1, (e as Error).message);
        }
      }
      tail = (tail + n) % ringWords;
      Atomics.store(i32, base + Control.Tail, tail);
    }
    Atomics.notify(i32, base + Control.Tail);
  }
}

scope.onmessage = (e: MessageEvent<GpuRequest>) => {
  const m = e.data;
  if (m.type === "open") {
    void open().then(post, (err: unknown) => post({ type: "unavailable", reason: String((err as Error)?.message ?? err) }));
  } else if (m.type === "start") {
    if (!device) return post({ type: "unavailable", reason: "start before open" });
    post({ type: "started" });
    void serve(m.memory, m.control, device);
  } else if (m.type === "lose") {
    device?.destroy();
  }
};
