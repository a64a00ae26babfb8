/* Axis-aligned samples for pp_warp_general (included by warp.c): a map of scales and a shift (a
 * crop, a resize, a flip, a translation, a zoom-out). The stretch is the same everywhere, each
 * output row has the same vertical taps and each column the same horizontal ones, in one of
 * warp_pixel's two variants: a pixel whose source point is inside the image drops the taps
 * beyond it, one whose point is outside (an uncovered area) reads the fill colour there (a
 * constant border; the other borders remap every tap, so their variants are the same). Whether
 * a point is inside is its column's u inside and its row's v inside, so the 2-D sum of
 * warp_pixel splits into two 1-D passes per variant. Per output row, the row's vertical taps
 * are summed into a float32 row of the source columns the output needs (a loop over contiguous
 * bytes the compiler vectorises; a fill tap adds its weight times the fill colour), then each
 * output pixel sums its horizontal taps over that row (a fill column is the fill colour times
 * the row's weight sum). The taps, weights, weight sums and border rules are warp_pixel's
 * (axis_taps); the sums are grouped differently (rows first, products of float32 weights
 * instead of float32 products of float64 weights), so the result differs from the reference by
 * float32 rounding, within the vector path's tolerance (tests/test_warp_cpu.py).
 *
 * Why: DeiT's bicubic crops shrink about 2x, so warp_pixel's 2-D sum takes 8 x 8 taps per output
 * pixel where the two passes take 8 + 8 (per output pixel, the vertical pass runs over about
 * 2 source columns): measured (AMD EPYC, 1 thread, 224 x 224 float16 out) ~1.9 ms per sample on
 * the vector path, ~0.7 ms here (the pass along x adds a column's three channels as one SSE
 * product and sum, each lane the scalar operations: 0.89 -> 0.81-0.84 ms for a 1.6x bicubic
 * shrink on another machine); with AVX2 the pixels' epilogue (normalisation, colour, float16
 * store) runs 8 at a time: RandomResizedCrop(bicubic) + flip + normalise to float16, 64 ImageNet
 * images on one thread, 1.58-1.83 -> 0.79-0.87 ms per image. Translations (TimmRandAugment's,
 * RandAugment's) and zoom-outs leave part of the output uncovered; they took the per-pixel path
 * before the fill variant.
 * Memory: the source rows under the output, read once per vertical tap; one or two float32 rows
 * of the used source columns, and the taps of both axes, per call.
 */
#include <stdlib.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Whether J's map is axis-aligned (each output column has one source u, each row one v) and the
 * two passes pay: always when every output pixel centre maps inside the image (no fill variant),
 * else where a pixel reads at least 16 taps (a shrink: 4 x 4 bilinear, or more), since the vector
 * path's 8 lanes beat the passes' scalar pixels at few taps (measured, 1 thread, 1024 x 1024
 * LetterBox of 375 x 500 images, bilinear 2 x 2 taps: the passes 1.4x slower). */
static int separable_ok(const Job *J, int64_t H, int64_t W) {
    const double *m = J->m;
    if (!J->affine || m[1] != 0.0 || m[3] != 0.0 || H < 1 || W < 1) return 0;
    const double u0 = m[0] * 0.5 + m[2], u1 = m[0] * ((double)W - 0.5) + m[2];
    const double v0 = m[4] * 0.5 + m[5], v1 = m[4] * ((double)H - 0.5) + m[5];
    if (u0 >= 0.0 && u0 < J->img_w && u1 >= 0.0 && u1 < J->img_w && v0 >= 0.0 && v0 < J->img_h && v1 >= 0.0 &&
        v1 < J->img_h)
        return 1; /* u and v are monotonic in j and i: the ends decide */
    if (J->interp == NEAREST) return 0;
    const double nx = ceil(2.0 * J->radius * J->sx_const - 1e-9), ny = ceil(2.0 * J->radius * J->sy_const - 1e-9);
    return nx * ny >= 16.0;
}

/* One axis's taps of every output position along it, in one of warp_pixel's two variants
 * (`inside`: the pixel's source point inside the image, outside taps dropped; or not, outside
 * taps reading the fill colour): per position its tap count, weight sum, and per tap the source
 * index (fill_at for a fill tap) and float32 weight. Widens [*lo, *hi] (when lo is given) to the
 * indices a kept tap reads. */
