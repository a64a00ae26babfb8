/* pixelpipe's planner hot spots in C: the same arithmetic as the numpy code they replace
 * (random.prefix / op_blocks / Draws hashes, RandomResizedCrop.sample, StagePlan.inverse and
 * .regions for affine plans), one call per batch instead of dozens of numpy calls. The numpy
 * code stays the reference; tests/test_native.py checks that both give the same numbers.
 *
 * Built by pixelpipe/native/__init__.py with `cc -O3 -ffp-contract=off`: no fused multiply-adds
 * and no fast-math, so every float64 operation rounds as numpy's does. exp() is the C library's;
 * numpy may use its own SIMD exp, which can differ in the last bit (see the loader's docstring).
 */
#include <math.h>
#include <stdint.h>

#include "hash.h"

/* out[i] = the state after (seed, epoch, index): h is the state after the seed (and after the
 * epoch when epochs is NULL); epochs: per-sample epochs or NULL. */
void pp_prefix(uint32_t h, const int64_t *epochs, const int64_t *indices, int64_t n, uint32_t *out) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t s = epochs ? fold(h, epochs[i]) : h;
        out[i] = fold(s, indices[i]);
    }
}

/* Draws._hash_np: out [n, d], row i's draws[c] of op `op` (the prefix folded with the op, then
   with the draw, then mixed). */
void pp_draw_hashes(const uint32_t *prefix, int64_t n, int64_t op, const int64_t *draws, int64_t d,
                    uint32_t *out) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t s = fold(prefix[i], op);
        for (int64_t c = 0; c < d; c++) *out++ = mix(fold(s, draws[c]));
    }
}

/* random.op_blocks: out [n, sum(draws)], op k's draws 0..draws[k]-1 side by side. */
void pp_op_blocks(const uint32_t *prefix, int64_t n, const int64_t *ops, const int64_t *draws, int64_t k,
                  uint32_t *out) {
    int64_t width = 0;
    for (int64_t j = 0; j < k; j++) width += draws[j];
    for (int64_t i = 0; i < n; i++) {
        uint32_t *row = out + i * width;
        for (int64_t j = 0; j < k; j++) {
            uint32_t s = fold(prefix[i], ops[j]);
            for (int64_t d = 0; d < draws[j]; d++) *row++ = mix(fold(s, d));
        }
    }
}

/* RandomResizedCrop.sample: prefix [n] (random.prefix) and op (the op's position): draw d of
 * sample i is unit(mix(fold(fold(prefix[i], op), d))), hashed only for the tries it takes
 * (draws 2t, 2t + 1 for try t; 2 tries and 2 tries + 1 for the window's corner). sizes [n, 2]
 * (h, w); out [n, 4]: top, left, height, width. s0, ds: the area range's start and width;
 * r0, r1: the ratio range; lr0, dlr: log(r0) and log(r1) - log(r0), as Python computes them. */
void pp_random_resized_crop(const uint32_t *prefix, int64_t op, const double *sizes, int64_t n, int64_t tries,
                            double s0, double ds, double r0, double r1, double lr0, double dlr, double *out) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t s = fold(prefix[i], op);
        double H = sizes[2 * i], W = sizes[2 * i + 1], area = H * W, h = 0.0, w = 0.0;
        int found = 0;
        for (int64_t t = 0; t < tries && !found; t++) {
            double target = area * (s0 + ds * unit(mix(fold(s, 2 * t))));
            double aspect = exp(lr0 + dlr * unit(mix(fold(s, 2 * t + 1))));
            double cw = rint(sqrt(target * aspect)), ch = rint(sqrt(target / aspect));
            if (cw > 0 && ch > 0 && cw <= W && ch <= H) {
                h = ch;
                w = cw;
                found = 1;
            }
        }
        double top, left;
        if (found) {
            h = fmax(h, 1.0);
            w = fmax(w, 1.0);
            top = fmin(floor(unit(mix(fold(s, 2 * tries))) * (H - h + 1)), H - h);
            left = fmin(floor(unit(mix(fold(s, 2 * tries + 1))) * (W - w + 1)), W - w);
        } else {  /* a centred crop, the aspect ratio clamped into the range */
            double ratio = W / H;
            w = ratio < r0 ? W : (ratio > r1 ? rint(H * r1) : W);
            h = ratio < r0 ? rint(W / r0) : H;
            if (ratio > r1) h = H;
            h = fmax(h, 1.0);
            w = fmax(w, 1.0);
            top = floor((H - h) / 2);
            left = floor((W - w) / 2);
        }
        out[4 * i] = top;
        out[4 * i + 1] = left;
        out[4 * i + 2] = h;
        out[4 * i + 3] = w;
    }
}

