"""The Triton kernels of `lev_triton` (imported only there, on first use: Triton is optional).

Layouts (fp32, contiguous): t [N, h, P]; coef [h, P, K, 3, r] (the per-interval table of
`spline_product.knot_interval_coefficients`, row (l, p, c) holding A0, A1, A2); M, grad_M [N, h, r].
Arithmetic per factor as `lev_native`'s C source, operation for operation.
"""

from __future__ import annotations

import triton
import triton.language as tl

# globals a kernel reads must be constexpr
SIGN_AND_MANTISSA = tl.constexpr(-2139095041)  # 0x807FFFFF as an int32: all but the exponent
ONE_EXPONENT = tl.constexpr(0x3F800000)  # the exponent bits of 1.0
TF32_BITS = tl.constexpr(-8192)  # 0xFFFFE000: sign, exponent, tf32's leading 10 mantissa bits


@triton.jit
def _interval(tv, K: tl.constexpr):
    """The knot interval c of t's nearest centre in [0, K-1] (0 for a NaN t: never an
    out-of-range row) and the offset f = x - c, x = t (K - 1)."""
    x = tv * (K - 1.0)
    cc = tl.floor(x + 0.5)
    cc = tl.where(cc >= 0.0, cc, 0.0)
    cc = tl.where(cc <= K - 1.0, cc, K - 1.0)
    # clamped again in integers: the same value, and a bound the compiler's 32-bit row
    # arithmetic provably keeps (leviathan.compiled.ranges cannot see through a float)
    c = tl.minimum(tl.maximum(cc.to(tl.int32), 0), K - 1)
    return c, x - cc


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
    t_ptr,
    coef_ptr,
    M_ptr,
    N,
    h,
    P,
    eps,
    K: tl.constexpr,
    R: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_R: tl.constexpr,
    RESCALE: tl.constexpr,
    EVEN: tl.constexpr,
):
    """Program (block of ids, head, block of lanes): M[n, head, m] = prod_p phi[n, head, p, m]
    in registers. Lanes split across programs so a block of ids is large (the coefficient
    rows it gathers per coordinate, at most K, serve more ids). EVEN: RESCALE divides P and
    BLOCK_R divides R, so no coefficient load needs a mask."""
    head = tl.program_id(1)
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = tl.program_id(2) * BLOCK_R + tl.arange(0, BLOCK_R)
    n_ok = n < N
    lanes = n_ok[:, None] & (m < R)[None, :]
    nl = n.to(tl.int64) * h + head
    acc = tl.full((BLOCK_N, BLOCK_R), 1.0, tl.float32)
    ex = tl.zeros((BLOCK_N, BLOCK_R), tl.int32)
    for p0 in range(0, P, RESCALE):
        for q in tl.static_range(RESCALE):  # unrolled: one loop step per RESCALE factors
            p = p0 + q
            live = n_ok & (n * 0 + p < P)  # past the last coordinate every factor is 1
            c, f = _interval(tl.load(t_ptr + nl * P + p, mask=live, other=0.0), K)
            row = ((head * P + p) * K + c).to(tl.int64) * (3 * R)
            ptr = coef_ptr + row[:, None] + m[None, :]
            if EVEN:  # every row read is in the table (an idle id reads interval 0's)
                a0, a1, a2 = tl.load(ptr), tl.load(ptr + R), tl.load(ptr + 2 * R)
            else:
                used = lanes & live[:, None]
                a0 = tl.load(ptr, mask=used, other=1.0)
                a1 = tl.load(ptr + R, mask=used, other=0.0)
                a2 = tl.load(ptr + 2 * R, mask=used, other=0.0)
            fc = f[:, None]
            acc = acc * _signed_magnitude(a0 + fc * (a1 + fc * a2), eps)
        acc, ex = _rescale(acc, ex)
    tl.store(M_ptr + nl[:, None] * R + m[None, :], _ldexp(acc, ex), mask=lanes)


@triton.jit
def _onehot_sum(acc, onehot, x):
    """acc + onehot @ x, fp32 to within a rounding, on tf32 tensor cores: x = hi + lo with hi
    its leading 11 significant bits (exact in tf32) and lo the rest (exact in fp32, rounded to
    tf32's 11 bits in the product, truncated: 2^-21 of x at most); the one-hot's 0s and 1s are exact."""
    hi = (x.to(tl.int32, bitcast=True) & TF32_BITS).to(tl.float32, bitcast=True)
    acc = tl.dot(onehot, hi, acc, input_precision="tf32")
    return tl.dot(onehot, x - hi, acc, input_precision="tf32")


