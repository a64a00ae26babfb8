/* A policy's pixel operations (AutoAugment, RandAugment, TrivialAugmentWide, TimmRandAugment:
 * ops/policies.py's PolicySteps of pixel kind) on float32 CPU images, every step of every sample
 * of a piece in one call, the GIL released (ctypes' CDLL): their CPU form (kernels/cpu/policy.py).
 *
 * Why in C: the twin (PolicySteps.apply / apply_owned) runs, per piece of 8 samples, a gather,
 * the operation's torch form and a write-back for every (step, operation) pair the piece uses:
 * a dozen or more small torch calls, each a pass over its rows, about 36% of the CPU RandAugment
 * pipeline's time. Here each sample goes through all its steps while it is in the cache, one
 * pass (or two, for the operations that measure the image first) per step.
 * Measured once (single runs, one thread, a 2-core x86-64 machine with AVX2), 8 224x224 RGB
 * images through RandAugment(2, 9)'s pixel part, 14 of the 16 (step, sample) pairs doing
 * something: 1.1 ms for this call (1.9 ms with the program's sampling, PolicySteps.program)
 * against 7.3 ms for the twin's apply_owned (the engine's path; 12.0 ms for apply).
 *
 * Semantics (the twin's float32 arithmetic in its order; the build forbids fused multiply-adds,
 * -ffp-contract=off, so each product and sum rounds to float32 as torch's does). Per sample and
 * step one operation code (kernels/cpu/policy.py's CODES) and one number v:
 *   1 Brightness   clamp(x * v)
 *   2 Color        clamp(v * x + (1 - v) * grey), grey = (x0 * .299 + x1 * .587) + x2 * .114
 *                  of the pixel (the one channel itself for grey images)
 *   3 Contrast     clamp(v * x + (1 - v) * mean), mean the image's grey mean
 *   4 Sharpness    inside pixels: s = 5 x + the 8 neighbours row by row (each sum rounded), s / 13
 *                  (a division: torch divides on the CPU), clamp((x - s) * v + s); the outermost
 *                  pixels kept; images of 2 pixels or fewer a side kept whole
 *   5 Posterize    (level & v) * float(1 / 255)   (v: the mask, a whole number)
 *   6 Solarize     x * 255 >= v ? 1 - x : x       (v: the threshold in levels)
 *   7 AutoContrast clamp((x - lo) / (hi - lo)) per channel, a flat channel (hi <= lo) kept
 *   8 Equalize     per channel, its histogram of levels -> table (levels.equalize_reference's
 *                  rule), x -> table[level] * float(1 / 255)
 *   9 Invert       1 - x
 *  10 SolarizeAdd  (level < 128 ? min(level + v, 255) : level) * float(1 / 255)   (timm's; v whole)
 * clamp is to [0, 1]; level = round(255 x) half to even, clamped to 0..255 (1.5 x 2^23 added and
 * taken away: torch.round's result below 2^22, and any larger value clamps alike).
 * One difference: Contrast's mean. torch's .mean() sums the greys in its own float32 order,
 * which C cannot follow; here the greys are summed in float64 (eight fixed lanes, then the
 * lanes in a fixed order, the same on every run and machine) and the sum / HW rounded once to
 * float32, at least as close to the exact mean. The tests hold every other value to the bit.
 * NaNs are not looked at (the images are in [0, 1]).
 *
 * The loops run over consecutive pixels with each value's operations in the order above, which
 * the compiler vectorises without reordering any value's arithmetic (the reductions over pixels
 * keep eight lanes by hand: the grey sum in an array, the lowest and highest values in GCC's
 * vector types; selections between two computed floats go through their bits, `pick`, which
 * vectorises where a plain `?:` did not; Posterize makes its levels in a loop of their own, for
 * the same reason); the whole body is compiled a
 * second time for AVX2 and that copy runs where the CPU has it: the same bits either way. No
 * global state but the AVX2 answer (a benign race), so the Engine's threads call it at once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "avx2.h" /* has_avx2() */

enum { NONE, BRIGHTNESS, COLOR, CONTRAST, SHARPNESS, POSTERIZE, SOLARIZE, AUTOCONTRAST, EQUALIZE, INVERT, SOLARIZE_ADD };

