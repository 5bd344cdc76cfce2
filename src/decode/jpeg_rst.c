/*
 * jpeg_rst.c — the restart-marker fast path of JPEG region decode.
 *
 * Huffman data cannot be entered in the middle: to reach the rows of a crop,
 * libjpeg must entropy-decode every MCU row above it (jpeg_skip_scanlines()
 * saves only the inverse DCT and colour work), and every MCU left and right
 * of it in its rows (jpeg_crop_scanline() too). A baseline file with a
 * restart marker every k MCUs (`nostall transcode` writes them, k = 1 by
 * default) can be entered at any restart marker, because the decoder state
 * (DC predictions, bit buffer) is reset there. So for a region we find the
 * markers with one byte scan (much cheaper than Huffman decoding), and
 * rebuild, in a grow-only scratch buffer, a smaller but valid JPEG made of
 * the original headers (SOF height and width patched) and only the restart
 * intervals that hold the pixels needed, renumbered from RST0. Two layouts:
 *
 *   row mode     k a multiple of the MCUs per row: an interval is k / that
 *                many whole MCU rows; only the rows are cut.
 *   column mode  k dividing the MCUs per row: each MCU row is that many
 *                groups of k MCUs; the rebuilt image is the rectangle of
 *                groups [c0, c1] x MCU rows [r0, r1]. Its rows are
 *                (c1 - c0 + 1) k MCUs wide, a multiple of the DRI (kept),
 *                so every interval holds exactly the same MCUs as before.
 *
 * jpeg.c decodes that stream with its usual region machinery and shifts
 * the result right and down by the columns and rows left out.
 *
 * The rebuilt stream holds the same entropy-coded bytes as the original for
 * its MCUs, so the coefficients, hence the pixels, are the same; only the
 * pixels next to a cut could differ (fancy upsampling sees the cut as the
 * image edge), and the caller asks for a margin beyond its region on all
 * sides so that those pixels are never in it.
 *
 * Anything unexpected (a marker out of place, a restart interval that is
 * neither whole MCU rows nor a divisor of one, a wrong RST number or
 * count, an SOF that disagrees with libjpeg's parse, a scan followed by
 * another scan) returns 0 and the
 * caller takes the normal path: this module never decides that a file is
 * bad, it only declines. A truncated file is used if every restart
 * interval the region needs ends with its marker; otherwise the normal
 * path runs and reports the truncation as usual.
 *
 * No libjpeg here: the caller passes the geometry libjpeg parsed.
 */
#include <stdint.h>
#include <string.h>

#include "decode/decode_impl.h"

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }

void nst_jpeg_rst_free(nst_jpeg_rst *r)
{
    nst_buf_free(&r->stream);
    nst_buf_free(&r->marks);
}

/* Copy the header segments [2, sos_end) of `buf` after SOI into `o`
 * (reserved by the caller to at least len bytes), keeping every segment
 * libjpeg reads (tables, SOF, DRI, SOS, JFIF APP0, Adobe APP14) and dropping
 * the other APPn and COM segments, which it ignores. Returns the header
 * length written, with *sos_end (offset of the first entropy byte in buf)
 * and *sof_h (offset in `o` of the SOF height field; the width follows
 * it), or 0. */
