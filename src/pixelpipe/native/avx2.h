/* Whether the CPU running this has AVX2, asked once per library (GCC/Clang on x86-64; 0
 * elsewhere), for the C files that compile a loop twice (plain, and with
 * __attribute__((target("avx2")))) and pick the copy at run time: blur.c, policy.c. */
#ifndef PIXELPIPE_AVX2_H
#define PIXELPIPE_AVX2_H

#if defined(__x86_64__) && defined(__GNUC__)
#define PP_HAS_AVX2_TARGET 1
static int has_avx2(void) {
    static int known = -1; /* a benign race: every thread computes the same answer */
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return known;
}
#else
static int has_avx2(void) { return 0; }
#endif

#endif