#define INLINE static inline __attribute__((always_inline))
#define LANES 8
#define INV255 ((float)(1.0 / 255.0)) /* what torch makes of `* (1.0 / 255.0)` on float32 */

INLINE float clamp01(float v) {
    v = v < 0.0f ? 0.0f : v;
    return v > 1.0f ? 1.0f : v;
}

/* round(255 v) half to even, clamped to 0..255, as a whole float32 number */
INLINE float level_of(float v) {
    float r = (v * 255.0f + 12582912.0f) - 12582912.0f;
    r = r < 0.0f ? 0.0f : r;
    return r > 255.0f ? 255.0f : r;
}

/* cond ? a : b, both computed, chosen through their bits: gcc does not vectorise a plain select
 * on a comparison of two variable floats (it may not evaluate what might trap, -ftrapping-math) */
INLINE float pick(int cond, float a, float b) {
    const int32_t take = -(int32_t)cond;
    int32_t x, y;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    const int32_t bits = (x & take) | (y & ~take);
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

INLINE float grey_of(float v0, float v1, float v2) { return (v0 * 0.299f + v1 * 0.587f) + v2 * 0.114f; }

INLINE void brightness(float *restrict p, int64_t n, float f) {
    for (int64_t i = 0; i < n; i++) p[i] = clamp01(p[i] * f);
}

INLINE void invert(float *restrict p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = 1.0f - p[i];
}

/* lv[i] = the level of p[i] (n bytes of the call's own) */
INLINE void levels(const float *restrict p, int64_t n, uint8_t *restrict lv) {
    for (int64_t i = 0; i < n; i++) lv[i] = (uint8_t)(int32_t)level_of(p[i]);
}

/* two loops: gcc does not vectorise float -> int -> float in one (without -fno-trapping-math) */
INLINE void posterize(float *restrict p, int64_t n, int32_t mask, uint8_t *restrict lv) {
    levels(p, n, lv);
    for (int64_t i = 0; i < n; i++) p[i] = (float)(lv[i] & mask) * INV255;
}

INLINE void solarize(float *restrict p, int64_t n, float at) {
    for (int64_t i = 0; i < n; i++) {
        const float v = p[i];
        p[i] = pick(v * 255.0f >= at, 1.0f - v, v);
    }
}

/* timm's SolarizeAdd: the levels under 128 raised by `add` (a whole number), at most to 255 */
INLINE void solarize_add(float *restrict p, int64_t n, float add, uint8_t *restrict lv) {
    levels(p, n, lv);
    for (int64_t i = 0; i < n; i++) {
        const float l = (float)lv[i];
        const float up = l + add;
        p[i] = pick(l < 128.0f, up > 255.0f ? 255.0f : up, l) * INV255;
    }
}

/* v x + rest, clamped: Contrast (rest = (1 - v) mean) */
INLINE void blend_constant(float *restrict p, int64_t n, float f, float rest) {
    for (int64_t i = 0; i < n; i++) p[i] = clamp01(f * p[i] + rest);
}

/* Color on a grey image: the pixel is its own grey */
INLINE void blend_self(float *restrict p, int64_t n, float f, float g) {
    for (int64_t i = 0; i < n; i++) {
        const float v = p[i];
        p[i] = clamp01(f * v + g * v);
    }
}

/* Color on RGB: each channel blended with the pixel's grey (g = 1 - v) */
INLINE void blend_grey(float *restrict p0, float *restrict p1, float *restrict p2, int64_t n, float f, float g) {
    for (int64_t i = 0; i < n; i++) {
        const float v0 = p0[i], v1 = p1[i], v2 = p2[i];
        const float rest = g * grey_of(v0, v1, v2);
        p0[i] = clamp01(f * v0 + rest);
        p1[i] = clamp01(f * v1 + rest);
        p2[i] = clamp01(f * v2 + rest);
    }
}

/* The image's grey mean: the greys summed in float64 in LANES fixed lanes, rounded once */
INLINE float grey_mean(const float *restrict p0, const float *restrict p1, const float *restrict p2, int64_t n,
                       int grey) {
    double acc[LANES] = {0.0};
    int64_t i = 0;
    if (grey) {
        for (; i + LANES <= n; i += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += (double)p0[i + j];
        for (; i < n; i++) acc[0] += (double)p0[i];
    } else {
        for (; i + LANES <= n; i += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += (double)grey_of(p0[i + j], p1[i + j], p2[i + j]);
        for (; i < n; i++) acc[0] += (double)grey_of(p0[i], p1[i], p2[i]);
    }
    const double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    return (float)(sum / (double)n);
}

/* eight lanes of floats (GCC's vector extension: one AVX register, or two SSE ones) for the
 * lowest and highest values: the compiler vectorised neither a reduction nor lanes kept in arrays */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

INLINE void autocontrast(float *restrict p, int64_t n) {
    v8f lo, hi, v;
    for (int j = 0; j < LANES; j++) lo[j] = hi[j] = p[0];
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        memcpy(&v, p + i, sizeof v);
        const v8i below = v < lo, above = v > hi;
        lo = (v8f)(((v8i)v & below) | ((v8i)lo & ~below));
        hi = (v8f)(((v8i)v & above) | ((v8i)hi & ~above));
    }
    float l = lo[0], h = hi[0];
    for (int j = 1; j < LANES; j++) {
        l = lo[j] < l ? lo[j] : l;
        h = hi[j] > h ? hi[j] : h;
    }
    for (; i < n; i++) {
        l = p[i] < l ? p[i] : l;
        h = p[i] > h ? p[i] : h;
    }
    const int flat = h <= l;
    const float off = flat ? 0.0f : l, span = flat ? 1.0f : h - l;
    for (i = 0; i < n; i++) p[i] = clamp01((p[i] - off) / span);
}

/* lv: n bytes of the call's own */
INLINE void equalize(float *restrict p, int64_t n, uint8_t *restrict lv) {
    levels(p, n, lv);
    int64_t h4[4][256];
    memset(h4, 0, sizeof h4);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) { /* four histograms: no store waits on the one before */
        h4[0][lv[i]]++;
        h4[1][lv[i + 1]]++;
        h4[2][lv[i + 2]]++;
        h4[3][lv[i + 3]]++;
    }
    for (; i < n; i++) h4[0][lv[i]]++;
    int64_t hist[256];
    int top = 0;
    for (int k = 0; k < 256; k++) {
        hist[k] = (h4[0][k] + h4[1][k]) + (h4[2][k] + h4[3][k]);
        if (hist[k] > 0) top = k; /* the highest level present */
    }
    const int64_t step = (n - hist[top]) / 255;
    if (step == 0) { /* the identity table: level / 255 */
        for (i = 0; i < n; i++) p[i] = (float)lv[i] * INV255;
        return;
    }
    float table[256];
    int64_t below = 0;
    for (int k = 0; k < 256; k++) {
        const int64_t t = (step / 2 + below) / step;
        table[k] = (float)(t < 255 ? t : 255) * INV255;
        below += hist[k];
    }
    for (i = 0; i < n; i++) p[i] = table[lv[i]];
}

/* RandomSharpness's blend of one plane (H, W > 2) in place; prev, cur: W floats each, the
 * original rows above and at the row being written (the row below is not written yet) */
INLINE void sharpen(float *restrict p, int64_t H, int64_t W, float f, float *restrict prev, float *restrict cur) {
    memcpy(prev, p, sizeof(float) * (size_t)W);
    for (int64_t y = 1; y < H - 1; y++) {
        float *restrict out = p + y * W;
        const float *restrict down = out + W;
        memcpy(cur, out, sizeof(float) * (size_t)W);
        for (int64_t x = 1; x < W - 1; x++) {
            const float v = cur[x];
            float s = v * 5.0f;
            s = s + prev[x - 1];
            s = s + prev[x];
            s = s + prev[x + 1];
            s = s + cur[x - 1];
            s = s + cur[x + 1];
            s = s + down[x - 1];
            s = s + down[x];
            s = s + down[x + 1];
            s = s / 13.0f;
            out[x] = clamp01((v - s) * f + s);
        }
        float *t = prev;
        prev = cur;
        cur = t;
    }
}

/* one step of one sample: x its C planes of HW values, in place (Color mixes the channels; the
 * other operations take each plane alone, Contrast with the image's grey mean) */
INLINE void one_step(float *x, int64_t C, int64_t H, int64_t W, int code, float v, uint8_t *lv, float *rows) {
    const int64_t HW = H * W;
    if (code == COLOR) {
        if (C == 3) blend_grey(x, x + HW, x + 2 * HW, HW, v, 1.0f - v);
        else blend_self(x, HW, v, 1.0f - v);
        return;
    }
    if (code == SHARPNESS && (H <= 2 || W <= 2)) return;
    const float rest = code == CONTRAST ? (1.0f - v) * grey_mean(x, x + HW, x + 2 * HW, HW, C == 1) : 0.0f;
    for (int64_t c = 0; c < C; c++) {
        float *p = x + c * HW;
        switch (code) {
        case BRIGHTNESS: brightness(p, HW, v); break;
        case CONTRAST: blend_constant(p, HW, v, rest); break;
        case SHARPNESS: sharpen(p, H, W, v, rows, rows + W); break;
        case POSTERIZE: posterize(p, HW, (int32_t)v, lv); break;
        case SOLARIZE: solarize(p, HW, v); break;
        case AUTOCONTRAST: autocontrast(p, HW); break;
        case EQUALIZE: equalize(p, HW, lv); break;
        case INVERT: invert(p, HW); break;
        case SOLARIZE_ADD: solarize_add(p, HW, v, lv); break;
        default: return;
        }
    }
}

#define STEPS_ARGS                                                                                       \
    const float *src, float *dst, const int32_t *codes, const float *values, const int64_t *geo, uint8_t *lv, \
        float *rows

INLINE void steps_body(STEPS_ARGS) {
    const int64_t N = geo[0], C = geo[1], H = geo[2], W = geo[3], S = geo[4];
    const int64_t *ss = geo + 5, ds0 = geo[9], HW = H * W;
    for (int64_t n = 0; n < N; n++) {
        float *x = dst + n * ds0;
        if (src != dst) { /* the sample copied into dst's planes, then changed there */
            for (int64_t c = 0; c < C; c++)
                for (int64_t y = 0; y < H; y++) {
                    const float *s = src + n * ss[0] + c * ss[1] + y * ss[2];
                    float *d = x + c * HW + y * W;
                    if (ss[3] == 1) memcpy(d, s, sizeof(float) * (size_t)W);
                    else for (int64_t k = 0; k < W; k++) d[k] = s[k * ss[3]];
                }
        }
        for (int64_t s = 0; s < S; s++) one_step(x, C, H, W, codes[s * N + n], values[s * N + n], lv, rows);
    }
}

static void steps_plain(STEPS_ARGS) { steps_body(src, dst, codes, values, geo, lv, rows); }

#ifdef PP_HAS_AVX2_TARGET
/* the same body compiled for AVX2 (8 float lanes; no FMA: that is another target), run where the CPU has it */
__attribute__((target("avx2"))) static void steps_avx2(STEPS_ARGS) { steps_body(src, dst, codes, values, geo, lv, rows); }

#else
#define steps_avx2 steps_plain
#endif

/* Runs S steps on N samples of a float32 [N, C, H, W] tensor (C 1 or 3), each sample through all
 * its steps in turn: at step s sample n takes operation codes[s * N + n] (the module comment;
 * 0 or an unknown code: none) with its number values[s * N + n]. dst holds the result, each
 * sample's C planes of H * W values contiguous, samples geo[9] values apart; src is the input: dst
 * itself (in place), or any other tensor of that shape, read with its strides and copied into dst
 * sample by sample. geo (int64): N, C, H, W, S, src's four strides in elements (sample, channel,
 * row, column), dst's sample stride. Returns 0, or -1 when the scratch could not be allocated
 * (nothing written then). */
int64_t pp_policy_steps(const float *src, float *dst, const int32_t *codes, const float *values, const int64_t *geo) {
    const int64_t N = geo[0], C = geo[1], H = geo[2], W = geo[3];
    if (N <= 0 || C <= 0 || H <= 0 || W <= 0) return 0;
    uint8_t *lv = malloc((size_t)(H * W));                 /* one plane's levels (Posterize, Equalize) */
    float *rows = malloc(sizeof(float) * (size_t)(2 * W)); /* two original rows (Sharpness) */
    if (!lv || !rows) {
        free(lv), free(rows);
        return -1;
    }
    (has_avx2() ? steps_avx2 : steps_plain)(src, dst, codes, values, geo, lv, rows);
    free(lv), free(rows);
    return 0;
}