static size_t copy_header(const uint8_t *buf, size_t len, const nst_jpeg_rst_geom *g, uint8_t *o,
                          size_t *sos_end, size_t *sof_h)
{
    size_t p = 2, n = 0;
    int have_sof = 0;
    uint32_t ri = 0;
    if (len < 4 || buf[0] != 0xFF || buf[1] != 0xD8) return 0;
    o[n++] = 0xFF;
    o[n++] = 0xD8;
    for (;;) {
        if (p >= len || buf[p] != 0xFF) return 0;
        while (p < len && buf[p] == 0xFF) p++; /* fill bytes */
        if (p >= len) return 0;
        const uint8_t m = buf[p++];
        /* Standalone markers (SOI, TEM, RSTn, EOI) have no place here. */
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD9) || m == 0x00) return 0;
        if (len - p < 2) return 0;
        const size_t seglen = be16(buf + p);
        if (seglen < 2 || seglen > len - p) return 0;
        const uint8_t *body = buf + p + 2;
        const size_t blen = seglen - 2;
        int keep = 1;
        if (m == 0xC0 || m == 0xC1) { /* baseline / extended sequential, Huffman */
            if (have_sof || blen < 6 || body[0] != 8) return 0;
            if (be16(body + 1) != g->height || be16(body + 3) != g->width) return 0;
            have_sof = 1;
            *sof_h = n + 4 + 1; /* FF m, length (2), precision (1) */
        } else if ((m >= 0xC2 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC)) {
            return 0; /* progressive, lossless, hierarchical, arithmetic */
        } else if (m == 0xDD) {
            if (blen != 2) return 0;
            ri = be16(body);
        } else if (m == 0xDC || m == 0xCC) {
            return 0; /* DNL, DAC: not in the files we handle */
        } else if ((m >= 0xE1 && m <= 0xED) || m == 0xEF || m == 0xFE) {
            keep = 0;
        }
        if (keep) {
            o[n++] = 0xFF;
            o[n++] = m;
            memcpy(o + n, buf + p, seglen);
            n += seglen;
        }
        p += seglen;
        if (m == 0xDA) {
            if (!have_sof || ri != g->restart_interval) return 0;
            *sos_end = p;
            return n;
        }
    }
}

