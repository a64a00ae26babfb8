/* Axis-aligned samples for pp_warp_general (included by warp.c): a map of scales and a shift (a
 * crop, a resize, a flip) whose output pixel centres all land inside the image. No tap then reads
 * the fill colour, the stretch is the same everywhere, each output row has the same vertical
 * taps and each column the same horizontal ones: the 2-D sum of warp_pixel splits into two 1-D
 * passes. Per output row, the row's vertical taps are summed into a float32 row of the source
 * columns the output needs (a loop over contiguous bytes the compiler vectorises), then each
 * output pixel sums its horizontal taps over that row. The taps, weights, weight sums and border
 * rules are warp_pixel's (axis_taps); the sums are grouped differently (rows first, products of
 * float32 weights instead of float32 products of float64 weights), so the result differs from
 * the reference by float32 rounding, within the vector path's tolerance (tests/test_warp_cpu.py).
 *
 * Why: DeiT's bicubic crops shrink about 2x, so warp_pixel's 2-D sum takes 8 x 8 taps per output
 * pixel where the two passes take 8 + 8 (per output pixel, the vertical pass runs over about
 * 2 source columns): measured (AMD EPYC, 1 thread, 224 x 224 float16 out) ~1.9 ms per sample on
 * the vector path, ~0.7 ms here. Memory: the source rows under the output, read once per
 * vertical tap; a float32 row of the used source columns, and the column taps, per call.
 */
#include <stdlib.h>

/* Whether J's map is axis-aligned and every output pixel centre maps inside the image (the
 * reference's `inside` holds for all of them: u and v are monotonic in j and i, so the ends decide). */
static int separable_ok(const Job *J, int64_t H, int64_t W) {
    const double *m = J->m;
    if (!J->affine || m[1] != 0.0 || m[3] != 0.0 || H < 1 || W < 1) return 0;
    const double u0 = m[0] * 0.5 + m[2], u1 = m[0] * ((double)W - 0.5) + m[2];
    const double v0 = m[4] * 0.5 + m[5], v1 = m[4] * ((double)H - 0.5) + m[5];
    return u0 >= 0.0 && u0 < J->img_w && u1 >= 0.0 && u1 < J->img_w && v0 >= 0.0 && v0 < J->img_h &&
           v1 >= 0.0 && v1 < J->img_h;
}

/* The sample by two 1-D passes; 0, or -1 where it cannot (no memory: the caller warps it per pixel). */
static int64_t warp_separable(const Job *J, int64_t H, int64_t W) {
    const int64_t sx = J->ax.stride, sw = J->ax.len;
    const int tx_max = J->ax.taps;
    int32_t *cols = malloc(sizeof(int32_t) * (size_t)(W * tx_max)); /* source column of each tap */
    float *wxs = malloc(sizeof(float) * (size_t)(W * tx_max));     /* its weight as float32 */
    int *nxs = malloc(sizeof(int) * (size_t)W);
    float *sum_xs = malloc(sizeof(float) * (size_t)W);
    float *tmp = malloc(sizeof(float) * (size_t)(3 * sw));
    int64_t off[MAX_TAPS];
    double w[MAX_TAPS], sum;
    unsigned char fill[MAX_TAPS];
    int any_fill = 0;
    if (!cols || !wxs || !nxs || !sum_xs || !tmp) {
        free(cols), free(wxs), free(nxs), free(sum_xs), free(tmp);
        return -1;
    }
    int64_t lo = sw, hi = -1; /* the source columns some kept tap reads */
    for (int64_t j = 0; j < W; j++) {
        const double u = J->m[0] * ((double)j + 0.5) + J->m[2]; /* warp_pixel's u where m1 = m6 = m7 = 0 */
        const int n = axis_taps(J, &J->ax, u, J->sx_const, 1, off, w, fill, &sum, &any_fill);
        nxs[j] = n;
        sum_xs[j] = (float)sum;
        for (int t = 0; t < n; t++) {
            const int64_t x = sx > 0 ? off[t] / sx : 0;
            cols[j * tx_max + t] = (int32_t)x;
            wxs[j * tx_max + t] = (float)w[t];
            if (w[t] != 0.0) {
                lo = x < lo ? x : lo;
                hi = x > hi ? x : hi;
            }
        }
    }
    const int rgb = J->ch1 == 1 && J->ch2 == 2 && sx == 3; /* packed RGB bytes: one contiguous run */
    float c[3];
    for (int64_t i = 0; i < H; i++) {
        const double v = J->m[4] * ((double)i + 0.5) + J->m[5];
        const int ny = axis_taps(J, &J->ay, v, J->sy_const, 1, off, w, fill, &sum, &any_fill);
        if (hi >= lo) memset(tmp + 3 * lo, 0, sizeof(float) * (size_t)(3 * (hi - lo + 1)));
        for (int t = 0; t < ny; t++) {
            if (w[t] == 0.0) continue; /* adds 0 in the reference */
            const float wy = (float)w[t];
            const uint8_t *r = J->src + off[t];
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
        const float sum_y = (float)sum;
        for (int64_t j = 0; j < W; j++) {
            float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f;
            const int32_t *cx = cols + j * tx_max;
            const float *wx = wxs + j * tx_max;
            for (int t = 0; t < nxs[j]; t++) {
                if (wx[t] == 0.0f) continue;
                const float *q = tmp + 3 * (int64_t)cx[t];
                acc0 += wx[t] * q[0];
                acc1 += wx[t] * q[1];
                acc2 += wx[t] * q[2];
            }
            normalised(J, acc0, acc1, acc2, sum_y * sum_xs[j], c); /* warp_pixel's normalisation */
            finish_pixel(J, i, j, c);
        }
    }
    free(cols), free(wxs), free(nxs), free(sum_xs), free(tmp);
    return 0;
}
