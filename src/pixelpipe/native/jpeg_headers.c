/* JPEG headers of a batch parsed in one C call (see decode/headers_batch.py).

The same walk as decode/headers.py's parse_jpeg (its twin and reference): marker segments up
to the frame header or the first scan, the orientation from the first APP1 "Exif" segment.
Where parse_jpeg would raise, or the blob is not a JPEG, the row says "not parsed" and the
caller runs parse_jpeg itself, so every error keeps its message. Why: parse_jpeg costs about
8 us of Python per image, 2-2.5 ms per batch of 256 on a GPU Pipeline's planning thread, whose
threads are bound by the GIL (measured on a 16-core H100 host). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define FIELDS 9 /* ok, height, width, components, bits, sof, orientation, sos_end, scan_components */

static int is_sof(int m)
{
    return m == 0xC0 || m == 0xC1 || m == 0xC2 || m == 0xC3 || m == 0xC5 || m == 0xC6 || m == 0xC7 || m == 0xC9 ||
           m == 0xCA || m == 0xCB || m == 0xCD || m == 0xCE || m == 0xCF;
}

static uint32_t read16(const unsigned char *p, int little)
{
    return little ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : (uint32_t)p[0] << 8 | (uint32_t)p[1];
}

static uint32_t read32(const unsigned char *p, int little)
{
    return little ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
                  : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* headers.py's _exif_orientation: the orientation tag of IFD0 of the TIFF block at d[tiff:end];
   1 where absent or malformed. Reads are bounded by n as struct.unpack_from's are. */
static int exif_orientation(const unsigned char *d, int64_t n, int64_t tiff, int64_t end)
{
    int little;
    if (tiff + 2 > n)
        return 1;
    if (d[tiff] == 'I' && d[tiff + 1] == 'I')
        little = 1;
    else if (d[tiff] == 'M' && d[tiff + 1] == 'M')
        little = 0;
    else
        return 1;
    if (tiff + 8 > n)
        return 1;
    if (read16(d + tiff + 2, little) != 42)
        return 1;
    int64_t ifd = (int64_t)read32(d + tiff + 4, little) + tiff;
    if (ifd + 2 > end)
        return 1;
    uint32_t count = read16(d + ifd, little);
    int64_t entry = ifd + 2;
    for (uint32_t i = 0; i < count; i++) {
        if (entry + 12 > end)
            return 1;
        uint32_t tag = read16(d + entry, little), type = read16(d + entry + 2, little);
        if (tag == 0x0112) {
            uint32_t value;
            if (type == 3)
                value = read16(d + entry + 8, little);
            else if (type == 4)
                value = read32(d + entry + 8, little);
            else
                return 1;
            return value >= 1 && value <= 8 ? (int)value : 1;
        }
        entry += 12;
    }
    return 1;
}

/* parse_jpeg(d[:n], to_scan) into o[1..8]; returns 1, or 0 where parse_jpeg would raise. */
static int parse_one(const unsigned char *d, int64_t n, int to_scan, int64_t *o)
{
    int64_t pos = 2;
    int orientation = 0, have = 0;
    for (;;) {
        if (pos + 4 > n || d[pos] != 0xFF)
            return 0;
        int marker = d[pos + 1];
        if (marker == 0xFF) { /* fill byte */
            pos += 1;
            continue;
        }
        pos += 2;
        if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7))
            continue;
        if (marker == 0xD8 || marker == 0xD9)
            return 0;
        int64_t length = (int64_t)d[pos] << 8 | d[pos + 1], end = pos + length;
        if (length < 2 || end > n)
            return 0;
        if (marker == 0xE1 && orientation == 0 && pos + 8 <= n && memcmp(d + pos + 2, "Exif\0\0", 6) == 0) {
            orientation = exif_orientation(d, n, pos + 8, end);
        } else if (is_sof(marker) && !have) {
            if (length < 8)
                return 0;
            int64_t bits = d[pos + 2], height = (int64_t)d[pos + 3] << 8 | d[pos + 4];
            int64_t width = (int64_t)d[pos + 5] << 8 | d[pos + 6], comps = d[pos + 7];
            if (width == 0 || height == 0 || (comps != 1 && comps != 3 && comps != 4) || length < 8 + 3 * comps)
                return 0;
            have = 1;
            o[1] = height;
            o[2] = width;
            o[3] = comps;
            o[4] = bits;
            o[5] = marker;
            o[6] = orientation > 1 ? orientation : 1;
            o[7] = -1;
            o[8] = 0;
            if (!to_scan)
                return 1;
        } else if (marker == 0xDA) {
            if (!have || pos + 2 >= n)
                return 0;
            o[7] = end;
            o[8] = d[pos + 2];
            return 1;
        }
        pos = end;
    }
}

/* For each of the count blobs (data[k], lengths[k] bytes): out[FIELDS * k ...] = ok (1 where
   parsed, 0 where not a JPEG or parse_jpeg would raise), then height, width, components, bits,
   sof marker, orientation, sos_end (-1 without to_scan), scan components. */
void pp_parse_jpegs(int64_t count, const unsigned char **data, const int64_t *lengths, int to_scan, int64_t *out)
{
    for (int64_t k = 0; k < count; k++) {
        int64_t *o = out + FIELDS * k;
        const unsigned char *d = data[k];
        memset(o, 0, FIELDS * sizeof *o);
        if (!d || lengths[k] < 3 || d[0] != 0xFF || d[1] != 0xD8 || d[2] != 0xFF)
            continue;
        o[0] = parse_one(d, lengths[k], to_scan, o);
    }
}
