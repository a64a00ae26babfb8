/* The CPU's general warp: any 3x3 inverse map (rotation, shear, perspective) of one uint8 sample,
 * with the plain-torch reference's semantics (kernels/reference/warp.py), followed by the
 * pointwise pass (colour matrix, clamp, grey, scale and bias, cast), written straight into the
 * sample's slot of the output tensor (any layout, through its strides). Also the pointwise pass
 * alone and channel sums, for the stage whose colour ops need the warped images' means.
 *
 * Per output pixel: the source point (float64), the antialiasing stretch per axis (the norms of
 * the Jacobian's rows, clamped to [1, max scale]; constant for an affine map), each axis's
 * filter taps once (weight, buffer offset, whether the tap reads the fill colour), then the 2-D
 * sum over the taps, three channels at a time, divided by the product of the weight sums. Two
 * implementations of that:
 *
 *   - exact (warp_pixel; any pixel, any machine): the reference's operations in its order:
 *     float64 weights, float32 products and sums, the border rules, clip-box drops, fill taps.
 *     Equal to the reference's numbers (up to libm's hypot against torch's, in the last bit).
 *   - vector (block8; x86-64 with AVX2 and F16C, checked at run time): 8 pixels of a row at
 *     once, weights in float64 rounded to float32, the same sums in the same order. Blocks whose
 *     taps all lie in the clip box and the decoded buffer (the bulk of a rotated crop) read each
 *     tap row as 16-byte chunks (4 packed pixels per load, shuffled into 8 lanes); the others
 *     apply the border rules, drops and fill colour per lane, with one 4-byte load per pixel and
 *     tap. It differs from the reference by float32 rounding of the weights (2.4e-3 grey levels at
 *     most measured, tests/test_warp_cpu.py). Blocks it cannot take (coordinates beyond +-1e9,
 *     a border index more than one period away) go to the exact path, as row tails do.
 *
 * Axis-aligned samples (crops, resizes, flips, translations, zoom-outs) take two 1-D passes
 * instead (warp_separable.h), within the same tolerance.
 *
 * Measured (AMD EPYC, 1 thread, 224 x 224 float16 NCHW out, RandomResizedCrop + RandomRotate(10)
 * regions of the ImageNet sample): 3.1 ms per image with the exact path alone, 0.6 ms with the
 * vector blocks (0.13 ms for torch's separable resize of an unrotated window). Half of the vector
 * time is loading taps: the 32-bit gather instruction was slower here than scalar loads.
 *
 * Through a displacement field (an ElasticTransform's, pp_warp_deformed) each source point goes
 * through the field on the way (kernels/deform.py's operations, in float64, one pixel at a time
 * also in the vector blocks): 3.2 ms per 224 x 224 image of a RandomResizedCrop on 2 shared
 * cores against 5.8 ms with the exact path alone (1.2 ms without the field).
 *
 * No fused multiply-adds (the flags of setup.py; the AVX2 functions do not enable FMA). Memory
 * traffic per sample: the source pixels under the output's footprint, read in place from the
 * decoded region (each once per tap that overlaps it, mostly from L1/L2), and one write of the
 * output in its dtype. No intermediate image. Called once per sample from worker threads through
 * ctypes (CDLL: the GIL is released for the call).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "border.h" /* the border rules (CONSTANT ... WRAP, border_index) */

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define PP_AVX2 1
#endif

enum { NEAREST = 0, BILINEAR = 1, BICUBIC = 2 };
enum { U8 = 0, F32 = 1, F16 = 2, BF16 = 3 };
#define MAX_TAPS 80 /* ceil(2 R s) for bicubic (R = 2) at the largest stretch (16) is 64 */
#define FAR 1e15    /* source coordinates are clamped to +-FAR (a perspective map's horizon) */

/* geo (int64): the arguments of pp_warp_general */
enum {
    G_SRC_H, G_SRC_W, G_SRC_C, G_SRC_SY, G_SRC_SX, G_SRC_SC, /* buffer size and byte strides */
    G_OUT_H, G_OUT_W, G_INTERP, G_BORDER, G_ANTIALIAS,
    G_DTYPE, G_DST_SY, G_DST_SX, G_DST_SC, G_DST_C, /* output: dtype, element strides, channels */
    G_COLOR, G_CLAMP, G_LEN
};
/* row (float64, WarpSpec.packed_np's row): inverse 0..8, image h, w 9..10, origin y, x 11..12,
 * clip y0, x0, y1, x1 13..16, max scale y, x 17..18, taps y, x 19..20.
 * pw (float32): fill 0..2, colour matrix 3..14 (3 rows of 4), scale 15..17, bias 18..20. */

