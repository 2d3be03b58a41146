// qkv's learning-rate schedule in JavaScript, for the TF.js twin of the char GPT (tfjs_gpt.mjs), which runs in
// Node (train.mjs) and in the browser (bench/webgpu.mjs): this module imports nothing.

/** qkv's learning_rate_at(t) for the t-th optimizer step (t = 1, 2, ...): linear warm-up, cosine decay. */
export function learningRateAt(o, t) {
  if (o.schedule === "constant") return o.lr;
  if (o.schedule !== "cosine") throw new Error(`schedule ${o.schedule} is not implemented here`);
  if (t < o.warmup_steps) return (o.lr * t) / o.warmup_steps;
  if (t >= o.total_steps) return o.min_lr;
  const progress = (t - o.warmup_steps) / (o.total_steps - o.warmup_steps);
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1 + Math.cos(Math.PI * progress));
}
