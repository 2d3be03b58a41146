// The char GPT of nanoGPT's CPU recipe written in TensorFlow.js, as a user of TF.js would write it: the same
// model and the same optimizer step as qkv's LanguageModel (bench/char_gpt_recipe.h) and PyTorch's
// (bench/char_gpt_torch.py), from the same initial weights (read by qkv's names from the checkpoint that
// export_model.py writes).
//
// B T C H hs V: batch, sequence, n_embd, heads, head size, vocabulary.
// - token embedding as one-hot x table: TF.js's wasm backend has no gradient for tf.gather
//   (UnsortedSegmentSum), so an embedding lookup cannot be trained there (TOOLCHAIN.md). The same code runs
//   on the cpu backend, so both backends run the same graph. The one-hot matrix is made as int32 and cast:
//   tf.oneHot(..., "float32") on the wasm backend 4.22 returns the int32 bit patterns (1 reads as 1.4e-45).
// - TF.js's fast path for matrix products: its wasm backend runs only the untransposed 2-D tf.matMul through
//   XNNPACK (measured here: 768x128x512 at ~10 GFLOP/s; with transposeA or transposeB ~0.7-1 GFLOP/s), and
//   tf.matMul's own gradient uses both transposed forms. So the 2-D products go through mm(), whose custom
//   gradient transposes explicitly (tf.transpose, cheap) and multiplies untransposed, and the Linear weights
//   are kept as tf.layers.dense keeps its kernel, (in, out), transposed from qkv's (out, in) on load.
//   Without this TF.js is several times slower here ("matmul: 'flags'" runs that version for comparison).
//   The per-head products of attention are 4-D (batched); TF.js has no fast path for those either way.
// - pre-LN blocks: x += out_proj(attn(ln1(x))); x += linear2(gelu(linear1(ln2(x)))); no biases; exact (erf)
//   GELU; causal softmax attention; final LayerNorm; tied head (logits = x wte^T); mean cross-entropy.
// - AdamW as torch.optim.AdamW with the recipe's groups: global-norm clip (coef = clip / (norm + 1e-6),
//   at most 1), decoupled weight decay on tensors with >= 2 dims, bias-corrected moments, lr of the t-th step
//   from qkv's schedule. tf.train.adam has no decoupled weight decay, so the update is written out here with
//   TF.js ops, one tidy per step, the results assigned to variables (nothing leaks between steps).
import { learningRateAt } from "./schedule.mjs";

const LINEAR = /(in_proj_weight|out_proj\.weight|linear1\.weight|linear2\.weight)$/;

/**
 * @param tf        the @tensorflow/tfjs module, its backend already set
 * @param tensors   { name: { shape, data } } the initial weights under qkv's names
 * @param config    qkv.config of the checkpoint (snake_case keys)
 * @param optimizer qkv.optimizer of the checkpoint
 * @param matmul    "explicit" (TF.js's fast path, above) or "flags" (tf.matMul(x, W, false, true) on qkv's layout)
 */
