/* The two uniform fields under a per-pixel normal at chosen elements (data/random.py,
 * Draws.normal_field_at_np: RandomErasing's noise on the CPU), in one pass: for each value, its
 * element's key mixed once, then each field's state of the value's sample mixed with it, the top
 * 24 bits as a float32 in [0, 1). The same integer operations as numpy's (hash.h), so the same
 * bits; the Box-Muller step after it stays torch's (its logarithm and cosine).
 *
 * Why: numpy makes these with about twenty passes over uint32 arrays (three mixes of five
 * operations, the gathers, the conversions): 0.4 of the 0.5 ms a piece of 8 samples of DeiT's
 * RandomErasing(0.25, value="random") cost on one thread for about 53,000 values; here one pass.
 * pp_rect_units makes the same numbers for whole rectangles of a batch of [C, H, W] fields from
 * five numbers a rectangle, where the caller would otherwise build an int64 element and sample
 * array per value (numpy's broadcast sums, concatenation and repeat held the GIL for most of
 * RandomErasing's time on DeiT's two decoding threads: py-spy found the hashing itself a tenth
 * of it).
 * Called through ctypes' CDLL (the GIL released) from the Engine's threads; no global state. */
#include <stdint.h>

#include "avx2.h" /* has_avx2() */
#include "hash.h"

/* Values come in runs of one sample (a rectangle's), so each run's loop has two constant states
 * and no gather: the compiler vectorises it (uint32 products need AVX2's 8 lanes; SSE2 has no
 * 32-bit multiply), and a copy compiled for AVX2 runs where the CPU has it. */
#define UNITS_BODY                                                                              \
    {                                                                                           \
        const float scale = (float)(1.0 / (1 << 24));                                           \
        int64_t i = 0;                                                                          \
        while (i < k) {                                                                         \
            const int64_t r = rows[i];                                                          \
            int64_t end = i + 1;                                                                \
            while (end < k && rows[end] == r) end++;                                            \
            const uint32_t a = s1[r], b = s2[r];                                                \
            for (int64_t t = i; t < end; t++) {                                                 \
                const uint32_t key = mix((uint32_t)elements[t] + GOLDEN);                       \
                u1[t] = (float)(int32_t)(mix(a ^ key) >> 8) * scale;                            \
                u2[t] = (float)(int32_t)(mix(b ^ key) >> 8) * scale;                            \
            }                                                                                   \
            i = end;                                                                            \
        }                                                                                       \
    }

#define UNITS_ARGS                                                                                             \
    const uint32_t *restrict s1, const uint32_t *restrict s2, const int64_t *restrict rows,                     \
        const int64_t *restrict elements, int64_t k, float *restrict u1, float *restrict u2
static void units_plain(UNITS_ARGS) UNITS_BODY
#ifdef PP_HAS_AVX2_TARGET
__attribute__((target("avx2"))) static void units_avx2(UNITS_ARGS) UNITS_BODY
#else
#define units_avx2 units_plain
#endif

/* u1[i], u2[i] for value i of k: sample rows[i] (its states s1[rows[i]], s2[rows[i]]) at element
 * elements[i] of its field (the counter wraps at 32 bits, as numpy's astype(uint32)). The top 24
 * bits of a hash fit an int32, whose conversion to float32 is exact, as numpy's from uint32. */
void pp_field_units(const uint32_t *s1, const uint32_t *s2, const int64_t *rows, const int64_t *elements, int64_t k,
                    float *u1, float *u2) {
    (has_avx2() ? units_avx2 : units_plain)(s1, s2, rows, elements, k, u1, u2);
}

/* A rectangle's values, channel by channel, row by row: element ch * h * w + (top + i) * w +
 * left + j of its sample's field (states a, b), as pp_field_units makes them. */
#define RECT_BODY                                                                               \
    {                                                                                           \
        const float scale = (float)(1.0 / (1 << 24));                                           \
        int64_t at = 0;                                                                         \
        for (int64_t k = 0; k < r; k++) {                                                       \
            const int64_t *q = rects + 5 * k; /* sample, top, left, height, width */            \
            const uint32_t a = s1[q[0]], b = s2[q[0]];                                          \
            for (int64_t ch = 0; ch < c; ch++)                                                  \
                for (int64_t i = 0; i < q[3]; i++) {                                            \
                    const int64_t first = ch * h * w + (q[1] + i) * w + q[2];                   \
                    for (int64_t j = 0; j < q[4]; j++) {                                        \
                        const uint32_t key = mix((uint32_t)(first + j) + GOLDEN);               \
                        u1[at + j] = (float)(int32_t)(mix(a ^ key) >> 8) * scale;               \
                        u2[at + j] = (float)(int32_t)(mix(b ^ key) >> 8) * scale;               \
                    }                                                                           \
                    at += q[4];                                                                 \
                }                                                                               \
        }                                                                                       \
    }

#define RECT_ARGS                                                                                              \
    const uint32_t *restrict s1, const uint32_t *restrict s2, const int64_t *restrict rects, int64_t r,         \
        int64_t c, int64_t h, int64_t w, float *restrict u1, float *restrict u2
static void rect_plain(RECT_ARGS) RECT_BODY
#ifdef PP_HAS_AVX2_TARGET
__attribute__((target("avx2"))) static void rect_avx2(RECT_ARGS) RECT_BODY
#else
#define rect_avx2 rect_plain
#endif

/* u1, u2 for r rectangles (rects int64 [r, 5]: sample, top, left, height, width, inside the
 * [c, h, w] fields) one after the other, each c * height * width values long. */
void pp_rect_units(const uint32_t *s1, const uint32_t *s2, const int64_t *rects, int64_t r, int64_t c, int64_t h,
                   int64_t w, float *u1, float *u2) {
    (has_avx2() ? rect_avx2 : rect_plain)(s1, s2, rects, r, c, h, w, u1, u2);
}
