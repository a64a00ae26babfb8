/* A separable per-sample blur of float32 planes on the CPU (see kernels/cpu/blur.py): GaussianBlur's
 * fast form, one call per piece of a batch, the GIL released (ctypes' CDLL).
 *
 * Why in C: the twin (ops/blur.py, _filter) is a torch product into a buffer and an in-place sum
 * per tap and axis, two passes over the blurred images per tap (46 taps for a 23x23 blur), about
 * 2 ms per 224x224 image on one thread. Here each plane's rows are correlated along the row
 * (into a float32 plane of the call's own), then along the columns (into the output), each
 * output row summed in a buffer that stays in L1, so each image is read and written about twice.
 *
 * Each output value is the twin's arithmetic in its order: acc = x[t0] * w0, then
 * acc = acc + x[t] * w[t] for each further tap, every product and sum rounded to float32 (the
 * build forbids contraction into fused multiply-adds: -ffp-contract=off), so the same bits. The
 * loops run over consecutive output pixels inside the loop over taps, which the compiler
 * vectorises without changing any value's order; a copy built for AVX2 (8 lanes) runs where
 * the CPU has it. Borders mirror without repeating the edge pixel, and taps reaching past the far
 * border mirror again (ops.pixelwise.reflect_indices: a period of 2 * (n - 1); n == 1 reads
 * the one value). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "avx2.h" /* has_avx2() */

static int64_t mirror(int64_t i, int64_t n) {
    if (n == 1) return 0;
    const int64_t period = 2 * (n - 1);
    i %= period;
    if (i < 0) i += period;
    return i < n ? i : period - i;
}

/* Along a row: acc[x] = sum over t of row[x + t] * w[t] (row: one mirrored source row), tap
 * by tap. BLOCK consecutive outputs at a time, their sums kept in registers across the taps
 * (the loop over the block is unrolled and vectorised), the tail one by one: each value's
 * operations are the same either way. */
#define BLOCK 32
#define ALONG_ROW_BODY                                                                         \
    {                                                                                          \
        int64_t x0 = 0;                                                                        \
        for (; x0 + BLOCK <= n; x0 += BLOCK) {                                                 \
            float a[BLOCK];                                                                    \
            for (int j = 0; j < BLOCK; j++) a[j] = row[x0 + j] * w[0];                         \
            for (int64_t t = 1; t < taps; t++) {                                               \
                const float wt = w[t];                                                         \
                for (int j = 0; j < BLOCK; j++) a[j] = a[j] + row[x0 + t + j] * wt;            \
            }                                                                                  \
            for (int j = 0; j < BLOCK; j++) acc[x0 + j] = a[j];                                \
        }                                                                                      \
        for (; x0 < n; x0++) {                                                                 \
            float a = row[x0] * w[0];                                                          \
            for (int64_t t = 1; t < taps; t++) a = a + row[x0 + t] * w[t];                     \
            acc[x0] = a;                                                                       \
        }                                                                                      \
    }

/* Along the columns: acc[x] = sum over t of rows[t][x] * w[t] (rows: the taps' source rows),
 * one tap at a time over the whole output row (it stays in L1): contiguous streams, which the
 * blocked form above read worse here (23 rows a block apart). */
#define ALONG_COLUMNS_BODY                                                                     \
    {                                                                                          \
        const float *s = rows[0];                                                              \
        const float w0 = w[0];                                                                 \
        for (int64_t x = 0; x < n; x++) acc[x] = s[x] * w0;                                    \
        for (int64_t t = 1; t < taps; t++) {                                                   \
            const float *restrict st = rows[t];                                                \
            const float wt = w[t];                                                             \
            for (int64_t x = 0; x < n; x++) acc[x] = acc[x] + st[x] * wt;                      \
        }                                                                                      \
    }

#define ROW_ARGS float *restrict acc, const float *restrict row, const float *w, int64_t taps, int64_t n
#define COLUMN_ARGS float *restrict acc, const float *const *rows, const float *w, int64_t taps, int64_t n
static void along_row_plain(ROW_ARGS) ALONG_ROW_BODY
static void along_columns_plain(COLUMN_ARGS) ALONG_COLUMNS_BODY

