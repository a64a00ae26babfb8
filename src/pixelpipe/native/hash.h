/* The counter-based hash of pixelpipe.data.random in C, for the C files that draw (planner.c,
 * detection.c): the same integer operations, so the same bits. */
#ifndef PIXELPIPE_HASH_H
#define PIXELPIPE_HASH_H

#include <stdint.h>

#define GOLDEN 0x9E3779B9u

static inline uint32_t mix(uint32_t x) {  /* random._mix_u32 */
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

static inline uint32_t fold(uint32_t h, int64_t key) {  /* random._fold_numpy: low word, then high */
    uint64_t k = (uint64_t)key;
    h = mix((h + GOLDEN) ^ (uint32_t)(k & 0xFFFFFFFFu));
    return mix((h + GOLDEN) ^ (uint32_t)(k >> 32));
}

static inline double unit(uint32_t h) {  /* random._unit_numpy: float32 of the top 24 bits */
    return (double)((float)(h >> 8) * (float)(1.0 / (1 << 24)));
}

#endif