typedef struct {
    int32_t *idx;
    float *w;
    int *n;
    float *sum;
} Taps;

static void line_taps(const Job *J, const Axis *ax, double a, double b, int64_t count, double scale, int inside,
                      int tmax, int32_t fill_at, Taps *T, int64_t *lo, int64_t *hi) {
    int64_t off[MAX_TAPS];
    double w[MAX_TAPS], sum;
    unsigned char fill[MAX_TAPS];
    int any_fill = 0;
    for (int64_t j = 0; j < count; j++) {
        const double u = a * ((double)j + 0.5) + b; /* warp_pixel's coordinate on an axis-aligned map */
        const int n = axis_taps(J, ax, u, scale, inside, off, w, fill, &sum, &any_fill);
        T->n[j] = n;
        T->sum[j] = (float)sum;
        for (int t = 0; t < n; t++) {
            const int64_t x = ax->stride > 0 ? off[t] / ax->stride : 0;
            T->idx[j * tmax + t] = fill[t] ? fill_at : (int32_t)x;
            T->w[j * tmax + t] = (float)w[t];
            if (lo && w[t] != 0.0 && !fill[t]) {
                *lo = x < *lo ? x : *lo;
                *hi = x > *hi ? x : *hi;
            }
        }
    }
}

/* A row of the used source columns [lo, hi] (3 floats a column) summed over a row's vertical taps
 * (T at position i): fill taps (index -1) add the fill colour; and the fill column fill_col,
 * which the horizontal fill taps read: the row's weight sum times the fill colour. */
static inline __attribute__((always_inline)) void column_sums(const Job *J, const Taps *T, int64_t i, int tmax,
                                                             int64_t fill_col, int64_t lo, int64_t hi,
                                                             float *restrict tmp) {
    const int64_t sx = J->ax.stride;
    const int rgb = J->ch1 == 1 && J->ch2 == 2 && sx == 3; /* packed RGB bytes: one contiguous run */
    if (hi >= lo) memset(tmp + 3 * lo, 0, sizeof(float) * (size_t)(3 * (hi - lo + 1)));
    float fill_w = 0.0f;
    for (int t = 0; t < T->n[i]; t++) {
        const float wy = T->w[i * tmax + t];
        if (wy == 0.0f) continue; /* adds 0 in the reference */
        const int32_t y = T->idx[i * tmax + t];
        if (y < 0) { /* a fill row */
            fill_w += wy;
            continue;
        }
        const uint8_t *r = J->src + (int64_t)y * J->ay.stride;
        if (rgb) {
            for (int64_t k = 3 * lo; k < 3 * (hi + 1); k++) tmp[k] += wy * (float)r[k];
        } else {
            for (int64_t x = lo; x <= hi; x++) {
                const uint8_t *p = r + x * sx;
                tmp[3 * x] += wy * (float)p[0];
                tmp[3 * x + 1] += wy * (float)p[J->ch1];
                tmp[3 * x + 2] += wy * (float)p[J->ch2];
            }
        }
    }
    if (fill_w != 0.0f)
        for (int64_t x = lo; x <= hi; x++)
            for (int c = 0; c < 3; c++) tmp[3 * x + c] += fill_w * J->fill[c];
    for (int c = 0; c < 3; c++) tmp[3 * fill_col + c] = T->sum[i] * J->fill[c];
}

#ifdef PP_AVX2
/* normalised() and finish_pixel() on 8 consecutive output pixels of a row (the same operations
 * per lane: the sums divided by the weights' total, or the fill where it is not positive; then
 * finish8, as the vector blocks finish), from element offset at */
