/* The CPU general warp's vector path (AVX2, 8 output pixels at a time), included by warp.c: it
uses warp.c's Job, Axis, warp_pixel and finish_pixel, and gives rows_avx2. Its own file so that
each file of the warp stays readable: warp.c holds the exact per-pixel path (the reference's
operations) and the entry points, this the blocks that match it within the stated tolerance. */
/* ------------------------------------------------------------------------- the vector blocks */
#ifdef PP_AVX2
#define AVX2 __attribute__((target("avx2,f16c")))
#define LIMIT 1e9 /* first taps beyond +-LIMIT (int32 trouble) take the exact path */

AVX2 static inline __m256d filter4(__m256d t, int interp) { /* filter() on 4 lanes, the same operations */
    const __m256d a = _mm256_andnot_pd(_mm256_set1_pd(-0.0), t), one = _mm256_set1_pd(1.0);
    if (interp == BILINEAR) return _mm256_max_pd(_mm256_sub_pd(one, a), _mm256_setzero_pd());
    __m256d near = _mm256_mul_pd(_mm256_sub_pd(_mm256_mul_pd(_mm256_set1_pd(1.5), a), _mm256_set1_pd(2.5)), a);
    near = _mm256_add_pd(_mm256_mul_pd(near, a), one);
    __m256d far = _mm256_sub_pd(_mm256_mul_pd(_mm256_set1_pd(-0.5), a), _mm256_set1_pd(-2.5));
    far = _mm256_sub_pd(_mm256_mul_pd(_mm256_add_pd(_mm256_mul_pd(far, a), _mm256_set1_pd(-4.0)), a), _mm256_set1_pd(-2.0));
    const __m256d lt1 = _mm256_cmp_pd(a, one, _CMP_LT_OQ), lt2 = _mm256_cmp_pd(a, _mm256_set1_pd(2.0), _CMP_LT_OQ);
    return _mm256_blendv_pd(_mm256_and_pd(far, lt2), near, lt1);
}

/* One axis of 8 pixels (two halves of 4): the coordinate, the first tap (float64 and int32),
 * 1 / s (float64), and the taps the block needs (the largest ceil(2 R s) of its pixels). */
typedef struct {
    __m256d c[2], first[2], inv[2];
    __m256i first_i;
    int taps;
} Axis8;

/* 0 when a first tap is beyond +-LIMIT (or NaN): the exact path then takes the block */
AVX2 static inline int axis_setup(const Job *J, const Axis *ax, const __m256d *c, const __m256d *s, int affine, Axis8 *A) {
    __m256d smax = s[0];
    for (int h = 0; h < 2; h++) {
        __m256d f;
        if (J->interp == NEAREST) {
            f = _mm256_floor_pd(c[h]);
        } else {
            const __m256d reach = _mm256_mul_pd(_mm256_set1_pd(J->radius), s[h]);
            f = _mm256_add_pd(_mm256_floor_pd(_mm256_sub_pd(_mm256_sub_pd(c[h], _mm256_set1_pd(0.5)), reach)),
                              _mm256_set1_pd(1.0));
        }
        const __m256d ok = _mm256_and_pd(_mm256_cmp_pd(f, _mm256_set1_pd(-LIMIT), _CMP_GT_OQ),
                                         _mm256_cmp_pd(f, _mm256_set1_pd(LIMIT), _CMP_LT_OQ));
        if (_mm256_movemask_pd(ok) != 0xF) return 0;
        A->c[h] = c[h];
        A->first[h] = f;
        A->inv[h] = _mm256_div_pd(_mm256_set1_pd(1.0), s[h]);
        if (h) smax = _mm256_max_pd(smax, s[h]);
    }
    A->first_i = _mm256_set_m128i(_mm256_cvttpd_epi32(A->first[1]), _mm256_cvttpd_epi32(A->first[0]));
    A->taps = ax->taps;
    if (!affine && J->interp != NEAREST) { /* a perspective block needs fewer taps than the sample's largest */
        double lanes[4];
        _mm256_storeu_pd(lanes, smax);
        const double need = ceil(2.0 * J->radius * fmax(fmax(lanes[0], lanes[1]), fmax(lanes[2], lanes[3])) - 1e-9);
        if (need < A->taps) A->taps = need < 1.0 ? 1 : (int)need;
    }
    return 1;
}

/* The weights of an axis's taps (before any drop): float64 as the reference's (times 1 / s
 * where it divides by s), rounded to float32 */
