// TEMPORARY STUB (not committed): replaced by the helper's kernels.
import type { Dispatcher } from "./dispatch.js";
export class GpuKernels {
  constructor(_device: GPUDevice, _layout: GPUPipelineLayout) {}
  encode(op: number, _a: Uint32Array, _d: Dispatcher): void {
    throw new Error(`stub: kernel ${op} missing`);
  }
}