@triton.jit
def _coordinate(
    t_ptr,
    coef_ptr,
    gt_ptr,
    gmm,
    p,
    P,
    n,
    n_ok,
    lanes,
    nl,
    head,
    m,
    k,
    eps,
    g0,
    g1,
    g2,
    K: tl.constexpr,
    R: tl.constexpr,
):
    """One coordinate p for a block of ids: writes grad_t[ids, head, p], adds the ids'
    gradient rows of (head, p) into g0, g1, g2 (d/dA0, d/dA1, d/dA2, [BLOCK_K, BLOCK_R])."""
    live = n_ok & (n * 0 + p < P)
    c, f = _interval(tl.load(t_ptr + nl * P + p, mask=live, other=0.0), K)
    ptr = coef_ptr + (((head * P + p) * K + c).to(tl.int64) * (3 * R))[:, None] + m[None, :]
    used = lanes & live[:, None]
    a0 = tl.load(ptr, mask=used, other=0.0)
    a1 = tl.load(ptr + R, mask=used, other=0.0)
    a2 = tl.load(ptr + 2 * R, mask=used, other=0.0)
    fc = f[:, None]
    # d M / d phi_p = M / phi_p, |phi_p| clamped to eps as in the forward
    gp = tl.where(used, gmm / _signed_magnitude(a0 + fc * (a1 + fc * a2), eps), 0.0)
    gt = tl.sum(gp * (a1 + (2.0 * f)[:, None] * a2), axis=1) * (K - 1.0)
    tl.store(gt_ptr + nl * P + p, gt, mask=live)
    onehot = ((k[:, None] == c[None, :]) & live[None, :]).to(tl.float32)  # [BLOCK_K, ids]
    gf = gp * fc
    return (
        _onehot_sum(g0, onehot, gp),
        _onehot_sum(g1, onehot, gf),
        _onehot_sum(g2, onehot, gf * fc),
    )


@triton.jit
def _store_rows(gcoef_ptr, g0, g1, g2, head, p, P, k, m, K: tl.constexpr, R: tl.constexpr):
    """The K x 3 x R gradient rows of (head, p), unless p is past the last coordinate."""
    rows = (((head * P + p) * K + k).to(tl.int64) * (3 * R))[:, None] + m[None, :]
    mask = ((k < K) & (k * 0 + p < P))[:, None] & (m < R)[None, :]
    tl.store(gcoef_ptr + rows, g0, mask=mask)
    tl.store(gcoef_ptr + rows + R, g1, mask=mask)
    tl.store(gcoef_ptr + rows + 2 * R, g2, mask=mask)


@triton.jit
def spline_backward_kernel(
    t_ptr,
    coef_ptr,
    M_ptr,
    gM_ptr,
    gt_ptr,
    gcoef_ptr,
    N,
    h,
    P,
    eps,
    split_ids,
    K: tl.constexpr,
    R: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,
    COORDINATES: tl.constexpr,
):
    """Program (4 coordinates p0..p0+3, head, split s): walks split s's ids in order, forming
    grad_M * M once per block of ids for the 4; writes their grad_t and owns their K x 3 x R
    gradient rows in split s's partial table, summed as one-hot (K x ids) @ (ids x R)
    products in registers. COORDINATES: the launch's coordinates per program (4, unrolled
    below)."""
    tl.static_assert(COORDINATES == 4, "the backward kernel unrolls 4 coordinates per program")
    p0 = tl.program_id(0) * COORDINATES
    head = tl.program_id(1)
    split = tl.program_id(2)
    gcoef_ptr += split.to(tl.int64) * (h * P * K * 3 * R)  # this split's partial table
    m = tl.arange(0, BLOCK_R)
    k = tl.arange(0, BLOCK_K)
    zero = tl.zeros((BLOCK_K, BLOCK_R), tl.float32)
    a0, a1, a2, b0, b1, b2, c0, c1, c2, d0, d1, d2 = (zero,) * 12
    start = split * split_ids
    stop = tl.minimum(N, start + split_ids)
    for n0 in range(start, stop, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        n_ok = n < stop
        lanes = n_ok[:, None] & (m < R)[None, :]
        nl = n.to(tl.int64) * h + head
        out = nl[:, None] * R + m[None, :]
        gmm = tl.load(gM_ptr + out, mask=lanes, other=0.0) * tl.load(
            M_ptr + out, mask=lanes, other=0.0
        )
        shared = (t_ptr, coef_ptr, gt_ptr, gmm)
        ids = (n, n_ok, lanes, nl, head, m, k, eps)
        a0, a1, a2 = _coordinate(*shared, p0, P, *ids, a0, a1, a2, K, R)
        b0, b1, b2 = _coordinate(*shared, p0 + 1, P, *ids, b0, b1, b2, K, R)
        c0, c1, c2 = _coordinate(*shared, p0 + 2, P, *ids, c0, c1, c2, K, R)
        d0, d1, d2 = _coordinate(*shared, p0 + 3, P, *ids, d0, d1, d2, K, R)
    _store_rows(gcoef_ptr, a0, a1, a2, head, p0, P, k, m, K, R)
    _store_rows(gcoef_ptr, b0, b1, b2, head, p0 + 1, P, k, m, K, R)
    _store_rows(gcoef_ptr, c0, c1, c2, head, p0 + 2, P, k, m, K, R)
    _store_rows(gcoef_ptr, d0, d1, d2, head, p0 + 3, P, k, m, K, R)