AVX2 static inline void axis_weights(const Job *J, const Axis8 *A, __m256 *w) {
    for (int t = 0; t < A->taps; t++) {
        if (J->interp == NEAREST) {
            w[t] = _mm256_set1_ps(1.0f);
            continue;
        }
        __m128 half[2];
        for (int h = 0; h < 2; h++) {
            const __m256d k = _mm256_add_pd(A->first[h], _mm256_set1_pd((double)t));
            const __m256d d = _mm256_sub_pd(_mm256_add_pd(k, _mm256_set1_pd(0.5)), A->c[h]);
            half[h] = _mm256_cvtpd_ps(filter4(_mm256_mul_pd(d, A->inv[h]), J->interp));
        }
        w[t] = _mm256_set_m128(half[1], half[0]);
    }
}

/* The clip box, the image and the buffer, intersected: the taps an interior block may read */
static inline void readable(const Axis *ax, int64_t *lo, int64_t *hi) {
    *lo = ax->lo > 0 ? ax->lo : 0;
    *hi = ax->hi < ax->size ? ax->hi : ax->size;
    if (*lo < ax->origin) *lo = ax->origin;
    if (*hi > ax->origin + ax->len) *hi = ax->origin + ax->len;
}

AVX2 static inline int interior(const Axis *ax, const Axis8 *A) { /* every tap of every pixel readable */
    int64_t lo, hi;
    readable(ax, &lo, &hi);
    if (hi - lo < A->taps) return 0;
    const __m256i bad = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)lo), A->first_i),
                                        _mm256_cmpgt_epi32(A->first_i, _mm256_set1_epi32((int)(hi - A->taps))));
    return _mm256_testz_si256(bad, bad);
}

/* The reference's per-tap rules on 8 pixels (axis_taps): border index, drops outside the clip
 * box (weight 0), fill taps (outside the image with a constant border, for source points
 * outside the image); byte offsets of the clamped buffer index. 0 when a border index needs
 * more than one reflection or wrap (the exact path then takes the block). */
AVX2 static inline int edge_taps(const Job *J, const Axis *ax, const Axis8 *A, __m256i inside, __m256 *w,
                                 __m256i *off, __m256i *fill) {
    const __m256i size = _mm256_set1_epi32((int)ax->size), zero = _mm256_setzero_si256();
    const __m256i last = _mm256_set1_epi32((int)(ax->size - 1)), one = _mm256_set1_epi32(1);
    const __m256i lo = _mm256_set1_epi32((int)ax->lo), hi = _mm256_set1_epi32((int)ax->hi);
    __m256i bad = zero;
    for (int t = 0; t < A->taps; t++) {
        const __m256i k = _mm256_add_epi32(A->first_i, _mm256_set1_epi32(t));
        const __m256i below = _mm256_cmpgt_epi32(zero, k), above = _mm256_cmpgt_epi32(k, last);
        const __m256i out = _mm256_or_si256(below, above);
        __m256i kb, outside = _mm256_setzero_si256();
        if (J->border == CONSTANT || J->border == REPLICATE) {
            kb = _mm256_min_epi32(_mm256_max_epi32(k, zero), last);
            if (J->border == CONSTANT) outside = out;
        } else if (J->border == WRAP) {
            kb = _mm256_add_epi32(k, _mm256_and_si256(below, size));
            kb = _mm256_sub_epi32(kb, _mm256_and_si256(above, size));
            bad = _mm256_or_si256(bad, _mm256_or_si256(_mm256_cmpgt_epi32(zero, kb), _mm256_cmpgt_epi32(kb, last)));
        } else { /* reflect, once: -k below, 2 (size - 1) - k above */
            if (ax->size <= 1) {
                kb = zero;
            } else {
                const __m256i neg = _mm256_sub_epi32(zero, k);
                const __m256i mir = _mm256_sub_epi32(_mm256_add_epi32(last, last), k);
                kb = _mm256_blendv_epi8(_mm256_blendv_epi8(k, neg, below), mir, above);
                bad = _mm256_or_si256(bad, _mm256_or_si256(_mm256_cmpgt_epi32(zero, kb), _mm256_cmpgt_epi32(kb, last)));
            }
        }
        const __m256i f = _mm256_andnot_si256(inside, outside);
        const __m256i clip_ok = _mm256_andnot_si256(_mm256_or_si256(_mm256_cmpgt_epi32(lo, kb), _mm256_cmpgt_epi32(_mm256_add_epi32(kb, one), hi)),
                                                    _mm256_set1_epi32(-1));
        const __m256i keep = _mm256_or_si256(f, _mm256_andnot_si256(outside, clip_ok));
        w[t] = _mm256_and_ps(w[t], _mm256_castsi256_ps(keep));
        __m256i b = _mm256_sub_epi32(kb, _mm256_set1_epi32((int)ax->origin));
        b = _mm256_min_epi32(_mm256_max_epi32(b, zero), _mm256_set1_epi32((int)(ax->len - 1)));
        off[t] = _mm256_mullo_epi32(b, _mm256_set1_epi32((int)ax->stride));
        fill[t] = f;
    }
    return _mm256_testz_si256(bad, bad);
}