AVX2 static void finish_run8(const Job *J, int64_t at, const float *a0, const float *a1, const float *a2,
                             const float *norm) {
    const __m256 n = _mm256_loadu_ps(norm);
    const __m256 pos = _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ);
    const __m256 d = _mm256_max_ps(n, _mm256_set1_ps(1e-12f));
    const __m256 c0 = _mm256_blendv_ps(_mm256_set1_ps(J->fill[0]), _mm256_div_ps(_mm256_loadu_ps(a0), d), pos);
    const __m256 c1 = _mm256_blendv_ps(_mm256_set1_ps(J->fill[1]), _mm256_div_ps(_mm256_loadu_ps(a1), d), pos);
    const __m256 c2 = _mm256_blendv_ps(_mm256_set1_ps(J->fill[2]), _mm256_div_ps(_mm256_loadu_ps(a2), d), pos);
    finish8(J, at, c0, c1, c2);
}
#endif

/* The two passes, row by row; fills: some pixel's source point is outside the image with a
 * constant border (two variants), else every pixel takes variant 0 (a copy of this loop with the
 * choice compiled away: the choice per pixel cost about 15% of a 224 x 224 crop). With AVX2 the
 * pixels' sums are kept 8 at a time and finished together (finish_run8): per pixel, the scalar
 * normalisation, colour, clamp and float16 conversion were half the time of a 224 x 224 bicubic
 * crop (py-spy, one thread). */
static inline __attribute__((always_inline)) void separable_rows(const Job *J, int64_t H, int64_t W, const Taps *X,
                                                                 const Taps *Y, float *const *tmp,
                                                                 const unsigned char *in_u, int64_t lo, int64_t hi,
                                                                 int64_t fill_x, int any_out_u, const int fills) {
    const double *m = J->m;
    const int tx = J->ax.taps, ty = J->ay.taps;
    float c[3];
#ifdef PP_AVX2
    const int vec = has_avx2();
    float run[4][8]; /* a run of 8 pixels' three sums and weight totals */
#else
    const int vec = 0;
#endif
    for (int64_t i = 0; i < H; i++) {
        const double v = m[4] * ((double)i + 0.5) + m[5];
        const int in_v = !fills || (v >= 0.0 && v < J->img_h);
        const int need_fill = fills && (!in_v || any_out_u);
        if (in_v) column_sums(J, &Y[0], i, ty, fill_x, lo, hi, tmp[0]);
        if (need_fill) column_sums(J, &Y[1], i, ty, fill_x, lo, hi, tmp[1]);
        for (int64_t j = 0; j < W; j++) {
            const int k = (!fills || (in_v && in_u[j])) ? 0 : 1;
            const int32_t *cx = X[k].idx + j * tx;
            const float *wx = X[k].w + j * tx, *row = tmp[k];
            const float sum_y = Y[k].sum[i];
            const int n = X[k].n[j];
            float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f;
#ifdef __SSE2__
            /* the three channels of a column in one 4-lane product and sum (the fourth lane reads the
             * next column's first value and is dropped): each lane the scalar form's operations */
            __m128 acc = _mm_setzero_ps();
            for (int t = 0; t < n; t++) {
                if (wx[t] == 0.0f) continue;
                const __m128 q = _mm_loadu_ps(row + 3 * (int64_t)cx[t]); /* the fill column: sum_y x the fill */
                acc = _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(wx[t]), q));
            }
            float lanes[4];
            _mm_storeu_ps(lanes, acc);
            acc0 = lanes[0], acc1 = lanes[1], acc2 = lanes[2];
#else
            for (int t = 0; t < n; t++) {
                if (wx[t] == 0.0f) continue;
                const float *q = row + 3 * (int64_t)cx[t]; /* the fill column: sum_y x the fill colour */
                acc0 += wx[t] * q[0];
                acc1 += wx[t] * q[1];
                acc2 += wx[t] * q[2];
            }
#endif
#ifdef PP_AVX2
            if (vec && j < (W & ~(int64_t)7)) {
                const int l = (int)(j & 7);
                run[0][l] = acc0, run[1][l] = acc1, run[2][l] = acc2, run[3][l] = sum_y * X[k].sum[j];
                if (l == 7) finish_run8(J, i * J->dsy + (j - 7) * J->dsx, run[0], run[1], run[2], run[3]);
                continue;
            }
#endif
            normalised(J, acc0, acc1, acc2, sum_y * X[k].sum[j], c); /* warp_pixel's normalisation */
            finish_pixel(J, i, j, c);
        }
    }
}

