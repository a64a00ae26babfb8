/* The pointwise pass alone, for pp_warp_general's library (included by warp.c): pp_pointwise runs
 * finish_pixel over an [H, W, 3] image of warped values (uint8 or float32) where no warp is needed,
 * and pp_channel_sums sums its channels (uint8 exactly, float32 in float64) for the pixel ops
 * that need a mean. It shares warp.c's Job, store and finish_pixel, so it lives in the same
 * extension; a header of its own keeps warp.c to the warp. */
/* geo (int64) of pp_pointwise and pp_channel_sums */
enum {
    P_H, P_W, P_SRC_DTYPE, P_SRC_SY, P_SRC_SX, P_SRC_SC, /* source: uint8 (0) or float32 (1), element strides */
    P_DTYPE, P_DST_SY, P_DST_SX, P_DST_SC, P_DST_C, P_COLOR, P_CLAMP, P_LEN
};

static inline float texel(const void *src, int f32, int64_t at) {
    return f32 ? ((const float *)src)[at] : (float)((const uint8_t *)src)[at];
}

#ifdef PP_AVX2
/* pshufb patterns picking channel q of 8 packed RGB pixels from bytes 0..15 (lo) and 16..23 (hi)
 * of their 24 bytes, in pixel order (step 3) or reversed (step -3: pixel l at byte 21 - 3 l) */
AVX2 static void rgb_patterns(int reversed, __m128i lo[3], __m128i hi[3]) {
    for (int q = 0; q < 3; q++) {
        int8_t a[16], b[16];
        for (int l = 0; l < 16; l++) a[l] = b[l] = -1;
        for (int l = 0; l < 8; l++) {
            const int at = (reversed ? 21 - 3 * l : 3 * l) + q;
            if (at < 16) a[l] = (int8_t)at;
            else b[l] = (int8_t)(at - 16);
        }
        lo[q] = _mm_loadu_si128((const __m128i *)a);
        hi[q] = _mm_loadu_si128((const __m128i *)b);
    }
}

AVX2 static void pointwise_avx2(const Job *J, const void *src, int f32, int64_t H, int64_t W, int64_t sy, int64_t sx,
                                int64_t sc) {
    /* packed uint8 RGB read forwards or mirrored: 24 bytes per 8 pixels, shuffled apart */
    const int packed = !f32 && sc == 1 && (sx == 3 || sx == -3);
    __m128i lo[3], hi[3];
    if (packed) rgb_patterns(sx < 0, lo, hi);
    for (int64_t i = 0; i < H; i++) {
        int64_t j = 0;
        for (; j + 8 <= W; j += 8) {
            __m256 c[3];
            if (packed) {
                const uint8_t *p = (const uint8_t *)src + i * sy + (sx > 0 ? j * 3 : (j + 7) * -3);
                const __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadl_epi64((const __m128i *)(p + 16));
                for (int q = 0; q < 3; q++) {
                    const __m128i v = _mm_or_si128(_mm_shuffle_epi8(a, lo[q]), _mm_shuffle_epi8(b, hi[q]));
                    c[q] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
                }
            } else {
                float t[3][8];
                for (int q = 0; q < 3; q++)
                    for (int l = 0; l < 8; l++) t[q][l] = texel(src, f32, i * sy + (j + l) * sx + q * sc);
                for (int q = 0; q < 3; q++) c[q] = _mm256_loadu_ps(t[q]);
            }
            finish8(J, i * J->dsy + j * J->dsx, c[0], c[1], c[2]);
        }
        for (; j < W; j++) {
            const int64_t at = i * sy + j * sx;
            const float c[3] = {texel(src, f32, at), texel(src, f32, at + sc), texel(src, f32, at + 2 * sc)};
            finish_pixel(J, i, j, c);
        }
    }
}

/* Channel sums of packed uint8 RGB rows (sx = 3, sc = 1): 96 bytes (32 pixels) at a time, each
 * channel's bytes masked out of the three 32-byte loads and summed by psadbw */