/* StagePlan.inverse and .regions for affine matrices: m [n, 3, 3] input -> output, out_sizes and
 * in_sizes [n, 2] (h, w); wide: border reflect or wrap (an axis whose footprint leaves the image
 * takes all of it). Writes inv [n, 3, 3] and regions [n, 4] (y0, x0, y1, x1). Returns -1, or
 * the first sample whose matrix is not affine (nothing written for it: numpy's general path
 * takes the batch), or n + the first sample whose inverse is not finite. */
int64_t pp_affine_regions(const double *m, const double *out_sizes, const double *in_sizes, int64_t n, int wide,
                          double eps, double *inv, int64_t *regions) {
    for (int64_t i = 0; i < n; i++) {
        const double *a = m + 9 * i;
        if (a[6] != 0.0 || a[7] != 0.0 || a[8] != 1.0) return i;
    }
    for (int64_t i = 0; i < n; i++) {
        const double *q = m + 9 * i;
        double a = q[0], b = q[1], tx = q[2], c = q[3], d = q[4], ty = q[5];
        double det = a * d - b * c;
        double *r = inv + 9 * i;
        r[0] = d / det;
        r[1] = -b / det;
        r[2] = (b * ty - d * tx) / det;
        r[3] = -c / det;
        r[4] = a / det;
        r[5] = (c * tx - a * ty) / det;
        r[6] = 0.0;
        r[7] = 0.0;
        r[8] = 1.0;
        for (int k = 0; k < 6; k++)
            if (!isfinite(r[k])) return n + i;
        double h = out_sizes[2 * i], w = out_sizes[2 * i + 1];
        double size[2] = {in_sizes[2 * i + 1], in_sizes[2 * i]}; /* (w, h): axis 0 is x */
        double a0[2], a1[2];
        for (int ax = 0; ax < 2; ax++) {
            double p = r[3 * ax] * w, q2 = r[3 * ax + 1] * h, c0 = r[3 * ax + 2];
            double lo = (fmin(p, 0.0) + fmin(q2, 0.0)) + c0;
            double hi = (fmax(p, 0.0) + fmax(q2, 0.0)) + c0;
            double lo0 = floor(lo + eps), hi1 = ceil(hi - eps);
            if (wide && (lo0 < 0 || hi1 > size[ax])) {
                lo0 = 0.0;
                hi1 = size[ax];
            }
            lo0 = fmin(fmax(lo0, 0.0), size[ax] - 1);
            hi1 = fmax(fmin(hi1, size[ax]), lo0 + 1);
            a0[ax] = lo0;
            a1[ax] = hi1;
        }
        int64_t *g = regions + 4 * i;
        g[0] = (int64_t)a0[1];
        g[1] = (int64_t)a0[0];
        g[2] = (int64_t)a1[1];
        g[3] = (int64_t)a1[0];
    }
    return -1;
}

/* WarpSpec.packed_np for affine inverses: out [n, 21] = inverse (9), image h, w, origin y, x,
 * clip y0, x0, y1, x1, max scale y, x, taps y, x. stretch: 0 = no antialiasing stretch (all
 * ones), 1 = the affine Jacobian's row norms, clamped to [1, max_scale]; two_r: 2 * the filter's
 * support (taps = max(ceil(two_r * scale - 1e-9), 1)), or 0 for nearest (one tap). Returns -1,
 * or the first sample whose inverse is not affine (numpy's general path takes the batch). */
