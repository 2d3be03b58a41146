#!/usr/bin/env python3
"""Fits the polynomial behind the CPU kernels' GELU (cpp/src/kernels/cpu/rowwise_simd.h, normal_cdf) and checks
the float32 result against mpmath.

GELU needs Phi(h), the standard normal CDF, and its backward also needs the density phi(h) = exp(-h^2/2) / sqrt(2 pi).
With x = |h| / sqrt(2), 0.5 erfc(x) = 0.5 exp(-x^2) R(t), where R(x) = erfc(x) exp(x^2) is smooth and bounded and is
fitted here as a polynomial in t = 1 / (1 + x / 2) over x in [0, 10] (past 10, exp(-x^2) is 0 in float32), for
relative error (iteratively reweighted least squares towards the minimax fit). exp(-x^2) = exp(-h^2/2) is the
density's exponential too, so the backward takes one exp for both. Phi(h) = h < 0 ? 0.5 erfc(x) : 1 - 0.5 erfc(x)
never subtracts two close numbers, so it serves every h. A vector whose lanes all have |h| <= 1 (all of them, early
in training) takes cheaper polynomials instead, without an exp: erf(x) = x S(x^2) over x in [0, 1/sqrt(2)] for the
forward, and GELU'(h) = 1/2 + h Q(h^2) over h^2 in [0, 1] for the backward (Phi(h) - 1/2 and h phi(h) are both odd).

usage: /usr/bin/python3 scripts/fit-gelu.py   (Debian's python3-numpy and python3-mpmath; prints the coefficients)
"""
import mpmath
import numpy as np

mpmath.mp.dps = 30
P = 0.5  # t = 1 / (1 + P x)
DEGREE = 9
SMALL_H = 1.0  # the small branch: |h| <= SMALL_H
SMALL_DEGREE = 5


def fit(f, lo, hi, degree, nodes=4000):
    """Polynomial coefficients (lowest first) with the least maximum relative error on Chebyshev nodes."""
    xs = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes)
    ys = np.array([f(x) for x in xs])
    vander = np.vander(xs, degree + 1, increasing=True)
    w = 1 / np.abs(ys)
    reweight = np.ones_like(ys)
    for _ in range(60):  # Lawson's iteration: weight the nodes where the error is largest
        c, *_ = np.linalg.lstsq(vander * (w * reweight)[:, None], ys * w * reweight, rcond=None)
        err = np.abs((vander @ c - ys) * w)
        reweight = reweight * np.sqrt(err / err.max()) + 1e-12
        reweight /= reweight.max()
    return c, err.max()


def r_of_t(t):
    x = (mpmath.mpf(1) / t - 1) / P
    return float(mpmath.erfc(x) * mpmath.exp(x * x))


def erf_over_x(s):
    if s == 0:
        return float(2 / mpmath.sqrt(mpmath.pi))
    x = mpmath.sqrt(mpmath.mpf(s))
    return float(mpmath.erf(x) / x)


def grad_over_h(s):
    """Q(s) = (Phi(h) - 1/2 + h phi(h)) / h at h = sqrt(s): GELU'(h) = 1/2 + h Q(h^2)."""
    if s == 0:
        return float(2 / mpmath.sqrt(2 * mpmath.pi))
    h = mpmath.sqrt(mpmath.mpf(s))
    return float((mpmath.ncdf(h) - mpmath.mpf(0.5) + h * mpmath.npdf(h)) / h)


def horner(coefs, v):
    r = np.full_like(v, coefs[-1])
    for coef in coefs[-2::-1]:
        r = r * v + coef
    return r


def main():
    c, err = fit(r_of_t, 1 / (1 + 10 * P), 1.0, DEGREE)
    c32 = c.astype(np.float32)
    print(f"R(t), degree {DEGREE}, t = 1 / (1 + {P} x): max relative error of the fit {err:.3g}")
    print("coefficients, t^0 first:", ", ".join(f"{v:.9e}f" for v in c32))
    sc, serr = fit(erf_over_x, 0.0, SMALL_H * SMALL_H / 2, SMALL_DEGREE)
    sc32 = sc.astype(np.float32)
    print(f"S(s) = erf(x) / x, s = x^2 <= {SMALL_H * SMALL_H / 2}, degree {SMALL_DEGREE}: max relative error {serr:.3g}")
    print("coefficients, s^0 first:", ", ".join(f"{v:.9e}f" for v in sc32))
    qc, qerr = fit(grad_over_h, 0.0, SMALL_H * SMALL_H, SMALL_DEGREE)
    qc32 = qc.astype(np.float32)
    print(f"Q(s) = (GELU'(h) - 1/2) / h, s = h^2 <= {SMALL_H * SMALL_H}, degree {SMALL_DEGREE}: max relative error {qerr:.3g}")
    print("coefficients, s^0 first:", ", ".join(f"{v:.9e}f" for v in qc32))

    # The kernel's arithmetic in float32 (without FMA), against mpmath.
    f = np.float32
    h = np.concatenate([np.linspace(-14, 14, 40001), np.random.default_rng(1).normal(0, 3, 20000)]).astype(f)
    x = np.abs(h) * f(0.70710678118654752)
    t = f(1) / (f(1) + f(P) * x)
    r = horner(c32, t)
    e = np.exp(-(h * h) * f(0.5)).astype(f)
    q = f(0.5) * e * r
    cdf = np.where(h < 0, q, f(1) - q).astype(f)
    gelu = (h * cdf).astype(f)
    grad = (cdf + h * (e * f(0.3989422804014327))).astype(f)
    hd = h.astype(np.float64)
    cdf_ref = np.array([float(mpmath.ncdf(v)) for v in hd])
    gelu_ref = hd * cdf_ref
    grad_ref = cdf_ref + hd * np.exp(-0.5 * hd * hd) / np.sqrt(2 * np.pi)
    small = np.abs(h) <= f(SMALL_H)
    xs = h * f(0.70710678118654752)  # signed: the polynomial is odd
    cdf_small = (f(0.5) + (f(0.5) * xs) * horner(sc32, xs * xs)).astype(f)
    cdf = np.where(small, cdf_small, cdf)
    gelu = np.where(small, h * cdf_small, gelu).astype(f)
    grad = np.where(small, f(0.5) + h * horner(qc32, h * h), grad).astype(f)
    print(f"float32 GELU:  max |err| / |h| = {np.max(np.abs(gelu - gelu_ref) / np.maximum(np.abs(hd), 1e-30)):.3g}")
    print(f"float32 GELU': max |err| / (1 + |h|) = {np.max(np.abs(grad - grad_ref) / (1 + np.abs(hd))):.3g}")


if __name__ == "__main__":
    main()