/* 8 pixels' 4 bytes at byte offsets off (each in the buffer; the 4 bytes from the last ones are
 * read from 1 to 3 bytes earlier and shifted) */
AVX2 static inline __m256i load8(const Job *J, __m256i off) {
    const __m256i top = _mm256_set1_epi32((int)(J->bytes - 4));
    const __m256i excess = _mm256_max_epi32(_mm256_sub_epi32(off, top), _mm256_setzero_si256());
    off = _mm256_sub_epi32(off, excess);
    int o[8];
    _mm256_storeu_si256((__m256i *)o, off);
    int32_t v[8];
    for (int l = 0; l < 8; l++) memcpy(&v[l], J->src + o[l], 4);
    return _mm256_srlv_epi32(_mm256_loadu_si256((const __m256i *)v), _mm256_slli_epi32(excess, 3));
}

/* Stores 8 values of one channel at output pixels (i, j..j+7) (element offset at, step dsx) */
AVX2 static inline void store8(const Job *J, int64_t at, __m256 v) {
    union { float f[8]; uint16_t h[8]; uint8_t b[8]; } tmp;
    switch (J->dtype) {
    case F32:
        if (J->dsx == 1) { _mm256_storeu_ps((float *)J->dst + at, v); return; }
        _mm256_storeu_ps(tmp.f, v);
        for (int l = 0; l < 8; l++) ((float *)J->dst)[at + l * J->dsx] = tmp.f[l];
        return;
    case F16: {
        const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (J->dsx == 1) { _mm_storeu_si128((__m128i *)((uint16_t *)J->dst + at), h); return; }
        _mm_storeu_si128((__m128i *)tmp.h, h);
        break;
    }
    case BF16: { /* to_bfloat16 (the values are finite) */
        const __m256i u = _mm256_castps_si256(v);
        const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), odd), 16);
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)tmp.h, _mm256_castsi256_si128(p));
        break;
    }
    default: { /* uint8: rounded to nearest even (the current rounding mode, as nearbyintf) */
        const __m256i q = _mm256_cvtps_epi32(v);
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(q, q), 0x08);
        const __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(p), _mm256_castsi256_si128(p));
        if (J->dsx == 1) { _mm_storel_epi64((__m128i *)((uint8_t *)J->dst + at), b); return; }
        _mm_storel_epi64((__m128i *)tmp.b, b);
        for (int l = 0; l < 8; l++) ((uint8_t *)J->dst)[at + l * J->dsx] = tmp.b[l];
        return;
    }
    }
    if (J->dsx == 1) { _mm_storeu_si128((__m128i *)((uint16_t *)J->dst + at), _mm_loadu_si128((const __m128i *)tmp.h)); return; }
    for (int l = 0; l < 8; l++) ((uint16_t *)J->dst)[at + l * J->dsx] = tmp.h[l];
}

/* PointwiseSpec on 8 warped pixels (finish_pixel's operations), stored from element offset at */
AVX2 static inline void finish8(const Job *J, int64_t at, __m256 c0, __m256 c1, __m256 c2) {
    if (J->color) {
        const float *a = J->a;
#define ROW(q) _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(a[4 * q]), c0), \
        _mm256_mul_ps(_mm256_set1_ps(a[4 * q + 1]), c1)), _mm256_mul_ps(_mm256_set1_ps(a[4 * q + 2]), c2)), _mm256_set1_ps(a[4 * q + 3]))
        const __m256 r0 = ROW(0), r1 = ROW(1), r2 = ROW(2);
#undef ROW
        c0 = r0;
        c1 = r1;
        c2 = r2;
    }
    if (J->clamp) {
        const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f);
        c0 = _mm256_max_ps(_mm256_min_ps(c0, top), zero); /* clampf for finite values */
        c1 = _mm256_max_ps(_mm256_min_ps(c1, top), zero);
        c2 = _mm256_max_ps(_mm256_min_ps(c2, top), zero);
    }
