/* A sample's COCO polygon masks rasterised by pycocotools' own C functions (maskApi: rleFrPoly,
 * rleMerge, rleDecode, rleFree), called from one C call per sample that releases the GIL (see
 * readers/_coco_native.py). This file links to nothing: pp_coco_set() is handed the addresses of
 * those functions in the installed pycocotools' extension, so the rasterisation is the kept
 * library's, bit for bit.
 *
 * Why: through pycocotools' Python functions each object took four calls holding the GIL (about
 * 50 us of an ImageNet-sized sample's 0.5 ms for seven objects), so a Pipeline's reader threads
 * rasterised one sample at a time; here the threads work side by side.
 *
 * For object k: parts[k] polygons, each of lengths[] coordinates (x, y, x, y, ...; a polygon of
 * L values has L / 2 corners, as pycocotools counts them) in the image, rasterised inside the
 * object's window (y0, x0, y1, x1) of the label image (each coordinate less x0 or y0, as the
 * Python twin shifts them); its label values[k] is written (as `elem` bytes: 1 or 4) where the
 * decoded mask of its merged polygons is set. */
#include <stdint.h>
#include <stdlib.h>

typedef unsigned int uint;
typedef unsigned long siz;
typedef unsigned char byte;
typedef struct {
    siz h, w, m;
    uint *cnts;
} RLE; /* maskApi.h's */

typedef void (*fr_poly_t)(RLE *R, const double *xy, siz k, siz h, siz w);
typedef void (*merge_t)(const RLE *R, RLE *M, siz n, int intersect);
typedef void (*decode_t)(const RLE *R, byte *mask, siz n);
typedef void (*free_t)(RLE *R);

static fr_poly_t g_fr_poly;
static merge_t g_merge;
static decode_t g_decode;
static free_t g_free;

/* rleFrPoly, rleMerge, rleDecode, rleFree */
void pp_coco_set(void *fr_poly, void *merge, void *decode, void *free_rle) {
    g_fr_poly = (fr_poly_t)fr_poly;
    g_merge = (merge_t)merge;
    g_decode = (decode_t)decode;
    g_free = (free_t)free_rle;
}

/* Returns 0, or -1 when memory ran out (the label image is then incomplete). */
int pp_coco_polygons(int64_t n, const int64_t *parts, const int64_t *lengths, const double *xy,
                     const int64_t *windows, const int64_t *values, int64_t elem, uint8_t *out, int64_t w) {
    for (int64_t k = 0; k < n; k++) {
        const int64_t y0 = windows[4 * k], x0 = windows[4 * k + 1];
        const siz wh = (siz)(windows[4 * k + 2] - y0), ww = (siz)(windows[4 * k + 3] - x0);
        const int64_t np = parts[k];
        int64_t values_of_object = 0;
        for (int64_t p = 0; p < np; p++)
            values_of_object += lengths[p];
        RLE *R = (RLE *)calloc((size_t)(np > 0 ? np : 1), sizeof(RLE));
        byte *mask = (byte *)malloc(wh * ww > 0 ? wh * ww : 1);
        double *shifted = (double *)malloc(sizeof(double) * (size_t)(values_of_object > 0 ? values_of_object : 1));
        if (!R || !mask || !shifted) {
            free(R);
            free(mask);
            free(shifted);
            return -1;
        }
        double *at_value = shifted;
        for (int64_t p = 0; p < np; p++) {
            for (int64_t j = 0; j < lengths[p]; j++)
                at_value[j] = xy[j] - (double)((j & 1) ? y0 : x0);
            g_fr_poly(&R[p], at_value, (siz)(lengths[p] / 2), wh, ww);
            xy += lengths[p];
            at_value += lengths[p];
        }
        free(shifted);
        lengths += np;
        RLE M = {0, 0, 0, NULL};
        if (np == 1) {
            g_decode(&R[0], mask, 1);
        } else {
            g_merge(R, &M, (siz)np, 0);
            g_decode(&M, mask, 1);
            g_free(&M);
        }
        for (int64_t p = 0; p < np; p++)
            g_free(&R[p]);
        free(R);
        const int64_t value = values[k];
        for (siz x = 0; x < ww; x++) { /* the decoded mask is column-major (pycocotools' order) */
            const byte *col = mask + x * wh;
            for (siz y = 0; y < wh; y++) {
                if (!col[y])
                    continue;
                uint8_t *at = out + ((y0 + (int64_t)y) * w + x0 + (int64_t)x) * elem;
                if (elem == 1)
                    *at = (uint8_t)value;
                else
                    *(int32_t *)at = (int32_t)value;
            }
        }
        free(mask);
    }
    return 0;
}
