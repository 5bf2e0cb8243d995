"""The Triton kernels of `lev_triton` (imported only there, on first use: Triton is optional).

Layouts (fp32, contiguous): t [N, h, P]; coef [h, P, K, 3, r] (the per-interval table of
`lev.knot_interval_coefficients`, row (l, p, c) holding A0, A1, A2); M, grad_M [N, h, r].
Arithmetic per factor as `lev_native`'s C source, operation for operation.
"""

from __future__ import annotations

import triton
import triton.language as tl

SIGN_AND_MANTISSA = -2139095041  # 0x807FFFFF as an int32: everything but the exponent bits
ONE_EXPONENT = 0x3F800000  # the exponent bits of 1.0


@triton.jit
def _interval(tv, K: tl.constexpr):
    """The knot interval c of t's nearest centre in [0, K-1] (0 for a NaN t: never an
    out-of-range row) and the offset f = x - c, x = t (K - 1)."""
    x = tv * (K - 1.0)
    cc = tl.floor(x + 0.5)
    cc = tl.where(cc >= 0.0, cc, 0.0)
    cc = tl.where(cc <= K - 1.0, cc, K - 1.0)
    return cc.to(tl.int32), x - cc


@triton.jit
def _signed_magnitude(phi, eps):
    """copysign(max(|phi|, eps), phi): -0.0 counts negative; a NaN stays NaN."""
    mag = tl.abs(phi)
    mag = tl.where(mag < eps, eps, mag)
    return tl.where(phi.to(tl.int32, bitcast=True) < 0, -mag, mag)


@triton.jit
def _rescale(acc, ex):
    """acc = mantissa in [1, 2) x 2^e, the exponent moved into ex (exact; 0, inf, NaN and
    subnormals left as they are)."""
    bits = acc.to(tl.int32, bitcast=True)
    e = (bits >> 23) & 0xFF
    ok = (e >= 1) & (e <= 254)
    normed = ((bits & SIGN_AND_MANTISSA) | ONE_EXPONENT).to(tl.float32, bitcast=True)
    return tl.where(ok, normed, acc), ex + tl.where(ok, e - 127, 0)


@triton.jit
def _ldexp(acc, ex):
    """acc x 2^ex for acc in [1, 2): two exact power-of-two steps (each 2^k built from its
    bits, k in [-126, 127]), so one rounding, as C's ldexpf."""
    e = tl.minimum(tl.maximum(ex, -252), 254)
    e1 = e >> 1
    e2 = e - e1
    s1 = ((e1 + 127) << 23).to(tl.float32, bitcast=True)
    s2 = ((e2 + 127) << 23).to(tl.float32, bitcast=True)
    return acc * s1 * s2


@triton.jit
def spline_forward_kernel(
    t_ptr, coef_ptr, M_ptr, N, h, P, eps,
    K: tl.constexpr, R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr,
    RESCALE: tl.constexpr,
):  # fmt: skip
    """Program (block of ids, head l): M[n, l, :] = prod_p phi[n, l, p, :] in registers."""
    head = tl.program_id(1)
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = tl.arange(0, BLOCK_R)
    n_ok = n < N
    lanes = n_ok[:, None] & (m < R)[None, :]
    nl = n.to(tl.int64) * h + head
    acc = tl.full((BLOCK_N, BLOCK_R), 1.0, tl.float32)
    ex = tl.zeros((BLOCK_N, BLOCK_R), tl.int32)
    for p0 in range(0, P, RESCALE):
        for q in tl.static_range(RESCALE):
            p = p0 + q
            live = n_ok & (n * 0 + p < P)  # past the last coordinate every factor is 1
            c, f = _interval(tl.load(t_ptr + nl * P + p, mask=live, other=0.0), K)
            row = ((head * P + p) * K + c).to(tl.int64) * (3 * R)
            ptr = coef_ptr + row[:, None] + m[None, :]
            used = lanes & live[:, None]
            a0 = tl.load(ptr, mask=used, other=1.0)
            a1 = tl.load(ptr + R, mask=used, other=0.0)
            a2 = tl.load(ptr + 2 * R, mask=used, other=0.0)
            fc = f[:, None]
            acc = acc * _signed_magnitude(a0 + fc * (a1 + fc * a2), eps)
        acc, ex = _rescale(acc, ex)
    tl.store(M_ptr + nl[:, None] * R + m[None, :], _ldexp(acc, ex), mask=lanes)


@triton.jit
def spline_backward_kernel(
    t_ptr, coef_ptr, M_ptr, gM_ptr, gt_ptr, gcoef_ptr, N, h, P, eps,
    K: tl.constexpr, R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,
):  # fmt: skip
    """Program (coordinate p, head l): walks the ids in order; writes grad_t[:, l, p] and the
    K x 3 x R gradient rows of (l, p), summed as one-hot (K x ids) @ (ids x R) products."""
    p = tl.program_id(0)
    head = tl.program_id(1)
    m = tl.arange(0, BLOCK_R)
    k = tl.arange(0, BLOCK_K)
    m_ok = m < R
    first = (head * P + p).to(tl.int64) * K
    g0 = tl.zeros((BLOCK_K, BLOCK_R), tl.float32)
    g1 = tl.zeros((BLOCK_K, BLOCK_R), tl.float32)
    g2 = tl.zeros((BLOCK_K, BLOCK_R), tl.float32)
    for n0 in range(0, N, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        n_ok = n < N
        lanes = n_ok[:, None] & m_ok[None, :]
        nl = n.to(tl.int64) * h + head
        c, f = _interval(tl.load(t_ptr + nl * P + p, mask=n_ok, other=0.0), K)
        ptr = coef_ptr + ((first + c) * (3 * R))[:, None] + m[None, :]
        a0 = tl.load(ptr, mask=lanes, other=0.0)
        a1 = tl.load(ptr + R, mask=lanes, other=0.0)
        a2 = tl.load(ptr + 2 * R, mask=lanes, other=0.0)
        fc = f[:, None]
        out = nl[:, None] * R + m[None, :]
        gmm = tl.load(gM_ptr + out, mask=lanes, other=0.0) * tl.load(
            M_ptr + out, mask=lanes, other=0.0
        )
        # d M / d phi_p = M / phi_p, |phi_p| clamped to eps as in the forward
        gp = gmm / _signed_magnitude(a0 + fc * (a1 + fc * a2), eps)
        gt = tl.sum(gp * (a1 + (2.0 * f)[:, None] * a2), axis=1) * (K - 1.0)
        tl.store(gt_ptr + nl * P + p, gt, mask=n_ok)
        onehot = ((k[:, None] == c[None, :]) & n_ok[None, :]).to(tl.float32)  # [BLOCK_K, ids]
        gf = gp * fc
        g0 += tl.dot(onehot, gp, input_precision="ieee")
        g1 += tl.dot(onehot, gf, input_precision="ieee")
        g2 += tl.dot(onehot, gf * fc, input_precision="ieee")
    rows = ((first + k) * (3 * R))[:, None] + m[None, :]
    mask = (k < K)[:, None] & m_ok[None, :]
    tl.store(gcoef_ptr + rows, g0, mask=mask)
    tl.store(gcoef_ptr + rows + R, g1, mask=mask)
    tl.store(gcoef_ptr + rows + 2 * R, g2, mask=mask)