export function createTfGpt(tf, tensors, config, optimizer, matmul = "explicit") {
  const { vocab_size: V, d_model: C, heads: H, layers: L, context } = config;
  if (config.bias || !config.tie_head || config.norm !== "pre" || config.activation !== "gelu" || config.positions !== "learned") {
    throw new Error(`tfjs_gpt implements only the recipe's model (pre-LN, GELU, no biases, tied head), got ${JSON.stringify(config)}`);
  }
  if (matmul !== "explicit" && matmul !== "flags") throw new Error(`matmul must be "explicit" or "flags", got ${matmul}`);
  const explicit = matmul === "explicit";
  const hs = C / H;
  const names = Object.keys(tensors).filter((n) => !n.startsWith("optimizer."));
  const params = {};
  for (const n of names) {
    const w = tf.tensor(tensors[n].data, tensors[n].shape, "float32");
    params[n] = tf.variable(explicit && LINEAR.test(n) ? tf.transpose(w) : w, true, n);
    if (explicit && LINEAR.test(n)) w.dispose();
  }
  const vars = names.map((n) => params[n]);
  const m = names.map((n) => tf.variable(tf.zerosLike(params[n]), false, `m.${n}`));
  const v = names.map((n) => tf.variable(tf.zerosLike(params[n]), false, `v.${n}`));
  const decay = names.map((n) => params[n].shape.length >= 2 || !optimizer.decay_matrices_only);
  // (T, T) additive causal mask: 0 on and below the diagonal, -inf above; built once per sequence length.
  const masks = new Map();
  const causalMask = (T) => {
    if (!masks.has(T)) {
      const a = new Float32Array(T * T);
      for (let i = 0; i < T; i++) for (let j = i + 1; j < T; j++) a[i * T + j] = -Infinity;
      masks.set(T, tf.keep(tf.tensor2d(a, [T, T])));
    }
    return masks.get(T);
  };
  const p = (name) => params[name];

  // a b for 2-D a, b, untransposed in the forward and in the backward (da = dy b^T, db = a^T dy).
  const mm = tf.customGrad((a, b, save) => {
    save([a, b]);
    return {
      value: tf.matMul(a, b),
      gradFunc: (dy, [sa, sb]) => [tf.matMul(dy, tf.transpose(sb)), tf.matMul(tf.transpose(sa), dy)],
    };
  });
  // y = x W^T, as torch.nn.Linear without bias. x: (rows, in); the weight is (in, out) when explicit, else (out, in).
  const linear = (x, w) => (explicit ? mm(x, w) : tf.matMul(x, w, false, true));
  // x: (rows, C) -> (rows, C); reference: torch.nn.LayerNorm (biased variance, eps 1e-5)
  const layerNorm = (x, prefix) => {
    const { mean, variance } = tf.moments(x, -1, true);
    return x.sub(mean).mul(tf.rsqrt(variance.add(1e-5))).mul(p(`${prefix}.weight`)).add(p(`${prefix}.bias`));
  };
  // reference: torch.nn.GELU (approximate='none'): x * Phi(x)
  const gelu = (x) => x.mul(tf.scalar(0.5)).mul(tf.erf(x.mul(tf.scalar(Math.SQRT1_2))).add(tf.scalar(1)));
  const oneHot = (ids) => tf.oneHot(tf.tensor1d(ids, "int32"), V).toFloat(); // (B T, V)

  /** Mean cross-entropy of a (B, T) batch: the graph that tf.variableGrads differentiates. */
  const loss = (inputs, targets, B, T) => {
    const wte = p("tok_emb.weight"); // (V, C)
    let x = explicit ? mm(oneHot(inputs), wte) : tf.matMul(oneHot(inputs), wte); // (B T, C)
    const pos = T === context ? p("pos_emb.weight") : p("pos_emb.weight").slice([0, 0], [T, C]); // (T, C)
    x = x.reshape([B, T, C]).add(pos).reshape([B * T, C]);
    const mask = causalMask(T);
    const heads = (t) => t.reshape([B, T, H, hs]).transpose([0, 2, 1, 3]); // (B, H, T, hs)
    for (let l = 0; l < L; l++) {
      const pre = `layers.${l}`;
      const [q, k, vv] = tf.split(linear(layerNorm(x, `${pre}.norm1`), p(`${pre}.self_attn.in_proj_weight`)), 3, 1);
      const att = tf.softmax(tf.matMul(heads(q), heads(k), false, true).mul(tf.scalar(1 / Math.sqrt(hs))).add(mask)); // (B, H, T, T)
      const y = tf.matMul(att, heads(vv)).transpose([0, 2, 1, 3]).reshape([B * T, C]);
      x = x.add(linear(y, p(`${pre}.self_attn.out_proj.weight`)));
      const f = gelu(linear(layerNorm(x, `${pre}.norm2`), p(`${pre}.linear1.weight`))); // (B T, 4C)
      x = x.add(linear(f, p(`${pre}.linear2.weight`)));
    }
    const h = layerNorm(x, "norm");
    const logits = explicit ? mm(h, tf.transpose(wte)) : tf.matMul(h, wte, false, true); // (B T, V), tied head
    return tf.losses.softmaxCrossEntropy(oneHot(targets), logits); // mean over B T
  };

  let step = 0;
  const { beta1, beta2, eps, weight_decay: wd, grad_clip: clip } = optimizer;
  return {
    numParameters: vars.reduce((s, x) => s + x.size, 0),
    /** One recipe step: forward, backward, clip, AdamW. Resolves to the loss before the update. */
    async trainStep(inputs, targets, B, T) {
      step += 1;
      const lr = learningRateAt(optimizer, step);
      const lossTensor = tf.tidy(() => {
        const { value, grads } = tf.variableGrads(() => loss(inputs, targets, B, T), vars);
        let gs = names.map((n) => grads[n]);
        if (clip > 0) {
          const norm = tf.sqrt(tf.addN(gs.map((g) => tf.sum(tf.square(g)))));
          const coef = tf.minimum(tf.scalar(1), tf.scalar(clip).div(norm.add(tf.scalar(1e-6))));
          gs = gs.map((g) => g.mul(coef));
        }
        const bc1 = 1 - beta1 ** step, bc2 = 1 - beta2 ** step;
        for (let i = 0; i < vars.length; i++) {
          const g = gs[i];
          const mi = m[i].mul(tf.scalar(beta1)).add(g.mul(tf.scalar(1 - beta1)));
          const vi = v[i].mul(tf.scalar(beta2)).add(g.square().mul(tf.scalar(1 - beta2)));
          m[i].assign(mi);
          v[i].assign(vi);
          let w = vars[i];
          if (decay[i] && wd > 0) w = w.mul(tf.scalar(1 - lr * wd));
          const denom = vi.sqrt().div(tf.scalar(Math.sqrt(bc2))).add(tf.scalar(eps));
          vars[i].assign(w.sub(mi.div(denom).mul(tf.scalar(lr / bc1))));
        }
        return value;
      });
      const [l] = await lossTensor.data();
      lossTensor.dispose();
      return l;
    },
    dispose() {
      for (const x of [...vars, ...m, ...v, ...masks.values()]) x.dispose();
    },
  };
}