#define POST(c, n) _mm256_add_ps(_mm256_mul_ps(c, _mm256_set1_ps(J->k[n])), _mm256_set1_ps(J->b[n]))
    if (J->out_c == 1) {
        const __m256 g = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(c0, _mm256_set1_ps(0.299f)), _mm256_mul_ps(c1, _mm256_set1_ps(0.587f))),
                                       _mm256_mul_ps(c2, _mm256_set1_ps(0.114f)));
        store8(J, at, POST(g, 0));
    } else {
        store8(J, at, POST(c0, 0));
        store8(J, at + J->dsc, POST(c1, 1));
        store8(J, at + 2 * J->dsc, POST(c2, 2));
    }
#undef POST
}

/* acc_c += w * channel c of the 4-byte words g (channel bytes 0, ch1, ch2 of each word) */
#define ACCUMULATE(w, g)                                                                                      \
    do {                                                                                                      \
        acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(w, _mm256_cvtepi32_ps(_mm256_and_si256(g, byte))));          \
        if (!grey) {                                                                                          \
            acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(w, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(g, 8), byte)))); \
            acc2 = _mm256_add_ps(acc2, _mm256_mul_ps(w, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(g, 16), byte)))); \
        }                                                                                                     \
    } while (0)

/* Output pixels (i, j..j+7) by the vector path (pixels packed: channel stride 1, or grey); 0
 * (nothing written) when the block needs the exact path. */
AVX2 static int block8(const Job *J, int64_t i, int64_t j, int grey, const __m256i *chunk_shuffle) {
    const double *m = J->m;
    const __m256d y = _mm256_set1_pd((double)i + 0.5);
    const __m256d xs[2] = {_mm256_add_pd(_mm256_set1_pd((double)j), _mm256_setr_pd(0.5, 1.5, 2.5, 3.5)),
                           _mm256_add_pd(_mm256_set1_pd((double)j), _mm256_setr_pd(4.5, 5.5, 6.5, 7.5))};
    __m256d u[2], v[2], sx[2], sy[2];
    __m256i inside = _mm256_set1_epi32(-1);
    for (int h = 0; h < 2; h++) {
        const __m256d x = xs[h];
#define LIN(a, b, c) _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(a), x), _mm256_mul_pd(_mm256_set1_pd(b), y)), \
                                   _mm256_set1_pd(c))
        u[h] = LIN(m[0], m[1], m[2]);
        v[h] = LIN(m[3], m[4], m[5]);
        sx[h] = _mm256_set1_pd(J->sx_const);
        sy[h] = _mm256_set1_pd(J->sy_const);
        if (!J->affine) {
            const __m256d r = _mm256_div_pd(_mm256_set1_pd(1.0), LIN(m[6], m[7], m[8]));
            u[h] = _mm256_mul_pd(u[h], r);
            v[h] = _mm256_mul_pd(v[h], r);
            if (J->aa) {
#define JAC(a, b, c) _mm256_mul_pd(_mm256_sub_pd(_mm256_set1_pd(a), _mm256_mul_pd(c, _mm256_set1_pd(b))), r)
#define STRETCH(p, q, lim) _mm256_min_pd(_mm256_max_pd(_mm256_sqrt_pd(_mm256_add_pd(_mm256_mul_pd(p, p), _mm256_mul_pd(q, q))), \
                                                       _mm256_set1_pd(1.0)), _mm256_set1_pd(lim))
                const __m256d ja = JAC(m[0], m[6], u[h]), jb = JAC(m[1], m[7], u[h]);
                const __m256d jc = JAC(m[3], m[6], v[h]), jd = JAC(m[4], m[7], v[h]);
                sx[h] = STRETCH(ja, jb, J->lim_x);
                sy[h] = STRETCH(jc, jd, J->lim_y);
#undef JAC
#undef STRETCH
            }
        }