AVX2 static void sums_rgb_avx2(const uint8_t *p, int64_t H, int64_t W, int64_t sy, double *out) {
    __m256i mask[3][3]; /* [load][channel] */
    for (int k = 0; k < 3; k++)
        for (int q = 0; q < 3; q++) {
            int8_t m[32];
            for (int l = 0; l < 32; l++) m[l] = (int8_t)(((32 * k + l) % 3 == q) ? -1 : 0);
            mask[k][q] = _mm256_loadu_si256((const __m256i *)m);
        }
    uint64_t total[3] = {0, 0, 0};
    for (int64_t i = 0; i < H; i++) {
        const uint8_t *r = p + i * sy;
        __m256i acc[3] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
        int64_t j = 0;
        for (; j + 32 <= W; j += 32) {
            for (int k = 0; k < 3; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(r + 3 * j + 32 * k));
                for (int q = 0; q < 3; q++)
                    acc[q] = _mm256_add_epi64(acc[q], _mm256_sad_epu8(_mm256_and_si256(v, mask[k][q]), _mm256_setzero_si256()));
            }
        }
        for (int q = 0; q < 3; q++) {
            uint64_t lanes[4];
            _mm256_storeu_si256((__m256i *)lanes, acc[q]);
            total[q] += lanes[0] + lanes[1] + lanes[2] + lanes[3];
        }
        for (; j < W; j++)
            for (int q = 0; q < 3; q++) total[q] += r[3 * j + q];
    }
    for (int q = 0; q < 3; q++) out[q] = (double)total[q];
}
#endif

/* The pointwise pass (finish_pixel) of an [H, W, 3] image of warped values (uint8 or float32,
 * any strides, negative ones too (a mirrored view: src is its first pixel); channel stride 0
 * for grey) into dst; pw as pp_warp_general's. Returns 0, or -1
 * for arguments it cannot take. */
int64_t pp_pointwise(const void *src, const int64_t *geo, const float *pw, void *dst) {
    Job J;
    memset(&J, 0, sizeof J);
    const int64_t H = geo[P_H], W = geo[P_W], sy = geo[P_SRC_SY], sx = geo[P_SRC_SX], sc = geo[P_SRC_SC];
    const int f32 = geo[P_SRC_DTYPE] == 1;
    J.dtype = (int)geo[P_DTYPE];
    J.out_c = (int)geo[P_DST_C];
    J.color = (int)geo[P_COLOR];
    J.clamp = (int)geo[P_CLAMP];
    if ((geo[P_SRC_DTYPE] != 0 && !f32) || (J.out_c != 1 && J.out_c != 3) || J.dtype < U8 || J.dtype > BF16) return -1;
    set_epilogue(&J, pw, dst, geo[P_DST_SY], geo[P_DST_SX], geo[P_DST_SC]);
#ifdef PP_AVX2
    if (has_avx2()) {
        pointwise_avx2(&J, src, f32, H, W, sy, sx, sc);
        return 0;
    }
#endif
    for (int64_t i = 0; i < H; i++)
        for (int64_t j = 0; j < W; j++) {
            const int64_t at = i * sy + j * sx;
            const float c[3] = {texel(src, f32, at), texel(src, f32, at + sc), texel(src, f32, at + 2 * sc)};
            finish_pixel(&J, i, j, c);
        }
    return 0;
}

/* out[c] = the sum of channel c of an [H, W, 3] image (uint8: exact; float32: float64 sums, one
 * per channel and pixel column modulo 4, added at the end). geo as pp_pointwise's first 6; any
 * strides, negative ones too (a mirrored view: src is its first pixel). */
void pp_channel_sums(const void *src, const int64_t *geo, double *out) {
    const int64_t H = geo[P_H], W = geo[P_W], sy = geo[P_SRC_SY], sx = geo[P_SRC_SX], sc = geo[P_SRC_SC];
    if (geo[P_SRC_DTYPE] == 0) {
        const uint8_t *p = (const uint8_t *)src;
#ifdef PP_AVX2
        if (has_avx2() && sx == 3 && sc == 1) {
            sums_rgb_avx2(p, H, W, sy, out);
            return;
        }
#endif
        for (int q = 0; q < 3; q++) {
            uint64_t s = 0;
            for (int64_t i = 0; i < H; i++)
                for (int64_t j = 0; j < W; j++) s += p[i * sy + j * sx + q * sc];
            out[q] = (double)s;
        }
        return;
    }
    const float *p = (const float *)src;
    for (int q = 0; q < 3; q++) {
        double s[4] = {0.0, 0.0, 0.0, 0.0};
        for (int64_t i = 0; i < H; i++) {
            const float *r = p + i * sy + q * sc;
            int64_t j = 0;
            for (; j + 4 <= W; j += 4)
                for (int l = 0; l < 4; l++) s[l] += r[(j + l) * sx];
            for (; j < W; j++) s[0] += r[j * sx];
        }
        out[q] = (s[0] + s[1]) + (s[2] + s[3]);
    }
}