int64_t pp_warp_rows(const double *inv, const int64_t *image_size, const int64_t *origin, const int64_t *clip,
                     int64_t n, int stretch, double two_r, double max_scale, double *out) {
    for (int64_t i = 0; i < n; i++) {
        const double *r = inv + 9 * i;
        if (r[6] != 0.0 || r[7] != 0.0 || r[8] != 1.0) return i;
    }
    for (int64_t i = 0; i < n; i++) {
        const double *r = inv + 9 * i;
        double *o = out + 21 * i;
        for (int k = 0; k < 9; k++) o[k] = r[k];
        o[9] = (double)image_size[2 * i];
        o[10] = (double)image_size[2 * i + 1];
        o[11] = (double)origin[2 * i];
        o[12] = (double)origin[2 * i + 1];
        for (int k = 0; k < 4; k++) o[13 + k] = (double)clip[4 * i + k];
        double sy = 1.0, sx = 1.0;
        if (stretch) {
            sy = fmin(fmax(hypot(r[3], r[4]), 1.0), max_scale);
            sx = fmin(fmax(hypot(r[0], r[1]), 1.0), max_scale);
        }
        o[17] = sy;
        o[18] = sx;
        if (two_r > 0) {
            o[19] = fmax((double)(int64_t)ceil(two_r * sy - 1e-9), 1.0);
            o[20] = fmax((double)(int64_t)ceil(two_r * sx - 1e-9), 1.0);
        } else {
            o[19] = o[20] = 1.0;
        }
    }
    return -1;
}

/* Draws.uniform_np / bernoulli_np of draw d from the op's state s: float32 arithmetic, as numpy's
 * float32(low) + float32(high - low) * unit. */
static inline float uniform32(uint32_t s, int64_t d, double low, double high) {
    float u = (float)(mix(fold(s, d)) >> 8) * (float)(1.0 / (1 << 24));
    return (float)low + (float)(high - low) * u;
}

static inline int bernoulli(uint32_t s, int64_t d, double p) {
    return (float)(mix(fold(s, d)) >> 8) * (float)(1.0 / (1 << 24)) < (float)p;
}

/* RandomFlip.sample + transform: m [n, 3, 3] (mirror x with probability ph, y with pv). */
void pp_random_flip(const uint32_t *prefix, int64_t op, const double *sizes, int64_t n, double ph, double pv,
                    double *m) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t s = fold(prefix[i], op);
        int h = bernoulli(s, 0, ph), v = bernoulli(s, 1, pv);
        double *o = m + 9 * i;
        o[0] = h ? -1.0 : 1.0;
        o[1] = 0.0;
        o[2] = h ? sizes[2 * i + 1] : 0.0;
        o[3] = 0.0;
        o[4] = v ? -1.0 : 1.0;
        o[5] = v ? sizes[2 * i] : 0.0;
        o[6] = o[7] = 0.0;
        o[8] = 1.0;
    }
}

/* RandomAffine.sample: out [n, 6] angle, tx, ty, scale, shear x, shear y (degrees and pixels).
 * ranges: degrees (2), translate fractions (2), scale (2), shear (4); has: translate, scale,
 * shear given (bits 1, 2, 4). */
void pp_random_affine(const uint32_t *prefix, int64_t op, const double *sizes, int64_t n, double p,
                      const double *ranges, int has, double *out) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t s = fold(prefix[i], op);
        double *o = out + 6 * i;
        int on = bernoulli(s, 0, p);
        double angle = (double)uniform32(s, 1, ranges[0], ranges[1]), tx = 0.0, ty = 0.0, zoom = 1.0, shx = 0.0,
               shy = 0.0;
        if (has & 1) {
            tx = rint((double)uniform32(s, 2, -1.0, 1.0) * ranges[2] * sizes[2 * i + 1]);
            ty = rint((double)uniform32(s, 3, -1.0, 1.0) * ranges[3] * sizes[2 * i]);
        }
        if (has & 2) zoom = (double)uniform32(s, 4, ranges[4], ranges[5]);
        if (has & 4) {
            shx = (double)uniform32(s, 5, ranges[6], ranges[7]);
            shy = (double)uniform32(s, 6, ranges[8], ranges[9]);
        }
        o[0] = on ? angle : 0.0;
        o[1] = on ? tx : 0.0;
        o[2] = on ? ty : 0.0;
        o[3] = on ? zoom : 1.0;
        o[4] = on ? shx : 0.0;
        o[5] = on ? shy : 0.0;
    }
}