#undef LIN
        if (J->drow) { /* through the displacement field, lane by lane (the stretch stays the matrices') */
            double px[4], pu[4], pv[4];
            _mm256_storeu_pd(px, x);
            for (int l = 0; l < 4; l++) deformed_point(J, px[l], (double)i + 0.5, &pu[l], &pv[l]);
            u[h] = _mm256_loadu_pd(pu);
            v[h] = _mm256_loadu_pd(pv);
        }
        const __m256d in = _mm256_and_pd(_mm256_and_pd(_mm256_cmp_pd(u[h], _mm256_setzero_pd(), _CMP_GE_OQ),
                                                       _mm256_cmp_pd(u[h], _mm256_set1_pd(J->img_w), _CMP_LT_OQ)),
                                         _mm256_and_pd(_mm256_cmp_pd(v[h], _mm256_setzero_pd(), _CMP_GE_OQ),
                                                       _mm256_cmp_pd(v[h], _mm256_set1_pd(J->img_h), _CMP_LT_OQ)));
        /* 4 lanes of 64-bit masks to 4 lanes of 32 bits, in this half */
        const __m128i in32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(in), _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0)));
        inside = h ? _mm256_inserti128_si256(inside, in32, 1) : _mm256_inserti128_si256(inside, in32, 0);
    }
    Axis8 ay, ax;
    if (!axis_setup(J, &J->ay, v, sy, J->affine, &ay) || !axis_setup(J, &J->ax, u, sx, J->affine, &ax)) return 0;
    __m256 wy[MAX_TAPS], wx[MAX_TAPS];
    axis_weights(J, &ay, wy);
    axis_weights(J, &ax, wx);
    const __m256i byte = _mm256_set1_epi32(0xFF);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0;
    int fast = chunk_shuffle != NULL && interior(&J->ay, &ay) && interior(&J->ax, &ax);
    __m256i row0 = _mm256_setzero_si256(), col0 = row0;
    if (fast) { /* every tap 16 bytes into the buffer too: whole 16-byte chunks of each pixel's row */
        row0 = _mm256_mullo_epi32(_mm256_sub_epi32(ay.first_i, _mm256_set1_epi32((int)J->ay.origin)), _mm256_set1_epi32((int)J->ay.stride));
        col0 = _mm256_mullo_epi32(_mm256_sub_epi32(ax.first_i, _mm256_set1_epi32((int)J->ax.origin)), _mm256_set1_epi32((int)J->ax.stride));
        const int64_t reach = (int64_t)(ay.taps - 1) * J->ay.stride + (int64_t)(((ax.taps - 1) / 4) * 4) * J->ax.stride + 16;
        const __m256i end = _mm256_add_epi32(_mm256_add_epi32(row0, col0), _mm256_set1_epi32((int)reach));
        const __m256i past = _mm256_cmpgt_epi32(end, _mm256_set1_epi32((int)J->bytes));
        fast = _mm256_testz_si256(past, past);
    }
    if (fast) {
        const __m256i shuf = *chunk_shuffle;
        for (int ty = 0; ty < ay.taps; ty++) {
            int o[8];
            _mm256_storeu_si256((__m256i *)o, _mm256_add_epi32(_mm256_add_epi32(row0, col0),
                                                               _mm256_set1_epi32((int)(ty * J->ay.stride))));
            for (int t0 = 0; t0 < ax.taps; t0 += 4) {
                const uint8_t *s = J->src + t0 * J->ax.stride;
                /* lanes l and l + 4 in the two halves, then 4 taps of 4 bytes per half, transposed */
#define PAIR(l) _mm256_shuffle_epi8(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(s + o[l]))), \
                                                            _mm_loadu_si128((const __m128i *)(s + o[l + 4])), 1), shuf)
                const __m256i p0 = PAIR(0), p1 = PAIR(1), p2 = PAIR(2), p3 = PAIR(3);
#undef PAIR
                const __m256i q0 = _mm256_unpacklo_epi32(p0, p1), q1 = _mm256_unpackhi_epi32(p0, p1);
                const __m256i q2 = _mm256_unpacklo_epi32(p2, p3), q3 = _mm256_unpackhi_epi32(p2, p3);
                const __m256i g[4] = {_mm256_unpacklo_epi64(q0, q2), _mm256_unpackhi_epi64(q0, q2),
                                      _mm256_unpacklo_epi64(q1, q3), _mm256_unpackhi_epi64(q1, q3)};
                const int n = ax.taps - t0 < 4 ? ax.taps - t0 : 4;
                for (int k = 0; k < n; k++) {
                    const __m256 w = _mm256_mul_ps(wy[ty], wx[t0 + k]);
                    ACCUMULATE(w, g[k]);
                }
            }
        }
    } else {
        __m256i offy[MAX_TAPS], offx[MAX_TAPS], fy[MAX_TAPS], fx[MAX_TAPS];
        if (!edge_taps(J, &J->ay, &ay, inside, wy, offy, fy) || !edge_taps(J, &J->ax, &ax, inside, wx, offx, fx)) return 0;
        const __m256 fill0 = _mm256_set1_ps(J->fill[0]), fill1 = _mm256_set1_ps(J->fill[1]), fill2 = _mm256_set1_ps(J->fill[2]);
        for (int ty = 0; ty < ay.taps; ty++) {
            for (int tx = 0; tx < ax.taps; tx++) {
                const __m256 w = _mm256_mul_ps(wy[ty], wx[tx]);
                const __m256i g = load8(J, _mm256_add_epi32(offy[ty], offx[tx]));
                const __m256 f = _mm256_castsi256_ps(_mm256_or_si256(fy[ty], fx[tx]));
                __m256 c0 = _mm256_cvtepi32_ps(_mm256_and_si256(g, byte));
                __m256 c1 = c0, c2 = c0;
                if (!grey) {
                    c1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(g, 8), byte));
                    c2 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(g, 16), byte));
                }
                acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(w, _mm256_blendv_ps(c0, fill0, f)));
                acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(w, _mm256_blendv_ps(c1, fill1, f)));
                acc2 = _mm256_add_ps(acc2, _mm256_mul_ps(w, _mm256_blendv_ps(c2, fill2, f)));
            }
        }
        grey = 0; /* the fill colours made the channels differ */
    }
    if (grey) acc1 = acc2 = acc0;
    __m256 sum_y = _mm256_setzero_ps(), sum_x = sum_y;
    for (int t = 0; t < ay.taps; t++) sum_y = _mm256_add_ps(sum_y, wy[t]);
    for (int t = 0; t < ax.taps; t++) sum_x = _mm256_add_ps(sum_x, wx[t]);
    const __m256 norm = _mm256_mul_ps(sum_y, sum_x);
    const __m256 pos = _mm256_cmp_ps(norm, _mm256_setzero_ps(), _CMP_GT_OQ);
    const __m256 r = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_max_ps(norm, _mm256_set1_ps(1e-12f)));
    __m256 c0 = _mm256_blendv_ps(_mm256_set1_ps(J->fill[0]), _mm256_mul_ps(acc0, r), pos);
    __m256 c1 = _mm256_blendv_ps(_mm256_set1_ps(J->fill[1]), _mm256_mul_ps(acc1, r), pos);
    __m256 c2 = _mm256_blendv_ps(_mm256_set1_ps(J->fill[2]), _mm256_mul_ps(acc2, r), pos);
    finish8(J, i * J->dsy + j * J->dsx, c0, c1, c2);
    return 1;
}
#undef ACCUMULATE

