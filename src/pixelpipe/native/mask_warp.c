/* The nearest-neighbour warp of label images (masks) on the CPU (see kernels/cpu/masks.py): the
 * fast form of kernels/reference/masks.py, one call per batch, the GIL released (ctypes' CDLL).
 *
 * Why in C: the twin computes every output pixel's source point as whole [N, H, W] float64
 * planes, about fifteen of them (and as many int64 and bool ones) before one gather: 119 ms per
 * 1024x1024 mask on 2 cores for a rotation, 14 ms for an axis-aligned map. Here each output pixel
 * is computed and written in one pass, nothing larger than a row kept: 8 ms on one core.
 *
 * The same numbers: the source point is the twin's float64 arithmetic in its order
 * (pz = (m6 x + m7 y) + m8, u = ((m0 x + m1 y) + m2) / pz, v likewise, x and y the pixel centre;
 * the build forbids fused multiply-adds: -ffp-contract=off); NaN becomes LIMIT and the point is
 * clamped to [-LIMIT, LIMIT] before floor, as torch.nan_to_num and clamp do; the border rules
 * are kernels.filters.border_index's; a label beyond a "constant" border is `fill`. Labels are
 * copied as `elem` bytes each (any integer or bool dtype), C channels per pixel. */
#include <math.h> /* isnan */
#include <stdint.h>
#include <string.h>

#include "border.h" /* the border rules, warp.c's */

#define LIMIT 1073741824.0 /* 2^30: far points (a perspective's other side) held where int64 is safe */

static inline int64_t floor_index(double t) {
    if (isnan(t)) t = LIMIT;
    if (t > LIMIT) t = LIMIT;
    if (t < -LIMIT) t = -LIMIT;
    int64_t k = (int64_t)t; /* toward zero, exact within +-LIMIT; one less below a negative */
    return (double)k > t ? k - 1 : k;  /* floor without a libm call */
}

/* n samples; sample s's mask: hw[2s] x hw[2s+1] pixels of c labels of elem bytes at
   flat + offsets[s] * elem (offsets in labels); inverse: float64 [n, 9] output -> mask
   coordinates; out: [n, H, W, c] labels. Returns 0. */
int64_t pp_mask_warp(const uint8_t *flat, int64_t elem, const int64_t *offsets, const int64_t *hw, int64_t c,
                     const double *inverse, int64_t n, int64_t H, int64_t W, int64_t border, const uint8_t *fill,
                     uint8_t *out) {
    const int64_t pixel = c * elem;
    for (int64_t s = 0; s < n; s++) {
        const double *m = inverse + 9 * s;
        const int64_t mh = hw[2 * s], mw = hw[2 * s + 1];
        const uint8_t *src = flat + offsets[s] * elem;
        uint8_t *dst = out + s * H * W * pixel;
        /* an affine map's pz is exactly 1: dividing by it changes nothing, so it is skipped */
        const int affine = m[6] == 0.0 && m[7] == 0.0 && m[8] == 1.0;
        for (int64_t i = 0; i < H; i++) {
            const double y = (double)i + 0.5;
            for (int64_t j = 0; j < W; j++, dst += pixel) {
                const double x = (double)j + 0.5;
                double u = (m[0] * x + m[1] * y) + m[2];
                double v = (m[3] * x + m[4] * y) + m[5];
                if (!affine) {
                    const double pz = (m[6] * x + m[7] * y) + m[8];
                    u /= pz;
                    v /= pz;
                }
                int out_u, out_v;
                const int64_t ku = border_index(floor_index(u), mw, (int)border, &out_u);
                const int64_t kv = border_index(floor_index(v), mh, (int)border, &out_v);
                if ((out_u || out_v) && border == CONSTANT) {
                    for (int64_t ch = 0; ch < c; ch++) memcpy(dst + ch * elem, fill, (size_t)elem);
                } else if (pixel == 1) {
                    *dst = src[kv * mw + ku];
                } else {
                    memcpy(dst, src + (kv * mw + ku) * pixel, (size_t)pixel);
                }
            }
        }
    }
    return 0;
}