#ifdef PP_HAS_AVX2_TARGET
/* the same bodies compiled for AVX2 (8 lanes), run where the CPU has it */
__attribute__((target("avx2"))) static void along_row_avx2(ROW_ARGS) ALONG_ROW_BODY
__attribute__((target("avx2"))) static void along_columns_avx2(COLUMN_ARGS) ALONG_COLUMNS_BODY

#else
#define along_row_avx2 along_row_plain
#define along_columns_avx2 along_columns_plain
#endif

/* Blurs R samples of a float32 [N, C, H, W] tensor into dst (the same shape; it may be src itself):
 * sample rows[i] of src, along its rows with wk[i * kw ..] (kw taps, odd; 1: not along the
 * rows) then along its columns with hk[i * kh ..], written to sample rows[i] of dst. The other
 * samples of dst are not touched. geo (int64): R, C, H, W, kw, kh, then src's four strides and
 * dst's four strides in elements (sample, channel, row, column). Returns 0, or -1 when the
 * buffers could not be allocated (nothing written then). */
int64_t pp_blur_rows(const float *src, float *dst, const int64_t *rows_of, const float *wk, const float *hk,
                     const int64_t *geo) {
    const int64_t R = geo[0], C = geo[1], H = geo[2], W = geo[3], kw = geo[4], kh = geo[5];
    const int64_t *ss = geo + 6, *ds = geo + 10;
    if (R <= 0 || C <= 0 || H <= 0 || W <= 0) return 0;
    const int64_t rw = kw / 2, rh = kh / 2;
    float *plane = malloc(sizeof(float) * (size_t)(H * W));       /* after the pass along the rows */
    float *padded = malloc(sizeof(float) * (size_t)(W + 2 * rw)); /* one source row, mirrored */
    float *acc = malloc(sizeof(float) * (size_t)W);               /* one output row */
    const float **taprows = malloc(sizeof(float *) * (size_t)(kh > 0 ? kh : 1));
    int64_t *at = malloc(sizeof(int64_t) * (size_t)(W + 2 * rw)); /* the mirrored column of each padded value */
    if (!plane || !padded || !acc || !taprows || !at) {
        free(plane), free(padded), free(acc), free(taprows), free(at);
        return -1;
    }
    const int avx2 = has_avx2();
    for (int64_t j = 0; j < W + 2 * rw; j++) at[j] = mirror(j - rw, W) * ss[3];
    for (int64_t i = 0; i < R; i++) {
        const int64_t n = rows_of[i];
        for (int64_t c = 0; c < C; c++) {
            const float *sp = src + n * ss[0] + c * ss[1];
            float *dp = dst + n * ds[0] + c * ds[1];
            for (int64_t y = 0; y < H; y++) { /* along the rows: src -> plane */
                const float *sr = sp + y * ss[2];
                float *out = plane + y * W;
                if (kw > 1) {
                    for (int64_t j = 0; j < W + 2 * rw; j++) padded[j] = sr[at[j]];
                    (avx2 ? along_row_avx2 : along_row_plain)(out, padded, wk + i * kw, kw, W);
                } else {
                    for (int64_t x = 0; x < W; x++) out[x] = sr[x * ss[3]];
                }
            }
            for (int64_t y = 0; y < H; y++) { /* along the columns: plane -> dst */
                float *dr = dp + y * ds[2];
                const float *res = plane + y * W;
                if (kh > 1) {
                    for (int64_t t = 0; t < kh; t++) taprows[t] = plane + mirror(y - rh + t, H) * W;
                    float *into = ds[3] == 1 ? dr : acc;
                    (avx2 ? along_columns_avx2 : along_columns_plain)(into, taprows, hk + i * kh, kh, W);
                    res = into;
                    if (into == dr) continue;
                }
                if (ds[3] == 1) memcpy(dr, res, sizeof(float) * (size_t)W);
                else for (int64_t x = 0; x < W; x++) dr[x * ds[3]] = res[x];
            }
        }
    }
    free(plane), free(padded), free(acc), free(taprows), free(at);
    return 0;
}
