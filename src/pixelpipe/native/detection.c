/* The detection pipeline's planning in C: RandomIoUCrop's trials (ops/detection.py) and a
 * batch's boxes moved through their samples' matrices (data/targets.py, Boxes.moved), one call
 * per batch each. Why: in numpy the crop is dozens of calls per round on arrays of a few
 * thousand numbers (every trial of every open sample against every box of its sample), and it
 * was most of an ssd batch's planning; here a sample stops at the first window that holds
 * (usually one of the first few) and hashes only the draws it reads.
 *
 * The same float64 operations in the same order as the numpy code, built with
 * -ffp-contract=off and no fast-math (setup.py), so the results are the same bits; numpy's
 * minimum, maximum and clip are written out below with numpy's answers for NaN and for ties
 * between 0.0 and -0.0. tests/test_native_detection.py compares both. */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "hash.h"

/* numpy's minimum and maximum of float64s: NaN where either is; on a tie, the second (which
 * tells -0.0 from 0.0). A reduction over an axis folds its elements in order. */
static inline double np_min(double a, double b) { return a != a ? a : (b != b ? b : (a < b ? a : b)); }
static inline double np_max(double a, double b) { return a != a ? a : (b != b ? b : (a > b ? a : b)); }

/* np.clip(x, lo, hi) with hi an array: a NaN x stays, ties go to the bound. */
static inline double np_clip(double x, double lo, double hi) {
    if (x != x) return x;
    double t = x > lo ? x : lo;
    return t < hi ? t : hi;
}

/* _best_iou for one window (ct, cl, ch, cw) and one sample's k boxes [k, 4]: the best IoU with a
 * box whose centre lies strictly inside the window, -1 where none does (NaN as numpy's
 * maximum.reduceat carries it). */
static double best_iou(const double *boxes, int64_t k, double ct, double cl, double ch, double cw) {
    double best = -1.0, cr = cl + cw, cb = ct + ch;
    for (int64_t j = 0; j < k; j++) {
        const double *q = boxes + 4 * j;
        double x0 = q[0], y0 = q[1], x1 = q[2], y1 = q[3];
        double cx = (x0 + x1) / 2, cy = (y0 + y1) / 2, iou = -1.0;
        if (cl < cx && cx < cr && ct < cy && cy < cb) {
            double iw = np_min(x1, cr) - np_max(x0, cl), ih = np_min(y1, cb) - np_max(y0, ct);
            double inter = np_max(iw, 0.0) * np_max(ih, 0.0);
            double uni = (x1 - x0) * (y1 - y0) + cw * ch - inter;
            iou = uni > 0 ? inter / uni : 0.0;
        }
        best = j ? np_max(best, iou) : iou;
    }
    return best;
}

/* RandomIoUCrop.sample: prefix [n] (random.prefix) and op (the op's position); sizes [n, 2]
 * (h, w); boxes [K, 4] (x0, y0, x1, y1) of the samples in order, counts [n] of them, or NULL
 * for a batch without boxes (every image stays whole); options [n_options]; scale: min_scale
 * and max_scale - min_scale (as Python computes it), ratio: min and max aspect ratio. Round r
 * reads draw r (1 + 4 trials) for its option and the next 4 per trial (width, height, left,
 * top). out [n, 4]: top, left, height, width (the whole image where no window was taken). */
