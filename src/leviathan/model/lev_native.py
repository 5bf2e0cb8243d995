"""A fused CPU kernel for LEV's spline product (steps 4-5), compiled on first use.

Why: in eager PyTorch the product costs ~10 passes over the N x h x d_seed x r factors
(gather of a [3, r] block, two multiply-adds, sign, abs, clamp, log, sum, exp), each a
separate memory-bound kernel; inductor's fused version is still ~6x off a single pass on
CPU (measured, BENCHMARKS.md). This kernel does one pass: per (id, head) a running product
of r lanes kept in registers, each factor one gather of 3 coefficients and two multiply-adds.

Forward: M = prod_p phi_p as a direct product with safe rescaling instead of logs: every
RESCALE factors each lane's exponent is moved into an integer (bit operations, exact), so
no partial product over- or underflows (|phi| is clamped to eps first, as in the plain
path) unless RESCALE consecutive factors multiply to
beyond 2^+-125 (each |phi| ~ 2^15 or 2^-15 on average: far outside what phi takes; |phi| is
bounded by max |S|). A zero factor gives an exact 0.

Backward (given gMM = grad_M * M, the same formula as the plain path): d M / d phi_p =
M / phi_p with |phi_p| clamped to eps exactly as `spline_product._plain_backward` does. A thread owns a
(head, block of coordinates) and its coefficient rows, and adds its ids' gradients into them
in id order: deterministic and free of atomics (no index_add_). The per-id lane pass is
vectorised; the lane sums of grad_t are taken several ids at a time, each in lane order.

The kernel is plain C (no torch headers), compiled once per source + compiler flags into
a cache directory (`LEVIATHAN_KERNEL_CACHE`, default ~/.cache/leviathan/kernels) with the
system C compiler (`CC`, default cc), named by the sha256 of what it is built from and
checked against the sha256 its build recorded before it is loaded (a library that differs is
rebuilt, never loaded); where no compiler is available `available()` is False and
LEV uses the plain torch path (same numbers to fp32 rounding; tests compare the two).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import torch

from leviathan.io import read_json, sha256_file, write_json

log = logging.getLogger(__name__)
RESCALE = 8

_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>

#define RESCALE %(rescale)d

/* The knot interval around t's nearest centre, c in [0, K-1] (also for a NaN t, which gives
   c = 0 and a NaN f: the product turns NaN, never an out-of-range read), and the offset
   f = x - c. */
static inline void knot_interval(float t, int K, int *c, float *f) {
    float x = t * (float)(K - 1);
    float cc = floorf(x + 0.5f);
    cc = cc >= 0.f ? cc : 0.f;
    cc = cc <= (float)(K - 1) ? cc : (float)(K - 1);
    *c = (int)cc;
    *f = x - cc;
}

/* t [N, h, P], coef [h, P, K, 3, r], M [N, h, r] (all fp32, contiguous).
   Tiled: a block of NB ids runs through the P coordinates together, so the coefficients of
   one (head, coordinate), K x 3 x r floats, are read from cache NB times per fetch instead of
   once; the running products of the block stay in L1. Each lane's arithmetic (order of the
   factors, the rescaling points) is exactly that of one id alone. */
#define NB 32
void lev_spline_forward(const float *t, const float *coef, float *M,
                        int64_t N, int h, int P, int K, int r, float eps, int threads) {
    int64_t blocks = (N + NB - 1) / NB;
    #pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
    for (int l = 0; l < h; ++l) {
        for (int64_t b = 0; b < blocks; ++b) {
            int64_t n0 = b * NB;
            int nb = (int)(N - n0 < NB ? N - n0 : NB);
            float acc[NB * r];
            int32_t ex[NB * r];
            for (int i = 0; i < nb * r; ++i) { acc[i] = 1.f; ex[i] = 0; }
            for (int p = 0; p < P; ++p) {
                const float *cp = coef + ((int64_t)l * P + p) * K * 3 * r;
                int rescale = (p + 1) %% RESCALE == 0 || p == P - 1;
                for (int j = 0; j < nb; ++j) {
                    int c; float f;
                    knot_interval(t[((n0 + j) * h + l) * P + p], K, &c, &f);
                    const float *a = cp + c * 3 * r, *a1 = a + r, *a2 = a + 2 * r;
                    float *aj = acc + j * r;
                    for (int m = 0; m < r; ++m) {  /* |phi| clamped to eps, as the plain path */
                        float phi = a[m] + f * (a1[m] + f * a2[m]);
                        float mag = fabsf(phi) < eps ? eps : fabsf(phi);  /* a NaN stays NaN */
                        aj[m] *= copysignf(mag, phi);
                    }
                    if (rescale) {
                        int32_t *ej = ex + j * r;
                        for (int m = 0; m < r; ++m) {  /* acc = mantissa in [1, 2) x 2^e, exact */
                            uint32_t bits; memcpy(&bits, &aj[m], 4);
                            uint32_t e = (bits >> 23) & 0xffu;
                            int ok = (e - 1u) < 254u;  /* normal numbers only; 0, inf, nan kept */
                            uint32_t nbits = ok ? ((bits & 0x807fffffu) | 0x3f800000u) : bits;
                            ej[m] += ok ? (int32_t)e - 127 : 0;
                            memcpy(&aj[m], &nbits, 4);
                        }
                    }
                }
            }
            for (int j = 0; j < nb; ++j) {
                float *out = M + ((n0 + j) * h + l) * r;
                for (int m = 0; m < r; ++m) out[m] = ldexpf(acc[j * r + m], ex[j * r + m]);
            }
        }
    }
}

/* gMM = grad_M * M [N, h, r]; grad_t [N, h, P] (written); grad_coef [h, P, K, 3, r] (+=).
   A thread owns a (head, block of PB coordinates) and so its coefficient rows, which it adds
   its ids' gradients into in id order (deterministic, no atomics). It walks the ids NB_BWD at a
   time; for each coordinate of its block, each id's r lanes are one vectorised pass, and the
   sums over lanes that give grad_t are then taken for the NB_BWD ids together, each id's sum in
   lane order m = 0..r-1 (as one id alone): independent chains that overlap, where one serial
   chain per id would stall the pass. An id's t, grad_t and gMM stay in L1 across the block. */
#define NB_BWD 8
#define PB 16
void lev_spline_backward(const float *restrict t, const float *restrict coef,
                         const float *restrict gMM, float *restrict grad_t,
                         float *restrict grad_coef, int64_t N, int h, int P, int K, int r,
                         float eps, int threads) {
    int pblocks = (P + PB - 1) / PB;
    #pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
    for (int l = 0; l < h; ++l) {
        for (int pb = 0; pb < pblocks; ++pb) {
            int p1 = (pb + 1) * PB < P ? (pb + 1) * PB : P;
            float prod[NB_BWD * r];
            memset(prod, 0, sizeof(prod));
            for (int64_t n0 = 0; n0 < N; n0 += NB_BWD) {
                int nb = (int)(N - n0 < NB_BWD ? N - n0 : NB_BWD);
                for (int p = pb * PB; p < p1; ++p) {
                    int64_t lp = ((int64_t)l * P + p) * K * 3 * r;
                    for (int j = 0; j < nb; ++j) {
                        int c; float f;
                        knot_interval(t[((n0 + j) * h + l) * P + p], K, &c, &f);
                        const float *a = coef + lp + c * 3 * r, *a1 = a + r, *a2 = a + 2 * r;
                        float *g = grad_coef + lp + c * 3 * r, *g1 = g + r, *g2 = g + 2 * r;
                        const float *gm = gMM + ((n0 + j) * h + l) * r;
                        float *pj = prod + j * r;
                        float f2 = 2.f * f;
                        #pragma GCC ivdep  /* g, g1, g2, pj: disjoint rows of r floats */
                        for (int m = 0; m < r; ++m) {
                            float phi = a[m] + f * (a1[m] + f * a2[m]);
                            float mag = fabsf(phi) < eps ? eps : fabsf(phi);  /* a NaN stays NaN */
                            float gp = gm[m] / copysignf(mag, phi);
                            pj[m] = gp * (a1[m] + f2 * a2[m]);
                            g[m] += gp; g1[m] += gp * f; g2[m] += gp * f * f;
                        }
                    }
                    float gt[NB_BWD] = {0.f};
                    for (int m = 0; m < r; ++m)
                        for (int j = 0; j < NB_BWD; ++j) gt[j] += prod[j * r + m];
                    for (int j = 0; j < nb; ++j)
                        grad_t[((n0 + j) * h + l) * P + p] = gt[j] * (float)(K - 1);
                }
            }
        }
    }
}
""" % {"rescale": RESCALE}  # noqa: UP031 (C source: braces stay literal)

