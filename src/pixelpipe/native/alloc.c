/* nvImageCodec's device and pinned allocators, on CUDA's runtime (see decode/nvimgcodec_alloc.py).

nvImageCodec calls these from its own threads; they forward to the CUDA runtime functions that
pp_alloc_set() was handed (the process's libcudart, found at run time, so this file links to
nothing). Device memory comes, in stream order, from the memory pool that ctx points to (one
per device), so an allocation or a free never synchronises the device, and the current device
of the calling thread does not matter. Pinned memory is portable page-locked host memory,
freed at once (cudaFreeHost takes no stream). Each call is counted (pp_alloc_counts), with the
frees that name no stream (NULL) apart: a device free ordered on the legacy default stream is
not ordered after work on nvImageCodec's non-blocking streams, and a pinned free that names a
stream may free a buffer a copy queued there still reads. */
#include <stddef.h>

typedef int (*pool_malloc_t)(void **ptr, size_t size, void *pool, void *stream);
typedef int (*free_async_t)(void *ptr, void *stream);
typedef int (*host_alloc_t)(void **ptr, size_t size, unsigned int flags);
typedef int (*free_host_t)(void *ptr);

static pool_malloc_t g_pool_malloc;
static free_async_t g_free_async;
static host_alloc_t g_host_alloc;
static free_host_t g_free_host;

/* device mallocs, device frees on a stream, device frees on the NULL stream, pinned mallocs,
   pinned frees without a stream, pinned frees that named one (decode/nvimgcodec_alloc.COUNTS) */
enum { N_DEV_MALLOC, N_DEV_FREE, N_DEV_FREE_NULL, N_PIN_MALLOC, N_PIN_FREE, N_PIN_FREE_STREAM, N_COUNTS };
static unsigned long long g_counts[N_COUNTS];

static void count(int which)
{
    __atomic_fetch_add(&g_counts[which], 1ULL, __ATOMIC_RELAXED);
}

void pp_alloc_counts(unsigned long long *out)
{
    for (int i = 0; i < N_COUNTS; i++)
        out[i] = __atomic_load_n(&g_counts[i], __ATOMIC_RELAXED);
}

#define PP_HOST_ALLOC_PORTABLE 1u /* cudaHostAllocPortable: pinned for every CUDA context */

/* cudaMallocFromPoolAsync, cudaFreeAsync, cudaHostAlloc, cudaFreeHost */
void pp_alloc_set(void *pool_malloc, void *free_async, void *host_alloc, void *free_host)
{
    g_pool_malloc = (pool_malloc_t)pool_malloc;
    g_free_async = (free_async_t)free_async;
    g_host_alloc = (host_alloc_t)host_alloc;
    g_free_host = (free_host_t)free_host;
}

/* ctx: the address of a cudaMemPool_t */
int pp_device_malloc(void *ctx, void **ptr, size_t size, void *stream)
{
    count(N_DEV_MALLOC);
    return g_pool_malloc(ptr, size, *(void **)ctx, stream);
}

int pp_device_free(void *ctx, void *ptr, size_t size, void *stream)
{
    (void)ctx; (void)size;
    if (!ptr)
        return 0;
    count(stream ? N_DEV_FREE : N_DEV_FREE_NULL);
    return g_free_async(ptr, stream);
}

int pp_pinned_malloc(void *ctx, void **ptr, size_t size, void *stream)
{
    (void)ctx; (void)stream;
    count(N_PIN_MALLOC);
    return g_host_alloc(ptr, size, PP_HOST_ALLOC_PORTABLE);
}

int pp_pinned_free(void *ctx, void *ptr, size_t size, void *stream)
{
    (void)ctx; (void)size;
    if (!ptr)
        return 0;
    count(stream ? N_PIN_FREE_STREAM : N_PIN_FREE);
    return g_free_host(ptr);
}