/* The sample by two 1-D passes; 0, or -1 where it cannot (no memory: the caller warps it per
 * pixel). A pixel whose source point is inside the image (its column's u and its row's v both
 * inside) sums the taps of the `inside` variant along both axes; the others the fill variant
 * (a constant border's outside taps read the fill colour, whose column sum is the fill times
 * the row's weight sum). Other borders have no fill taps: both variants are the same. */
static int64_t warp_separable(const Job *J, int64_t H, int64_t W) {
    const int64_t sw = J->ax.len;
    const int tx = J->ax.taps, ty = J->ay.taps;
    const int fills = J->border == CONSTANT;
    const int nv = fills ? 2 : 1; /* variants: [0] inside, [1] fill */
    Taps X[2], Y[2];
    void *blocks[2 * 2 * 4 + 3];
    int nb = 0, failed = 0;
#define TAKE(p, bytes) ((p) = malloc(bytes), blocks[nb++] = (p), failed |= (p) == NULL)
    for (int k = 0; k < nv; k++) {
        TAKE(X[k].idx, sizeof(int32_t) * (size_t)(W * tx));
        TAKE(X[k].w, sizeof(float) * (size_t)(W * tx));
        TAKE(X[k].n, sizeof(int) * (size_t)W);
        TAKE(X[k].sum, sizeof(float) * (size_t)W);
        TAKE(Y[k].idx, sizeof(int32_t) * (size_t)(H * ty));
        TAKE(Y[k].w, sizeof(float) * (size_t)(H * ty));
        TAKE(Y[k].n, sizeof(int) * (size_t)H);
        TAKE(Y[k].sum, sizeof(float) * (size_t)H);
    }
    float *tmp[2];
    /* the used columns, then the fill column, then one float the 4-lane loads may read (zeroed:
     * no stale bits become a slow denormal in the dropped lane) */
    TAKE(tmp[0], sizeof(float) * (size_t)(3 * (sw + 1) + 1));
    TAKE(tmp[1], sizeof(float) * (size_t)(3 * (sw + 1) + 1));
    if (tmp[0]) memset(tmp[0], 0, sizeof(float) * (size_t)(3 * (sw + 1) + 1));
    if (tmp[1]) memset(tmp[1], 0, sizeof(float) * (size_t)(3 * (sw + 1) + 1));
    unsigned char *in_u;
    TAKE(in_u, (size_t)W);
#undef TAKE
    if (failed) {
        for (int k = 0; k < nb; k++) free(blocks[k]);
        return -1;
    }
    const double *m = J->m;
    int any_out_u = 0, any_out_v = 0;
    for (int64_t j = 0; j < W; j++) {
        const double u = m[0] * ((double)j + 0.5) + m[2];
        in_u[j] = (unsigned char)(u >= 0.0 && u < J->img_w); /* warp_pixel's `inside`, along x */
        any_out_u |= !in_u[j];
    }
    for (int64_t i = 0; i < H && !any_out_v; i++) {
        const double v = m[4] * ((double)i + 0.5) + m[5];
        any_out_v = !(v >= 0.0 && v < J->img_h);
    }
    /* the fill variant's taps only where some pixel takes them (each tap's weight costs a filter
     * evaluation: for a 224 x 224 output of 8 taps an axis, about as much as the pass along x) */
    const int used = fills && (any_out_u || any_out_v) ? 2 : 1;
    int64_t lo = sw, hi = -1; /* the source columns some kept tap reads */
    const int32_t fill_x = (int32_t)sw, fill_y = -1; /* the fill column's index; fill rows are -1 */
    for (int k = 0; k < used; k++) {
        line_taps(J, &J->ax, m[0], m[2], W, J->sx_const, k == 0, tx, fill_x, &X[k], &lo, &hi);
        line_taps(J, &J->ay, m[4], m[5], H, J->sy_const, k == 0, ty, fill_y, &Y[k], NULL, NULL);
    }
    if (used == 2) separable_rows(J, H, W, X, Y, tmp, in_u, lo, hi, fill_x, any_out_u, 1);
    else separable_rows(J, H, W, X, Y, tmp, in_u, lo, hi, fill_x, any_out_u, 0);
    for (int k = 0; k < nb; k++) free(blocks[k]);
    return 0;
}