typedef struct {
    int64_t size, origin, lo, hi, len, stride; /* image size, buffer origin, clip, buffer length, bytes */
    int taps;
} Axis;

typedef struct {
    const uint8_t *src;
    int64_t ch1, ch2, bytes; /* byte offsets of channels 1 and 2 (grey: 0); bytes spanned */
    Axis ay, ax;
    double m[9], img_h, img_w, lim_y, lim_x, sx_const, sy_const, radius;
    int affine, aa, interp, border;
    float fill[3], a[12], k[3], b[3];
    int dtype, out_c, color, clamp;
    char *dst;
    int64_t dsy, dsx, dsc;
    const double *drow; /* a displacement field's row (kernels.deform, 22 values) or NULL */
    const float *field; /* its nodes, float32 [2, gh, gw] */
    int64_t gh, gw;
} Job;

/* ------------------------------------------------------------------------- the exact pixel */
static inline double filter(double t, int interp) { /* filters.filter_weight, the same operations */
    double a = fabs(t);
    if (interp == BILINEAR) {
        double w = 1.0 - a;
        return w > 0.0 ? w : 0.0;
    }
    const double c = -0.5;
    if (a < 1.0) return ((c + 2.0) * a - (c + 3.0)) * a * a + 1.0;
    if (a < 2.0) return ((c * a - 5.0 * c) * a + 8.0 * c) * a - 4.0 * c;
    return 0.0;
}

/* One axis's taps around coord (reference._axis_taps): byte offsets into the buffer, weights (0
 * for dropped taps), fill flags; returns how many, and their weight sum (in tap order). */
static inline int axis_taps(const Job *J, const Axis *ax, double coord, double scale, int inside, int64_t *off,
                            double *w, unsigned char *fill, double *sum, int *any_fill) {
    int n = ax->taps;
    double first;
    if (!(coord > -FAR)) coord = -FAR; /* NaN too */
    if (coord > FAR) coord = FAR;
    if (J->interp == NEAREST) {
        first = floor(coord);
    } else {
        first = floor(coord - 0.5 - J->radius * scale) + 1.0;
        double need = ceil(2.0 * J->radius * scale - 1e-9); /* taps beyond these weigh 0 */
        if (need < n) n = need < 1.0 ? 1 : (int)need;
    }
    double s = 0.0;
    for (int t = 0; t < n; t++) {
        double k = first + t;
        double wt = J->interp == NEAREST ? 1.0 : filter((k + 0.5 - coord) / scale, J->interp);
        int outside;
        int64_t kb = border_index((int64_t)k, ax->size, J->border, &outside);
        int f = outside && !inside;
        int keep = f || (!outside && kb >= ax->lo && kb < ax->hi);
        int64_t b = kb - ax->origin; /* inside the buffer for every kept tap; clamped for the others */
        b = b < 0 ? 0 : (b >= ax->len ? ax->len - 1 : b);
        off[t] = b * ax->stride;
        w[t] = keep ? wt : 0.0;
        fill[t] = (unsigned char)f;
        *any_fill |= f;
        s += w[t];
    }
    *sum = s;
    return n;
}

/* One component (nodes f: [gh, gw]) of a displacement field at node coordinates (tx, ty), with
 * kernels.deform.field_at's operations in its order. */
static inline double field_component(const Job *J, const float *f, double tx, double ty) {
    const double cw = J->drow[21], ch = J->drow[20];
    tx = fmin(fmax(tx, 0.0), cw - 1.0);
    ty = fmin(fmax(ty, 0.0), ch - 1.0);
    const double jx = fmin(floor(tx), cw - 2.0), jy = fmin(floor(ty), ch - 2.0);
    const double ax = tx - jx, ay = ty - jy;
    const float *r = f + (int64_t)jy * J->gw + (int64_t)jx;
    const double top = (double)r[0] * (1.0 - ax) + (double)r[1] * ax;
    const double bottom = (double)r[J->gw] * (1.0 - ax) + (double)r[J->gw + 1] * ax;
    return top * (1.0 - ay) + bottom * ay;
}

