// The GPU worker: owns the GPUDevice and replays the core's command stream (webgpu/protocol.ts) on it.
// Started by the qkv Worker when init({ backend }) picks WebGPU. (Filled in by the WebGPU backend work.)
import "./webgpu/protocol.js";
