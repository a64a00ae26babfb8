/* A batch's nvImageCodec code streams, region views and images made in one C call, and released
in one (see decode/nvimgcodec_open.py).

Why: made one by one from Python, these three calls per image held the GIL for about 4.7 ms per
batch of 256 on the planning thread of a GPU Pipeline (measured on a 16-core H100 host), and the
Pipeline's threads were bound by the GIL. Called through ctypes without the GIL, the same calls
leave the GIL to the other threads.

The structs nvImageCodec reads (nvimgcodecCodeStreamView_t, nvimgcodecImageInfo_t) are filled
from templates pixelpipe's ctypes mirrors made (decode/nvimgcodec_structs.py, whose layouts a
test compares with the installed header); this file writes only the fields that change per
image, at the byte offsets it is given, so it needs no copy of those layouts. The library's
functions are handed over by pp_open_set() (this file links to nothing). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int (*cs_create_t)(void *instance, void **stream, const unsigned char *data, size_t length, const char *name);
typedef int (*cs_sub_t)(void *stream, void **sub, const void *view);
typedef int (*cs_destroy_t)(void *stream);
typedef int (*image_create_t)(void *instance, void **image, const void *info);
typedef int (*image_destroy_t)(void *image);

static cs_create_t g_create;
static cs_sub_t g_sub;
static cs_destroy_t g_cs_destroy;
static image_create_t g_image_create;
static image_destroy_t g_image_destroy;

/* nvimgcodecCodeStreamCreateFromHostMem, nvimgcodecCodeStreamGetSubCodeStream,
   nvimgcodecCodeStreamDestroy, nvimgcodecImageCreate, nvimgcodecImageDestroy */
void pp_open_set(void *create, void *sub, void *cs_destroy, void *image_create, void *image_destroy)
{
    g_create = (cs_create_t)create;
    g_sub = (cs_sub_t)sub;
    g_cs_destroy = (cs_destroy_t)cs_destroy;
    g_image_create = (image_create_t)image_create;
    g_image_destroy = (image_destroy_t)image_destroy;
}

/* what codes[k] says */
#define PP_OPEN_OK 0
#define PP_OPEN_PARSE 1 /* no code stream: nvImageCodec cannot parse the blob */
#define PP_OPEN_REGION 2 /* the region view was refused */
#define PP_OPEN_IMAGE 3 /* the image could not be made */
#define PP_OPEN_MEMORY 4 /* out of memory for the templates' copies */

/* layout: byte offsets in the templates, as int64:
   [0] sizeof(view), [1] view.region.start[0], [2] view.region.end[0] (int32 y then x),
   [3] sizeof(info), [4] info.plane_info[0].width, [5] .height (uint32), [6] .row_stride (size_t),
   [7] info.buffer (a pointer).
   For each of the n blobs: a code stream (parents[k]) and, where boxes[k] (y0, x0, y1, x1, flag)
   has flag 1, a region view of it (subs[k]); then an image of sizes[k] (h, w; interleaved RGB) at
   buffer + offsets[k]. codes[k] says how far it got; every handle made is kept (NULL where none),
   for pp_release_batch. The decodable ones, in batch order, go to streams[] (the view, or the
   whole code stream) and images[]. Returns how many there are. staging: NULL, or pinned host
   memory of at least the sum of the lengths each rounded up to 64 bytes: each blob is copied
   there (in batch order, 64-byte aligned) and its code stream reads the copy. */
int pp_open_batch(void *instance, int n, const unsigned char **blobs, const size_t *lengths, const int32_t *boxes,
                  const int32_t *sizes, uint64_t buffer, const uint64_t *offsets, const int64_t *layout,
                  const void *view_template, const void *info_template, void **parents, void **subs,
                  void **image_of, int *codes, void **streams, void **images, unsigned char *staging)
{
    unsigned char *view = (unsigned char *)malloc((size_t)layout[0]);
    unsigned char *info = (unsigned char *)malloc((size_t)layout[3]);
    int m = 0;
    if (!view || !info) {
        for (int k = 0; k < n; k++) {
            parents[k] = subs[k] = image_of[k] = NULL;
            codes[k] = PP_OPEN_MEMORY;
        }
        free(view);
        free(info);
        return 0;
    }
    memcpy(view, view_template, (size_t)layout[0]);
    memcpy(info, info_template, (size_t)layout[3]);
    size_t staged = 0;
    for (int k = 0; k < n; k++) {
        void *parent = NULL, *sub = NULL, *image = NULL;
        parents[k] = subs[k] = image_of[k] = NULL;
        const unsigned char *data = blobs[k];
        if (staging) {
            memcpy(staging + staged, blobs[k], lengths[k]);
            data = staging + staged;
            staged += (lengths[k] + 63) & ~(size_t)63;
        }
        if (g_create(instance, &parent, data, lengths[k], NULL) != 0) {
            codes[k] = PP_OPEN_PARSE;
            continue;
        }
        parents[k] = parent;
        void *stream = parent;
        const int32_t *box = boxes + 5 * k;
        if (box[4]) {
            int32_t start[2] = {box[0], box[1]}, end[2] = {box[2], box[3]};
            memcpy(view + layout[1], start, sizeof start);
            memcpy(view + layout[2], end, sizeof end);
            if (g_sub(parent, &sub, view) != 0) {
                codes[k] = PP_OPEN_REGION;
                continue;
            }
            subs[k] = sub;
            stream = sub;
        }
        uint32_t h = (uint32_t)sizes[2 * k], w = (uint32_t)sizes[2 * k + 1];
        size_t stride = (size_t)w * 3;
        void *at = (void *)(uintptr_t)(buffer + offsets[k]);
        memcpy(info + layout[4], &w, sizeof w);
        memcpy(info + layout[5], &h, sizeof h);
        memcpy(info + layout[6], &stride, sizeof stride);
        memcpy(info + layout[7], &at, sizeof at);
        if (g_image_create(instance, &image, info) != 0) {
            codes[k] = PP_OPEN_IMAGE;
            continue;
        }
        image_of[k] = image;
        codes[k] = PP_OPEN_OK;
        streams[m] = stream;
        images[m] = image;
        m++;
    }
    free(view);
    free(info);
    return m;
}

/* Destroys what pp_open_batch made: the images, then the region views, then the code streams. */
void pp_release_batch(int n, void **parents, void **subs, void **image_of)
{
    for (int k = 0; k < n; k++)
        if (image_of[k])
            g_image_destroy(image_of[k]);
    for (int k = 0; k < n; k++)
        if (subs[k])
            g_cs_destroy(subs[k]);
    for (int k = 0; k < n; k++)
        if (parents[k])
            g_cs_destroy(parents[k]);
}