/* The source point of output point (x, y) through the displacement field (kernels.deform.displaced):
 * inner (drow 0..8) into the frame, plus the field, then outer (drow 9..17). */
static void deformed_point(const Job *J, double x, double y, double *u, double *v) {
    const double *d = J->drow;
    const double qz = d[6] * x + d[7] * y + d[8];
    double fx = (d[0] * x + d[1] * y + d[2]) / qz;
    double fy = (d[3] * x + d[4] * y + d[5]) / qz;
    if (fx != fx || fy != fy) { /* a perspective's horizon: no field read */
        *u = *v = NAN;
        return;
    }
    const double tx = fx / d[19], ty = fy / d[18];
    const double dx = field_component(J, J->field, tx, ty);
    const double dy = field_component(J, J->field + J->gh * J->gw, tx, ty);
    fx = fx + dx;
    fy = fy + dy;
    const double rz = d[15] * fx + d[16] * fy + d[17];
    *u = (d[9] * fx + d[10] * fy + d[11]) / rz;
    *v = (d[12] * fx + d[13] * fy + d[14]) / rz;
}

/* The warped value of output pixel (i, j), in pixel units, as the reference computes it. */
/* A pixel's colour from its weighted sums: divided by the weights' total, or the fill where
 * no tap had weight (every tap outside a "constant" border). */
static inline void normalised(const Job *J, float acc0, float acc1, float acc2, float norm, float c[3]) {
    if (norm > 0.0f) {
        const float d = norm > 1e-12f ? norm : 1e-12f;
        c[0] = acc0 / d;
        c[1] = acc1 / d;
        c[2] = acc2 / d;
    } else {
        c[0] = J->fill[0];
        c[1] = J->fill[1];
        c[2] = J->fill[2];
    }
}

static void warp_pixel(const Job *J, int64_t i, int64_t j, float c[3]) {
    const double *m = J->m;
    const double x = (double)j + 0.5, y = (double)i + 0.5;
    const double pz = m[6] * x + m[7] * y + m[8];
    double u = (m[0] * x + m[1] * y + m[2]) / pz;
    double v = (m[3] * x + m[4] * y + m[5]) / pz;
    double sx = J->sx_const, sy = J->sy_const;
    if (J->aa && !J->affine) {
        sx = fmin(fmax(hypot((m[0] - u * m[6]) / pz, (m[1] - u * m[7]) / pz), 1.0), J->lim_x);
        sy = fmin(fmax(hypot((m[3] - v * m[6]) / pz, (m[4] - v * m[7]) / pz), 1.0), J->lim_y);
    }
    if (J->drow) deformed_point(J, x, y, &u, &v); /* the stretch stays the matrices' */
    const int inside = u >= 0.0 && u < J->img_w && v >= 0.0 && v < J->img_h;
    int64_t offy[MAX_TAPS], offx[MAX_TAPS];
    double wy[MAX_TAPS], wx[MAX_TAPS], sum_y, sum_x;
    unsigned char fy[MAX_TAPS], fx[MAX_TAPS];
    int any_fill = 0;
    const int ny = axis_taps(J, &J->ay, v, sy, inside, offy, wy, fy, &sum_y, &any_fill);
    const int nx = axis_taps(J, &J->ax, u, sx, inside, offx, wx, fx, &sum_x, &any_fill);
    const int64_t ch1 = J->ch1, ch2 = J->ch2;
    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f;
    for (int ty = 0; ty < ny; ty++) {
        if (wy[ty] == 0.0) continue; /* adds 0 in the reference */
        const uint8_t *r = J->src + offy[ty];
        for (int tx = 0; tx < nx; tx++) {
            const float w = (float)(wy[ty] * wx[tx]);
            if (any_fill && (fy[ty] | fx[tx])) {
                acc0 += w * J->fill[0];
                acc1 += w * J->fill[1];
                acc2 += w * J->fill[2];
            } else {
                const uint8_t *p = r + offx[tx];
                acc0 += w * (float)p[0];
                acc1 += w * (float)p[ch1];
                acc2 += w * (float)p[ch2];
            }
        }
    }
    normalised(J, acc0, acc1, acc2, (float)sum_y * (float)sum_x, c);
}

