/// <reference types="@webgpu/types" />
// The harness of webgpu-kernels.page.ts and its suite modules: an arena laid out on the host (Layout), a minimal
// Dispatcher standing in for the GPU worker (Recorder), one command run on a fresh arena (run), and the results
// that the page hands back to webgpu-kernels.test.ts (record).
import { GpuKernels } from "../../web/src/webgpu/kernels.js";
import { kernelLayout, PARAM_WORDS, f32bits, type Dispatcher } from "../../web/src/webgpu/dispatch.js";

export interface CaseResult {
  op: string;
  shape: string;
  err: number;
  tol: number;
}

// ---- the arena ----
export interface Region {
  off: number; // words
  n: number; // elements (floats or ints; bytes for u8)
}
export class Layout {
  private parts: { off: number; data: Uint32Array }[] = [];
  private top = 16; // nothing at 0: a pointer 0 bug would show
  private place(data: Uint32Array): Region {
    const off = this.top;
    this.parts.push({ off, data });
    this.top += data.length + 5; // odd gaps: nothing aligned by accident
    return { off, n: data.length };
  }
  f32(a: Float32Array): Region {
    return this.place(new Uint32Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength)));
  }
  i32(a: Int32Array): Region {
    return this.place(new Uint32Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength)));
  }
  /** Packed bytes from the start of a word (packed rows are u32-aligned), padded to whole words. */
  bytes(a: Uint8Array): Region {
    const words = new Uint8Array(Math.ceil(a.length / 4) * 4 || 4);
    words.set(a);
    return this.place(new Uint32Array(words.buffer));
  }
  /** u8 flags starting one byte into a word (the key_pad pointer is a byte address). Returns the byte address. */
  u8(a: Uint8Array): number {
    const bytes = new Uint8Array(Math.ceil((a.length + 1) / 4) * 4);
    bytes.set(a, 1);
    const r = this.place(new Uint32Array(bytes.buffer));
    return r.off * 4 + 1;
  }
  host(): Uint32Array<ArrayBuffer> {
    const h = new Uint32Array(this.top + 64);
    for (const p of this.parts) h.set(p.data, p.off);
    return h;
  }
}
export const B = (r: Region): number => r.off * 4; // a region's byte pointer
export const fbits = (x: number): number => f32bits(x);

// ---- the GPU side: a minimal Dispatcher over one arena buffer ----
class Recorder implements Dispatcher {
  items: { pipeline: GPUComputePipeline; params: Uint32Array; x: number; y: number; z: number }[] = [];
  dispatch(pipeline: GPUComputePipeline, params: Uint32Array, x: number, y = 1, z = 1): void {
    if (params.length > PARAM_WORDS) throw new Error(`params ${params.length} > ${PARAM_WORDS} words`);
    this.items.push({ pipeline, params, x, y, z });
  }
}

let device: GPUDevice;
let kernels: GpuKernels;
let bindGroupLayout: GPUBindGroupLayout;

export async function setup(): Promise<string> {
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) throw new Error("no WebGPU adapter");
  device = await adapter.requestDevice();
  const kl = kernelLayout(device);
  bindGroupLayout = kl.bindGroupLayout;
  device.pushErrorScope("validation");
  kernels = new GpuKernels(device, kl.layout);
  const e = await device.popErrorScope();
  if (e) throw new Error(`pipeline creation: ${e.message}`);
  const info = adapter.info;
  return `${info.vendor} ${info.architecture}`;
}

/** Runs one command on a fresh arena holding `host`; returns the arena after it. */
export async function run(op: number, words: ArrayLike<number>, host: Uint32Array<ArrayBuffer>): Promise<Uint32Array> {
  const bytes = host.byteLength;
  const arena = device.createBuffer({ size: bytes, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(arena, 0, host);
  const rec = new Recorder();
  kernels.encode(op, Uint32Array.from(words, (w) => w >>> 0), rec);
  const slots = Math.max(1, rec.items.length);
  const uniform = device.createBuffer({ size: slots * 256, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  const u = new Uint32Array(slots * 64);
  rec.items.forEach((it, i) => u.set(it.params, i * 64));
  device.queue.writeBuffer(uniform, 0, u);
  const bg = device.createBindGroup({
    layout: bindGroupLayout,
    entries: [
      { binding: 0, resource: { buffer: arena } },
      { binding: 1, resource: { buffer: uniform, size: PARAM_WORDS * 4 } },
    ],
  });
  const read = device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  device.pushErrorScope("validation");
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  rec.items.forEach((it, i) => {
    pass.setPipeline(it.pipeline);
    pass.setBindGroup(0, bg, [i * 256]);
    pass.dispatchWorkgroups(it.x, it.y, it.z);
  });
  pass.end();
  enc.copyBufferToBuffer(arena, 0, read, 0, bytes);
  device.queue.submit([enc.finish()]);
  const e = await device.popErrorScope();
  if (e) throw new Error(`op ${op}: ${e.message}`);
  await read.mapAsync(GPUMapMode.READ);
  const out = new Uint32Array(read.getMappedRange().slice(0));
  read.unmap();
  arena.destroy();
  uniform.destroy();
  read.destroy();
  return out;
}
export function f32At(mem: Uint32Array, r: Region): Float32Array {
  return new Float32Array(mem.buffer.slice(r.off * 4, (r.off + r.n) * 4));
}
export function i32At(mem: Uint32Array, r: Region): Int32Array {
  return new Int32Array(mem.buffer.slice(r.off * 4, (r.off + r.n) * 4));
}

export const results: CaseResult[] = [];
export function record(op: string, shape: string, errs: number[], tol = 1e-5): void {
  const err = errs.some(Number.isNaN) ? NaN : Math.max(0, ...errs);
  results.push({ op, shape: errs.length > 1 ? `${shape} [${errs.map((e) => e.toExponential(1)).join(" ")}]` : shape, err, tol });
}

// ---- the cases ----

/** Whether the encoder refuses the command (throws) before anything is dispatched. */
export function refused(op: number, words: Uint32Array): boolean {
  try {
    kernels.encode(op, words, new Recorder());
    return false;
  } catch {
    return true;
  }
}