int nst_jpeg_rst_build(nst_jpeg_rst *r, const uint8_t *buf, size_t len, const nst_jpeg_rst_geom *g,
                       nst_jpeg_rst_out *out)
{
    memset(out, 0, sizeof *out);
    if (!buf || g->mcus_per_row == 0 || g->mcu_h == 0 || g->mcu_w == 0 || g->mcu_rows == 0 ||
        g->restart_interval == 0 || g->height == 0 || g->width == 0 || g->row_lo >= g->row_hi ||
        g->row_hi > g->height || g->col_lo >= g->col_hi || g->col_hi > g->width ||
        (uint64_t)g->mcu_rows * g->mcu_h < g->height ||
        (uint64_t)(g->mcu_rows - 1) * g->mcu_h >= g->height ||
        (uint64_t)g->mcus_per_row * g->mcu_w < g->width ||
        (uint64_t)(g->mcus_per_row - 1) * g->mcu_w >= g->width)
        return 0;
    /* Interval layout: `rows` MCU rows per interval (row mode), or `gpr`
     * intervals of k MCUs per MCU row (column mode, rows = 1). */
    uint32_t rows, gpr, k;
    if (g->restart_interval % g->mcus_per_row == 0) {
        rows = g->restart_interval / g->mcus_per_row;
        gpr = 1;
        k = g->mcus_per_row;
    } else if (g->mcus_per_row % g->restart_interval == 0) {
        rows = 1;
        k = g->restart_interval;
        gpr = g->mcus_per_row / k;
    } else {
        return 0;
    }
    const uint32_t nrow = (g->mcu_rows + rows - 1) / rows; /* interval rows */
    const uint64_t nseg64 = (uint64_t)nrow * gpr;
    if (nseg64 > UINT32_MAX / 4) return 0;
    const uint32_t nseg = (uint32_t)nseg64;
    const uint32_t r0 = g->row_lo / g->mcu_h / rows;
    uint32_t r1 = (g->row_hi - 1) / g->mcu_h / rows;
    if (r1 >= nrow) r1 = nrow - 1;
    const uint64_t gw = (uint64_t)k * g->mcu_w; /* image columns per group */
    uint32_t c0 = 0, c1 = gpr - 1;
    if (gpr > 1) {
        c0 = (uint32_t)(g->col_lo / gw);
        c1 = (uint32_t)((g->col_hi - 1) / gw);
        if (c1 >= gpr) c1 = gpr - 1;
    }
    /* Nothing above or beside the region to leave out: the normal path
     * already stops after the region's last row. */
    if (r0 == 0 && c0 == 0 && c1 == gpr - 1) return 0;
    const uint32_t last = r1 * gpr + c1; /* the last interval needed */

    /* Room: the rebuilt stream is at most the original plus one 2-byte
     * marker per interval and EOI; the marks are two offsets per interval. */
    size_t cap, mcap;
    if (nst_add_overflow(len, 2 * (size_t)nseg + 8, &cap) ||
        nst_mul_overflow((size_t)nseg + 1, 2 * sizeof(size_t), &mcap))
        return 0;
    if (nst_buf_reserve(&r->stream, cap) < 0 || nst_buf_reserve(&r->marks, mcap) < 0) return 0;
    uint8_t *o = r->stream.data;
    size_t *start = (size_t *)(void *)r->marks.data, *end = start + nseg + 1;

    size_t sos_end = 0, sof_h = 0;
    size_t n = copy_header(buf, len, g, o, &sos_end, &sof_h);
    if (n == 0) return 0;

    /* Find the intervals: in entropy-coded data 0xFF is followed by 0x00
     * (a stuffed 0xFF data byte) or, after optional 0xFF fill bytes, by a
     * marker. RSTn must come in order D0, D1, ... D7, D0 ... */
    uint32_t count = 0; /* intervals whose end is known */
    int complete = 0;   /* the scan ended with EOI */
    size_t q = sos_end;
    start[0] = sos_end;
    for (;;) {
        const uint8_t *ff = q < len ? memchr(buf + q, 0xFF, len - q) : NULL;
        if (!ff) break; /* truncated */
        const size_t s = (size_t)(ff - buf);
        size_t t = s + 1;
        while (t < len && buf[t] == 0xFF) t++;
        if (t >= len) break;
        const uint8_t b = buf[t];
        if (b == 0x00) {
            q = t + 1;
            continue;
        }
        if (b >= 0xD0 && b <= 0xD7) {
            if (b != 0xD0 + (count & 7) || count + 1 >= nseg) return 0;
            end[count] = s;
            start[++count] = t + 1;
            q = t + 1;
            continue;
        }
        if (b != 0xD9) return 0; /* another scan, DNL, ...: not ours */
        end[count] = s;
        complete = 1;
        break;
    }
    if (complete ? count + 1 != nseg : last >= count) return 0;

    /* SOF height: the rows from interval row r0's first to interval row
     * r1's last (or the image's last); width likewise from the groups. */
    const uint32_t first = r0 * rows * g->mcu_h;
    uint64_t h = (uint64_t)(r1 - r0 + 1) * rows * g->mcu_h;
    if (h > g->height - first) h = g->height - first;
    const uint32_t left = (uint32_t)(c0 * gw);
    uint64_t w = (uint64_t)(c1 - c0 + 1) * gw;
    if (w > g->width - left) w = g->width - left;
    o[sof_h] = (uint8_t)(h >> 8);
    o[sof_h + 1] = (uint8_t)h;
    o[sof_h + 2] = (uint8_t)(w >> 8);
    o[sof_h + 3] = (uint8_t)w;
    uint32_t m = 0; /* intervals written */
    for (uint32_t y = r0; y <= r1; y++) {
        for (uint32_t x = c0; x <= c1; x++) {
            const uint32_t i = y * gpr + x;
            const size_t a = start[i], e = end[i];
            if (e < a || e > len) return 0;
            memcpy(o + n, buf + a, e - a);
            n += e - a;
            o[n++] = 0xFF;
            o[n++] = i < last ? (uint8_t)(0xD0 + (m & 7)) : 0xD9;
            m++;
        }
    }
    out->data = o;
    out->len = n;
    out->first_row = first;
    out->height = (uint32_t)h;
    out->first_col = left;
    out->width = (uint32_t)w;
    return 1;
}