/* ------------------------------------------------------------------------- the pointwise pass */
static inline float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* IEEE binary16, round to nearest even: torch's cast (c10's fp16_ieee_from_fp32_value, from the
 * FP16 library), the same operations */
static inline uint16_t to_half(float f) {
    float base = (fabsf(f) * bits_float(0x77800000u)) * bits_float(0x08800000u);
    const uint32_t w = float_bits(f), shl1_w = w + w, sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = bits_float((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = float_bits(base);
    const uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

static inline uint16_t to_bfloat16(float f) { /* c10::BFloat16's round to nearest even */
    if (f != f) return 0x7FC0u;
    const uint32_t u = float_bits(f);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static inline void store(const Job *J, int64_t at, float v) {
    switch (J->dtype) {
    case U8: ((uint8_t *)J->dst)[at] = (uint8_t)nearbyintf(v); break; /* ties to even, as torch.round */
    case F32: ((float *)J->dst)[at] = v; break;
    case F16: ((uint16_t *)J->dst)[at] = to_half(v); break;
    default: ((uint16_t *)J->dst)[at] = to_bfloat16(v); break;
    }
}

static inline float clampf(float v) { return v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v); }

/* PointwiseSpec on one warped pixel c (finish_sample's order), stored at output pixel (i, j) */
static void finish_pixel(const Job *J, int64_t i, int64_t j, const float *c) {
    float c0 = c[0], c1 = c[1], c2 = c[2];
    if (J->color) { /* rows of 3 weights and an offset */
        const float *a = J->a;
        const float r0 = a[0] * c0 + a[1] * c1 + a[2] * c2 + a[3];
        const float r1 = a[4] * c0 + a[5] * c1 + a[6] * c2 + a[7];
        const float r2 = a[8] * c0 + a[9] * c1 + a[10] * c2 + a[11];
        c0 = r0;
        c1 = r1;
        c2 = r2;
    }
    if (J->clamp) {
        c0 = clampf(c0);
        c1 = clampf(c1);
        c2 = clampf(c2);
    }
    const int64_t at = i * J->dsy + j * J->dsx;
    if (J->out_c == 1) {
        const float g = c0 * 0.299f + c1 * 0.587f + c2 * 0.114f;
        store(J, at, g * J->k[0] + J->b[0]);
    } else {
        store(J, at, c0 * J->k[0] + J->b[0]);
        store(J, at + J->dsc, c1 * J->k[1] + J->b[1]);
        store(J, at + 2 * J->dsc, c2 * J->k[2] + J->b[2]);
    }
}

#include "warp_avx2.h" /* the vector blocks (rows_avx2), under PP_AVX2 */
#include "warp_separable.h" /* axis-aligned samples in two 1-D passes (warp_separable) */

/* ------------------------------------------------------------------------- the entry point */
/* Sample warp + pointwise into dst. src: buffer pixel (0, 0); returns 0, or -1 for arguments it
 * cannot take (the caller then runs the reference). */
/* The pointwise epilogue's maps (pw[3..20]: the colour matrix, then the per-channel scale and
 * offset) and the destination's address and strides, shared by both entry points. */
static void set_epilogue(Job *J, const float *pw, void *dst, int64_t dsy, int64_t dsx, int64_t dsc) {
    for (int q = 0; q < 3; q++) {
        J->k[q] = pw[15 + q];
        J->b[q] = pw[18 + q];
    }
    for (int q = 0; q < 12; q++) J->a[q] = pw[3 + q];
    J->dst = (char *)dst;
    J->dsy = dsy;
    J->dsx = dsx;
    J->dsc = dsc;
}

static int64_t warp_general(const uint8_t *src, const int64_t *geo, const double *row, const float *pw, void *dst,
                            const double *drow, const float *field, const int64_t *dims) {
    Job J;
    J.drow = drow;
    J.field = field;
    J.gh = dims ? dims[0] : 0;
    J.gw = dims ? dims[1] : 0;
    if (drow && (J.gh < 2 || J.gw < 2 || !(drow[20] >= 2 && drow[20] <= J.gh && drow[21] >= 2 && drow[21] <= J.gw)))
        return -1;
    const int64_t H = geo[G_OUT_H], W = geo[G_OUT_W], C = geo[G_SRC_C];
    const int64_t sh = geo[G_SRC_H], sw = geo[G_SRC_W], sy = geo[G_SRC_SY], sx = geo[G_SRC_SX], sc = geo[G_SRC_SC];
    J.interp = (int)geo[G_INTERP];
    J.border = (int)geo[G_BORDER];
    J.dtype = (int)geo[G_DTYPE];
    J.aa = geo[G_ANTIALIAS] && J.interp != NEAREST;
    J.out_c = (int)geo[G_DST_C];
    J.color = (int)geo[G_COLOR];
    J.clamp = (int)geo[G_CLAMP];
    if (C < 1 || sh < 1 || sw < 1 || sy < 0 || sx < 0 || sc < 0 || (J.out_c != 1 && J.out_c != 3) ||
        !(row[19] >= 1 && row[19] <= MAX_TAPS && row[20] >= 1 && row[20] <= MAX_TAPS) || J.interp < NEAREST ||
        J.interp > BICUBIC || J.border < CONSTANT || J.border > WRAP || J.dtype < U8 || J.dtype > BF16)
        return -1;
    J.src = src;
    J.ch1 = (C > 1 ? 1 : 0) * sc; /* grey: channel 0 three times, as the reference reads it */
    J.ch2 = (C > 2 ? 2 : C - 1) * sc;
    J.bytes = (sh - 1) * sy + (sw - 1) * sx + (C - 1) * sc + 1;
    for (int q = 0; q < 9; q++) J.m[q] = row[q];
    J.img_h = row[9];
    J.img_w = row[10];
    J.lim_y = row[17];
    J.lim_x = row[18];
    J.radius = J.interp == NEAREST ? 0.5 : (J.interp == BILINEAR ? 1.0 : 2.0);
    J.ay = (Axis){(int64_t)row[9], (int64_t)row[11], (int64_t)row[13], (int64_t)row[15], sh, sy, (int)row[19]};
    J.ax = (Axis){(int64_t)row[10], (int64_t)row[12], (int64_t)row[14], (int64_t)row[16], sw, sx, (int)row[20]};
    J.affine = J.m[6] == 0.0 && J.m[7] == 0.0 && J.m[8] == 1.0;
    J.sx_const = J.sy_const = 1.0;
    if (J.aa && J.affine) { /* the stretch of an affine map is the same everywhere */
        J.sx_const = fmin(fmax(hypot(J.m[0], J.m[1]), 1.0), J.lim_x);
        J.sy_const = fmin(fmax(hypot(J.m[3], J.m[4]), 1.0), J.lim_y);
    }
    for (int q = 0; q < 3; q++) J.fill[q] = pw[q];
    set_epilogue(&J, pw, dst, geo[G_DST_SY], geo[G_DST_SX], geo[G_DST_SC]);
    if (!J.drow && separable_ok(&J, H, W) && warp_separable(&J, H, W) == 0) return 0; /* not through a field */
#ifdef PP_AVX2
    /* 4-byte loads hold a pixel's channels (channel stride 1, or grey); int32 offsets */
    if (has_avx2() && (C == 1 || sc == 1) && J.bytes < ((int64_t)1 << 31) - 64 && (int64_t)row[9] < (1 << 30) &&
        (int64_t)row[10] < (1 << 30)) {
        rows_avx2(&J, H, W, C == 1);
        return 0;
    }
#endif
    float c[3];
    for (int64_t i = 0; i < H; i++)
        for (int64_t j = 0; j < W; j++) {
            warp_pixel(&J, i, j, c);
            finish_pixel(&J, i, j, c);
        }
    return 0;
}

int64_t pp_warp_general(const uint8_t *src, const int64_t *geo, const double *row, const float *pw, void *dst) {
    return warp_general(src, geo, row, pw, dst, NULL, NULL, NULL);
}

/* pp_warp_general through a displacement field: drow float64 [22] (kernels.deform.Deformation.rows'
 * row: inner, outer, node spacing y, x, node counts y, x), field float32 [2, gh, gw] (the sample's
 * nodes, padding included), dims int64 [2] (gh, gw). */
int64_t pp_warp_deformed(const uint8_t *src, const int64_t *geo, const double *row, const float *pw, void *dst,
                         const double *drow, const float *field, const int64_t *dims) {
    return warp_general(src, geo, row, pw, dst, drow, field, dims);
}

/* ------------------------------------------------------------------------- the pointwise pass alone */
#include "warp_pointwise.h" /* pp_pointwise, pp_channel_sums */
