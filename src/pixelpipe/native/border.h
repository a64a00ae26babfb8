/* The border rules of kernels.filters.border_index in C, for the C files that resample (warp.c,
 * mask_warp.c): the same index for every rule, so the same pixels. */
#ifndef PIXELPIPE_BORDER_H
#define PIXELPIPE_BORDER_H

#include <stdint.h>

enum { CONSTANT = 0, REFLECT = 1, REPLICATE = 2, WRAP = 3 };

/* filters.border_index: k mapped into [0, size); *outside for a constant border's fill taps */
static inline int64_t border_index(int64_t k, int64_t size, int border, int *outside) {
    *outside = 0;
    if (k >= 0 && k < size) return k;
    if (border == CONSTANT) {
        *outside = 1;
        return k < 0 ? 0 : size - 1;
    }
    if (border == REPLICATE) return k < 0 ? 0 : size - 1;
    if (border == WRAP) {
        int64_t m = k % size;
        return m < 0 ? m + size : m;
    }
    if (size <= 1) return 0; /* reflect: period 2 (size - 1); one pixel has nothing to mirror */
    int64_t period = 2 * (size - 1), m = k % period;
    if (m < 0) m += period;
    return m >= size ? period - m : m;
}

#endif
