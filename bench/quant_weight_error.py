"""The quantized weights' own error: each packed matrix of qkv quantized checkpoints, read from the file as the README's
"File layout" describes it and dequantized here, against the float32 checkpoint's matrix of the same name.

    python3 bench/quant_weight_error.py REF FORMAT=CKPT [FORMAT=CKPT ...] [--dequantized DIR]

REF: the float32 checkpoint; each CKPT: `qkv quantize --weights FORMAT REF CKPT` (FORMAT may carry a '-' suffix, as
bench/quant_accuracy.sh's q4-f32emb). Prints per file: the matrices packed, the relative RMS error over all of them
sqrt(sum (w' - w)^2 / sum w^2), the largest per-matrix relative RMS error, and the largest |w' - w| / max |w| of a
matrix; then the weights' excess kurtosis (0 for a Gaussian: heavy tails cost q4's per-group scale the most). The
figures are the same whether the weights were trained or drawn: what differs between models is how much the
outputs move for that error (bench/README.md, "Accuracy of quantized weights"). Needs numpy only.

--dequantized DIR also writes DIR/<FORMAT>_dequantized.safetensors: REF with each packed matrix replaced by the
float32 values CKPT's packed rows stand for (every other tensor and the metadata as they are, less qkv.crc32, which
no longer holds). qkv_quant_accuracy with that file as its float32 reference and CKPT as the format then measures
the error qkv's quantized products add to the weights' own: none beyond float32 rounding.
"""

import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "U8": np.uint8, "BF16": np.uint16}


def open_safetensors(path):
    """(header without __metadata__, metadata, reader(name) -> numpy array), the file memory-mapped."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    meta = header.pop("__metadata__", {})

    def read(name):
        t = header[name]
        begin, end = t["data_offsets"]
        return data[begin:end].view(DTYPES[t["dtype"]]).reshape(t["shape"])

    return header, meta, read


def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def dequantize(read, header, name, fmt, shape):
    """The (N, K) float32 matrix a packed tensor holds (README "File layout")."""
    N, K = shape
    q = read(name)
    if fmt == "int8":  # I8 (N, round_up(K, 4)), scales F32 (N, 1): w = q s
        return q[:, :K].astype(np.float32) * read(name + ".scales").reshape(N, 1)
    if fmt == "q4":  # U8 (N, 16 G): group g at byte 16g, even k in the low nibble; scales BF16 (N, 2 ceil(G / 2)),
        G = (K + 31) // 32  # group g's at column g (the last column padding when G is odd): w = (q - 8) d
        b = np.asarray(q).reshape(N, G, 16)
        codes = np.empty((N, G, 32), np.int8)
        codes[:, :, 0::2] = b & 0x0F
        codes[:, :, 1::2] = b >> 4
        d = bf16_to_f32(np.asarray(read(name + ".scales"))[:, :G])
        w = (codes.astype(np.float32) - 8) * d.reshape(N, G, 1)
        return w.reshape(N, G * 32)[:, :K]
    if fmt in ("f16", "bf16"):  # F16 / BF16 (N, K), or U8 (N, round_up(2K, 4)) where 2K is not a multiple of 4
        raw = q if header[name]["dtype"] != "U8" else np.asarray(q)[:, : 2 * K].copy().view(np.uint16)
        if fmt == "f16":
            return np.asarray(raw).view(np.float16).astype(np.float32)
        return bf16_to_f32(np.asarray(raw).view(np.uint16))
    raise SystemExit(f"{name}: unknown format {fmt}")


def write_safetensors(path, tensors, metadata):
    """tensors: name -> float32 array, written in order after a header padded to 8 bytes."""
    header, offset = {"__metadata__": metadata}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a, dtype=np.float32).tobytes())


def main():
    args = sys.argv[1:]
    out_dir = None
    if "--dequantized" in args:
        i = args.index("--dequantized")
        if i + 1 >= len(args):
            raise SystemExit(__doc__)
        out_dir = args.pop(i + 1)
        args.pop(i)
    if len(args) < 2 or any("=" not in a for a in args[1:]):
        raise SystemExit(__doc__)
    ref_path = args[0]
    ref_header, ref_meta, ref = open_safetensors(ref_path)
    kurtosis = {}
    print("| checkpoint | matrices packed | weights | relative RMS error | worst matrix's "
          "| worst max abs error / max abs |")
    print("| --- | --- | --- | --- | --- | --- |")
    for arg in args[1:]:
        label, path = arg.split("=", 1)
        header, meta, read = open_safetensors(path)
        packed = json.loads(meta.get("qkv.quantized", "{}"))
        if not packed:
            raise SystemExit(f"{path}: no qkv.quantized metadata: not a quantized qkv checkpoint")
        err2 = ref2 = 0.0
        worst_rms = worst_max = 0.0
        count = 0
        dequantized = {}
        for name, info in sorted(packed.items()):
            w = np.asarray(ref(name), dtype=np.float32)
            if list(w.shape) != info["shape"] or ref_header[name]["dtype"] != "F32":
                raise SystemExit(f"{name}: {path} holds {info['shape']}, {ref_path} {ref_header[name]}")
            dequantized[name] = dequantize(read, header, name, info["format"], info["shape"])
            d = dequantized[name].astype(np.float64) - w
            e2, r2 = float((d * d).sum()), float((w.astype(np.float64) ** 2).sum())
            err2, ref2, count = err2 + e2, ref2 + r2, count + w.size
            worst_rms = max(worst_rms, (e2 / r2) ** 0.5)
            worst_max = max(worst_max, float(np.abs(d).max() / np.abs(w).max()))
            if name not in kurtosis:
                z = (w - w.mean()) / w.std()
                kurtosis[name] = float((z.astype(np.float64) ** 4).mean() - 3)
        print(f"| {label} | {len(packed)} | {count / 1e6:.2f} M | {(err2 / ref2) ** 0.5:.3e} | {worst_rms:.3e} "
              f"| {worst_max:.3e} |")
        if out_dir:
            tensors = {name: dequantized.get(name, ref(name)) for name in ref_header}
            meta = {k: v for k, v in ref_meta.items() if k != "qkv.crc32"}
            write_safetensors(f"{out_dir}/{label}_dequantized.safetensors", tensors, meta)
    k = sorted(kurtosis.values())
    print(f"excess kurtosis of the float32 matrices: median {k[len(k) // 2]:.2f}, largest {k[-1]:.2f} (Gaussian: 0)")


if __name__ == "__main__":
    main()