/* The pshufb pattern that turns 16 bytes of a row into 4 taps' 4-byte words (channels in bytes
 * 0..2, zeros above), for pixels sx bytes apart; 0 where 4 taps do not fit in 16 bytes. */
AVX2 static int chunk_pattern(int64_t sx, int64_t ch1, int64_t ch2, int grey, __m256i *out) {
    if (sx < 1 || 3 * sx + (grey ? 0 : ch2) >= 16) return 0;
    int8_t p[32];
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < 4; t++) {
            int8_t *q = p + 16 * h + 4 * t;
            q[0] = (int8_t)(t * sx);
            q[1] = grey ? -1 : (int8_t)(t * sx + ch1);
            q[2] = grey ? -1 : (int8_t)(t * sx + ch2);
            q[3] = -1;
        }
    *out = _mm256_loadu_si256((const __m256i *)p);
    return 1;
}

static int has_avx2(void) {
    static int known = -1; /* a benign race: every thread computes the same answer */
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    }
    return known;
}

AVX2 static void rows_avx2(const Job *J, int64_t H, int64_t W, int grey) {
    __m256i pattern;
    const __m256i *shuffle = chunk_pattern(J->ax.stride, J->ch1, J->ch2, grey, &pattern) ? &pattern : NULL;
    float c[3];
    for (int64_t i = 0; i < H; i++) {
        int64_t j = 0;
        for (; j + 8 <= W; j += 8)
            if (!block8(J, i, j, grey, shuffle))
                for (int64_t l = j; l < j + 8; l++) {
                    warp_pixel(J, i, l, c);
                    finish_pixel(J, i, l, c);
                }
        for (; j < W; j++) {
            warp_pixel(J, i, j, c);
            finish_pixel(J, i, j, c);
        }
    }
}
#endif

