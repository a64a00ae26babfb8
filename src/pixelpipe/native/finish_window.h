/* The "window" path's pointwise pass in C (included by warp.c, after warp_avx2.h): a resized
 * uint8 window [H, W, C] (C = 1 or 3, any byte strides, negative ones too: a mirrored view)
 * into its slot of a 3-channel output, without a colour matrix: per channel v * k, then + b,
 * rounded once to the output dtype (kernels/cpu/stage.py finish_uint8's operations, whose numpy
 * and torch form stays the twin; a grey window gives its value to the three channels).
 *
 * Why: the twin is five calls (a strided copy into CHW planes, a conversion to float32, a
 * product, a sum, a cast into the slot), each letting go of the GIL and waiting to take it back
 * on a worker thread that shares it with the pipeline's other threads: py-spy found finish_uint8
 * at half the time of the JPEG decode beside it in the rn50 CPU pipeline, about 40% of that
 * waiting for the GIL. Here one call per sample, the GIL released, 8 pixels at a time with AVX2
 * (finish8: the same operations as finish_pixel, lane by lane). */

#ifdef PP_AVX2
AVX2 static void window_rows_avx2(const Job *J, int64_t H, int64_t W, int64_t first, int64_t sy, int64_t sx, int grey) {
    const __m256i byte = _mm256_set1_epi32(0xFF);
    const __m256i step = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)sx));
    float c[3];
    for (int64_t i = 0; i < H; i++) {
        int64_t j = 0;
        for (; j + 8 <= W; j += 8) {
            const __m256i g = load8(J, _mm256_add_epi32(_mm256_set1_epi32((int)(first + i * sy + j * sx)), step));
            const __m256 c0 = _mm256_cvtepi32_ps(_mm256_and_si256(g, byte));
            const __m256 c1 = grey ? c0 : _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(g, 8), byte));
            const __m256 c2 = grey ? c0 : _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(g, 16), byte));
            finish8(J, i * J->dsy + j * J->dsx, c0, c1, c2);
        }
        for (; j < W; j++) {
            const uint8_t *p = J->src + first + i * sy + j * sx;
            c[0] = p[0];
            c[1] = p[J->ch1];
            c[2] = p[J->ch2];
            finish_pixel(J, i, j, c);
        }
    }
}
#endif

/* geo int64 [10]: H, W, C, the window's byte strides sy, sx, sc, the dtype code (U8 ... BF16),
 * the slot's element strides dsy, dsx, dsc; kb float32 [6]: k then b per channel. src: pixel
 * (0, 0) of the window; dst: the slot's element (0, 0, 0). 0, or -1 for arguments it cannot
 * take (the caller runs the twin). */
int64_t pp_finish_window(const uint8_t *src, const int64_t *geo, const float *kb, void *dst) {
    const int64_t H = geo[0], W = geo[1], C = geo[2], sy = geo[3], sx = geo[4], sc = geo[5];
    if (H < 1 || W < 1 || (C != 1 && C != 3) || geo[6] < U8 || geo[6] > BF16) return -1;
    Job J;
    memset(&J, 0, sizeof J);
    J.dtype = (int)geo[6];
    J.out_c = 3;
    J.ch1 = C == 3 ? sc : 0;
    J.ch2 = C == 3 ? 2 * sc : 0;
    for (int q = 0; q < 3; q++) {
        J.k[q] = kb[q];
        J.b[q] = kb[3 + q];
    }
    J.dst = (char *)dst;
    J.dsy = geo[7];
    J.dsx = geo[8];
    J.dsc = geo[9];
    /* the lowest address the window reads: the buffer load8 keeps its 4-byte reads inside */
    const int64_t low = (sy < 0 ? (H - 1) * sy : 0) + (sx < 0 ? (W - 1) * sx : 0) + (sc < 0 ? (C - 1) * sc : 0);
    J.src = src + low;
    J.bytes = (H - 1) * (sy < 0 ? -sy : sy) + (W - 1) * (sx < 0 ? -sx : sx) + (C - 1) * (sc < 0 ? -sc : sc) + 1;
#ifdef PP_AVX2
    if (has_avx2() && J.bytes >= 4 && J.bytes < ((int64_t)1 << 31) - 64 && (C == 1 || sc == 1)) { /* words: channels 0-2 bytes */
        window_rows_avx2(&J, H, W, -low, sy, sx, C == 1);
        return 0;
    }
#endif
    float c[3];
    for (int64_t i = 0; i < H; i++)
        for (int64_t j = 0; j < W; j++) {
            const uint8_t *p = src + i * sy + j * sx;
            c[0] = p[0];
            c[1] = p[J.ch1];
            c[2] = p[J.ch2];
            finish_pixel(&J, i, j, c);
        }
    return 0;
}