/* RandomAffine.transform from numpy's trigonometry: trig [n, 4] cos, sin of the angle, tan of
 * the x and y shears; params [n, 6] as pp_random_affine writes them; m [n, 3, 3]: the linear
 * part rotation @ shear * scale about the image centre, shifted by (tx, ty). */
void pp_affine_matrix(const double *trig, const double *params, const double *sizes, int64_t n, double *m) {
    for (int64_t i = 0; i < n; i++) {
        const double *t = trig + 4 * i, *q = params + 6 * i;
        double c = t[0], s = t[1], kx = t[2], ky = t[3], z = q[3];
        double a = (c + s * ky) * z, b = (c * kx + s) * z, cc = (c * ky - s) * z, d = (c - s * kx) * z;
        double cy = sizes[2 * i] / 2, cx = sizes[2 * i + 1] / 2;
        double ox = sizes[2 * i + 1] / 2 + q[1], oy = sizes[2 * i] / 2 + q[2];
        double *o = m + 9 * i;
        o[0] = a;
        o[1] = b;
        o[2] = ox - (a * cx + b * cy);
        o[3] = cc;
        o[4] = d;
        o[5] = oy - (cc * cx + d * cy);
        o[6] = o[7] = 0.0;
        o[8] = 1.0;
    }
}

/* ColorJitter.sample: out [n, 4] brightness, contrast, saturation, hue; ranges [4, 2] with
 * given[k] = 0 for a factor not jittered (its base: 1, or 0 for hue). */
void pp_color_jitter(const uint32_t *prefix, int64_t op, int64_t n, double p, const double *ranges,
                     const int64_t *given, double *out) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t s = fold(prefix[i], op);
        int on = bernoulli(s, 0, p);
        for (int k = 0; k < 4; k++) {
            double base = k == 3 ? 0.0 : 1.0;
            double f = given[k] ? (double)uniform32(s, 1 + k, ranges[2 * k], ranges[2 * k + 1]) : base;
            out[4 * i + k] = on ? f : base;
        }
    }
}

/* ColorJitter.color from numpy's trigonometry: trig [n, 2] cos, sin of 2 pi hue; params [n, 4];
 * means [k, n, 3] (k = 1 with zeros for none); hue [3, 3, 3] (color._HUE); grey [3]. out
 * [k, n, 3, 4]: b c (HUE0 + s cos HUE1 + s sin HUE2), offset b (1 - c) grey(mean). */
void pp_jitter_color(const double *trig, const double *params, const double *means, int64_t k, int64_t n,
                     const double *hue, const double *grey, double *out) {
    for (int64_t i = 0; i < n; i++) {
        const double *q = params + 4 * i;
        double b = q[0], c = q[1], s = q[2], sc = s * trig[2 * i], ss = s * trig[2 * i + 1], scale = b * c;
        double lin[9];
        for (int e = 0; e < 9; e++) lin[e] = scale * ((hue[e] + sc * hue[9 + e]) + ss * hue[18 + e]);
        double gain = b * (1 - c);
        for (int64_t j = 0; j < k; j++) {
            const double *mu = means + 3 * (j * n + i);
            double offset = gain * ((mu[0] * grey[0] + mu[1] * grey[1]) + mu[2] * grey[2]);
            double *o = out + 12 * (j * n + i);
            for (int r = 0; r < 3; r++) {
                o[4 * r] = lin[3 * r];
                o[4 * r + 1] = lin[3 * r + 1];
                o[4 * r + 2] = lin[3 * r + 2];
                o[4 * r + 3] = offset;
            }
        }
    }
}