# -std=c99 is ISO C, so -ffp-contract=off: no fused multiply-adds, every rounding as written
_FLAGS = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c99"]


def _cache_dir() -> Path:
    root = os.environ.get("LEVIATHAN_KERNEL_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "leviathan" / "kernels"


def _cpu_id() -> str:
    """What `-march=native` compiles for: the machine and its CPU's model and feature flags, so a
    cache shared between kinds of nodes (a cluster's home directory) never hands one node a
    library built for another's instruction set."""

    info = ""
    try:
        lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
        info = "\n".join(
            sorted(
                {
                    ln
                    for ln in lines
                    if ln.startswith(("model name", "flags", "Features", "CPU part"))
                }
            )
        )
    except OSError:
        pass
    return f"{platform.machine()}\n{platform.processor()}\n{info}"


@cache
def _library() -> ctypes.CDLL | None:
    """Compile (once, cached by content) and load the kernel; None without a C compiler.

    The cache is keyed by the sha256 of what the library is built from (source, flags,
    compiler, CPU); beside each library its build recorded that key and the library's own
    sha256, both checked before it is loaded: a library that differs (a damaged or foreign
    file, in a cache that `LEVIATHAN_KERNEL_CACHE` may share) is rebuilt, not loaded."""
    if os.environ.get("LEVIATHAN_NATIVE_KERNEL", "1") == "0":
        return None
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        return None
    key = hashlib.sha256((_SOURCE + " ".join(_FLAGS) + cc + _cpu_id()).encode()).hexdigest()
    lib = _cache_dir() / f"lev_spline_{key}.so"
    if not _verified(lib, key) and not _build(cc, lib, key):
        return None
    dll = ctypes.CDLL(str(lib))
    i64, i32, f32, ptr = ctypes.c_int64, ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    dll.lev_spline_forward.argtypes = [ptr, ptr, ptr, i64, i32, i32, i32, i32, f32, i32]
    dll.lev_spline_backward.argtypes = [ptr, ptr, ptr, ptr, ptr, i64, i32, i32, i32, i32, f32, i32]
    return dll


def _record(lib: Path) -> Path:
    """What the build of `lib` recorded: its key and its own sha256."""
    return lib.with_name(lib.name + ".sha256.json")


def _verified(lib: Path, key: str) -> bool:
    """Whether `lib` is the library its build recorded for `key` (else it is rebuilt)."""
    if not lib.exists():
        return False

    try:
        record = read_json(_record(lib))
        ok = record.get("key") == key and record.get("sha256") == sha256_file(lib)
    except (OSError, ValueError, AttributeError):
        ok = False
    if not ok:
        log.warning("%s: not the library built from this source (%s); rebuilding it", lib, key[:16])
    return ok


def _build(cc: str, lib: Path, key: str) -> bool:
    """Compile the kernel into `lib` and record its key and sha256 beside it (each renamed
    into place whole: concurrent processes see a whole library or none); False if the
    compiler fails."""

    lib.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
        src = Path(tmp) / "lev_spline.c"
        src.write_text(_SOURCE)
        out = Path(tmp) / lib.name
        done = subprocess.run(
            [cc, *_FLAGS, str(src), "-o", str(out), "-lm"], capture_output=True, text=True
        )
        if done.returncode != 0:
            return False
        write_json(_record(lib), {"key": key, "sha256": sha256_file(out)})
        out.replace(lib)
    return True


def available() -> bool:
    return _library() is not None


def _ptr(x: torch.Tensor) -> int:
    return x.data_ptr()


def _check(t: torch.Tensor, coef: torch.Tensor) -> tuple[int, int, int, int, int]:
    N, h, P = t.shape
    K, r = coef.shape[2], coef.shape[4]
    assert coef.shape == (h, P, K, 3, r), coef.shape
    for x in (t, coef):
        assert x.dtype == torch.float32 and x.is_contiguous() and x.device.type == "cpu"
    return N, h, P, K, r


def spline_forward(t: torch.Tensor, coef: torch.Tensor, eps: float) -> torch.Tensor:
    """M [N, h, r] for t [N, h, P] and coef [h, P, K, 3, r] (fp32, contiguous, CPU)."""
    N, h, P, K, r = _check(t, coef)
    M = torch.empty(N, h, r, dtype=torch.float32)
    lib = _library()
    assert lib is not None, "native LEV kernel unavailable (no C compiler)"
    lib.lev_spline_forward(
        _ptr(t), _ptr(coef), _ptr(M), N, h, P, K, r, eps, torch.get_num_threads()
    )
    return M


def spline_backward(
    t: torch.Tensor, coef: torch.Tensor, gMM: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_t [N, h, P], grad_coef [h, P, K, 3, r]) given gMM = grad_M * M [N, h, r]."""
    N, h, P, K, r = _check(t, coef)
    gMM = gMM.to(torch.float32).contiguous()
    grad_t = torch.empty_like(t)
    grad_coef = torch.zeros_like(coef)
    lib = _library()
    assert lib is not None, "native LEV kernel unavailable (no C compiler)"
    lib.lev_spline_backward(
        _ptr(t),
        _ptr(coef),
        _ptr(gMM),
        _ptr(grad_t),
        _ptr(grad_coef),
        N,
        h,
        P,
        K,
        r,
        eps,
        torch.get_num_threads(),
    )
    return grad_t, grad_coef
