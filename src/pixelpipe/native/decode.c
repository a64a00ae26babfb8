/* nvImageCodec's decode of one batch in one C call (see decode/nvimgcodec_c.py, CDecoder._run).

Called through ctypes without the GIL: the decode, the wait for it, the statuses and the
future's release run back to back, so the calling thread takes the GIL once per batch instead
of after each of the library calls (in a Pipeline, each time it may wait for another thread's
Python). The library's functions are handed over by pp_decode_set() (this file links to
nothing). Timestamps (CLOCK_MONOTONIC, Python's time.perf_counter) say when the decode was
issued and when the wait ended, for the benchmarks. */
#define _POSIX_C_SOURCE 199309L
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef int (*decode_t)(void *decoder, void **streams, void **images, int n, const void *params, void **future);
typedef int (*wait_t)(void *future);
typedef int (*status_t)(void *future, uint32_t *status, size_t *size);
typedef int (*destroy_t)(void *future);

static decode_t g_decode;
static wait_t g_wait;
static status_t g_status;
static destroy_t g_destroy;

/* nvimgcodecDecoderDecode, nvimgcodecFutureWaitForAll, nvimgcodecFutureGetProcessingStatus,
   nvimgcodecFutureDestroy */
void pp_decode_set(void *decode, void *wait, void *status, void *destroy)
{
    g_decode = (decode_t)decode;
    g_wait = (wait_t)wait;
    g_status = (status_t)status;
    g_destroy = (destroy_t)destroy;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Decodes n code streams into n images. status: n entries, *count: how many the library
   reported; times: [issued, waited] (seconds). Returns 0, or the step that failed (1 decode,
   2 wait, 3 statuses) with the library's status in *failure. */
int pp_decode_batch(void *decoder, void **streams, void **images, int n, const void *params,
                    uint32_t *status, size_t *count, double *times, int *failure)
{
    void *future = NULL;
    int rc;
    times[0] = now();
    rc = g_decode(decoder, streams, images, n, params, &future);
    if (rc != 0) {
        *failure = rc;
        times[1] = now();
        return 1;
    }
    rc = g_wait(future);
    times[1] = now();
    if (rc != 0) {
        *failure = rc;
        g_destroy(future);
        return 2;
    }
    rc = g_status(future, status, count);
    g_destroy(future);
    if (rc != 0) {
        *failure = rc;
        return 3;
    }
    return 0;
}