void pp_iou_crop(const uint32_t *prefix, int64_t op, const double *sizes, int64_t n, const double *boxes,
                 const int64_t *counts, const double *options, int64_t n_options, double s0, double ds, double r0,
                 double r1, int64_t trials, int64_t rounds, double *out) {
    int64_t per_round = 1 + 4 * trials, first = 0;
    for (int64_t i = 0; i < n; i++) {
        double H = sizes[2 * i], W = sizes[2 * i + 1];
        double top = 0.0, left = 0.0, h = H, w = W;
        int64_t k = counts ? counts[i] : 0;
        const double *own = counts ? boxes + 4 * first : 0;
        first += k;
        uint32_t s = fold(prefix[i], op);
        int done = counts == 0;
        for (int64_t r = 0; r < rounds && !done; r++) {
            int64_t d = r * per_round;
            int64_t pick = (int64_t)(unit(mix(fold(s, d))) * (double)n_options);
            double option = options[pick < n_options - 1 ? pick : n_options - 1];
            if (!(option < 1.0)) break; /* the image stays whole */
            for (int64_t t = 0; t < trials; t++) {
                int64_t e = d + 1 + 4 * t;
                double q0 = unit(mix(fold(s, e))), q1 = unit(mix(fold(s, e + 1)));
                double cw = floor(W * (s0 + ds * q0)), ch = floor(H * (s0 + ds * q1));
                double aspect = cw / ch;
                if (!(ch > 0 && cw > 0 && aspect >= r0 && aspect <= r1)) continue;
                double cl = floor((W - cw) * unit(mix(fold(s, e + 2))));
                double ct = floor((H - ch) * unit(mix(fold(s, e + 3))));
                if (best_iou(own, k, ct, cl, ch, cw) >= option) {
                    top = ct;
                    left = cl;
                    h = ch;
                    w = cw;
                    done = 1;
                    break;
                }
            }
        }
        out[4 * i] = top;
        out[4 * i + 1] = left;
        out[4 * i + 2] = h;
        out[4 * i + 3] = w;
    }
}

/* Boxes.moved: boxes [K, 4] of n samples (counts [n]) through their sample's matrix m [n, 3, 3]
 * (perspective division included), each becoming the box around its four moved corners (in
 * box_outline's order), clipped to out_sizes [n, 2] (h, w). out [K, 4]; out_visible [K]:
 * visible times the fraction of the moved box that clipping kept (1 for an empty moved box,
 * numpy's nan_to_num of it otherwise). */
void pp_move_boxes(const double *boxes, const int64_t *counts, int64_t n, const double *m, const double *out_sizes,
                   const double *visible, double *out, double *out_visible) {
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++) {
        const double *a = m + 9 * i;
        double h = out_sizes[2 * i], w = out_sizes[2 * i + 1];
        /* an affine matrix: pz is exactly 1 at every point and dividing by it changes nothing,
           so its eight divisions per box are left out (the same values) */
        int affine = a[6] == 0.0 && a[7] == 0.0 && a[8] == 1.0;
        for (int64_t c = 0; c < counts[i]; c++, j++) {
            const double *q = boxes + 4 * j;
            double xs[4] = {q[0], q[2], q[2], q[0]}, ys[4] = {q[1], q[1], q[3], q[3]};
            double lx = 0.0, ly = 0.0, hx = 0.0, hy = 0.0;
            for (int p = 0; p < 4; p++) {
                double x = xs[p], y = ys[p];
                double u = a[0] * x + a[1] * y + a[2], v = a[3] * x + a[4] * y + a[5];
                if (!affine) {
                    double pz = a[6] * x + a[7] * y + a[8];
                    u /= pz;
                    v /= pz;
                }
                if (p == 0) {
                    lx = hx = u;
                    ly = hy = v;
                } else {
                    lx = np_min(lx, u);
                    ly = np_min(ly, v);
                    hx = np_max(hx, u);
                    hy = np_max(hy, v);
                }
            }
            double whole = (hx - lx) * (hy - ly);
            lx = np_clip(lx, 0.0, w);
            ly = np_clip(ly, 0.0, h);
            hx = np_clip(hx, 0.0, w);
            hy = np_clip(hy, 0.0, h);
            double kept = whole > 0 ? ((hx - lx) * (hy - ly)) / whole : 1.0;
            if (kept != kept) kept = 0.0; /* nan_to_num */
            else if (isinf(kept)) kept = kept > 0 ? DBL_MAX : -DBL_MAX;
            out_visible[j] = visible[j] * kept;
            double *o = out + 4 * j;
            o[0] = lx;
            o[1] = ly;
            o[2] = hx;
            o[3] = hy;
        }
    }
}
