/// <reference types="@webgpu/types" />
// What a kernel sees of the GPU worker: one bind group layout for every kernel, and a dispatcher.
//
// Every kernel binds the same two things (so one bind group per arena serves them all):
//   @group(0) @binding(0) var<storage, read_write> mem: array<u32>;  the whole arena; floats through bitcast<f32>
//                                                                    (u32 so that int ids and byte flags keep
//                                                                    their bits: no float load can flush them)
//   @group(0) @binding(1) var<uniform> P: Params;                     the dispatch's parameters, at most
//                                                                    PARAM_WORDS words, a struct of u32/i32/f32
//                                                                    fields written in declaration order
// Arena offsets in the protocol are bytes; kernels index mem in words (byte offset / 4), except byte flags
// (key_pad), which are read as (mem[o / 4] >> (8 * (o % 4))) & 0xff.

/** Words of one dispatch's parameters (one 256-byte uniform slot). */
export const PARAM_WORDS = 64;

/** Queues compute work in the current command encoder, in order after everything queued before. */
export interface Dispatcher {
  /** One dispatch of `pipeline` (made with `layout`) over x * y * z workgroups, with `params` as its uniform. */
  dispatch(pipeline: GPUComputePipeline, params: Uint32Array, x: number, y?: number, z?: number): void;
}

/** The layout every kernel's pipeline is made with. */
export function kernelLayout(device: GPUDevice): { bindGroupLayout: GPUBindGroupLayout; layout: GPUPipelineLayout } {
  const bindGroupLayout = device.createBindGroupLayout({
    entries: [
      { binding: 0, visibility: GPUShaderStage.COMPUTE, buffer: { type: "storage" } },
      { binding: 1, visibility: GPUShaderStage.COMPUTE, buffer: { type: "uniform", hasDynamicOffset: true, minBindingSize: PARAM_WORDS * 4 } },
    ],
  });
  return { bindGroupLayout, layout: device.createPipelineLayout({ bindGroupLayouts: [bindGroupLayout] }) };
}

/** Writes f32 and i32 values into a params array by their bits. */
export function f32bits(x: number): number {
  F32[0] = x;
  return U32[0]!;
}
export function i32bits(x: number): number {
  return x >>> 0;
}
const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);
