/* Row partitioning's own values (program.h's "Row partitioning"): row_mask, and the halo
 * exchange's two collectives as functions of every core's buffers, which the chip calls
 * with the buffers of one replica's cores (sim/chip/chip_exec.c; the chip owns who runs
 * them and their timing, sim/chip/timing.c). The window ops' partitioned forms are
 * ops_window.c's and ops_conv.c's, dropout_mask's ops_train_aux.c's.
 *
 * With P cores, hc = ceil(h / P), hoc = ceil(ho / P), E = (hoc - 1)*sh + kh and
 * r0(k) = k*hoc*sh - pt:
 *   halo       y(k)[n][j] = x(g / hc)[n][g % hc] for g = r0(k) + j in [0, h), else +0:
 *              a copy (any element size).
 *   halo_grad  dx(k)[n][i] for g = k*hc + i < h: s = the first dy(k')[n][g - r0(k')] over
 *              k' = 0, 1, ..., P-1 with 0 <= g - r0(k') < E, then s = s + each later one in
 *              that order (+0 if there is none); rows g >= h get +0. f32.
 *   row_mask   y(k)[n][i][x][ci] = 1 if k*hc + i < h, else 0. */
#include <string.h>

#include "ops_int.h"
#include "util.h"

uint64_t tpu__halo_rows(const struct tpu_window *w, uint32_t dst, uint32_t src)
{
    struct tpu_window_part wp;
    tpu_window_part(w, &wp);
    const int64_t lo_ext = tpu_window_ext_row0(w, dst), hi_ext = lo_ext + (int64_t)wp.ext;
    const int64_t lo_src = (int64_t)(src * wp.hc), hi_src = lo_src + (int64_t)wp.hc;
    int64_t lo = lo_ext > lo_src ? lo_ext : lo_src;
    int64_t hi = hi_ext < hi_src ? hi_ext : hi_src;
    if (lo < 0)
        lo = 0;
    if (hi > (int64_t)w->h)
        hi = (int64_t)w->h;
    return hi > lo ? (uint64_t)(hi - lo) : 0;
}

void tpu__halo(const struct tpu_window *w, size_t n, size_t esize, const void *const *x,
               void *const *y)
{
    struct tpu_window_part wp;
    tpu_window_part(w, &wp);
    const size_t row = (size_t)w->w * w->c * esize; /* bytes of one image row */
    for (uint32_t k = 0; k < wp.parts; k++) {
        const int64_t r0 = tpu_window_ext_row0(w, k);
        unsigned char *yk = y[k];
        for (size_t e = 0; e < n; e++)
            for (size_t j = 0; j < wp.ext; j++) {
                unsigned char *dst = yk + (e * wp.ext + j) * row;
                const int64_t g = r0 + (int64_t)j;
                if (g < 0 || g >= (int64_t)w->h) {
                    memset(dst, 0, row);
                    continue;
                }
                const size_t owner = (size_t)g / wp.hc, i = (size_t)g % wp.hc;
                memcpy(dst, (const unsigned char *)x[owner] + (e * wp.hc + i) * row, row);
            }
    }
}

void tpu__halo_grad(const struct tpu_window *w, size_t n, const float *const *dy,
                    float *const *dx)
{
    struct tpu_window_part wp;
    tpu_window_part(w, &wp);
    const size_t row = (size_t)w->w * w->c; /* elements of one image row */
    for (uint32_t k = 0; k < wp.parts; k++)
        for (size_t e = 0; e < n; e++)
            for (size_t i = 0; i < wp.hc; i++) {
                float *dst = dx[k] + (e * wp.hc + i) * row;
                const int64_t g = (int64_t)(k * wp.hc + i);
                bool first = true;
                for (uint32_t q = 0; q < wp.parts && g < (int64_t)w->h; q++) {
                    const int64_t j = g - tpu_window_ext_row0(w, q);
                    if (j < 0 || j >= (int64_t)wp.ext)
                        continue;
                    const float *src = dy[q] + (e * wp.ext + (size_t)j) * row;
                    if (first)
                        memcpy(dst, src, row * sizeof *dst);
                    else
                        for (size_t t = 0; t < row; t++)
                            dst[t] = dst[t] + src[t];
                    first = false;
                }
                if (first)
                    memset(dst, 0, row * sizeof *dst);
            }
}

int tpu__ops_row_mask(const struct tpu_op *op, const struct tpu__op_ctx *cx, struct tpu_diag *d)
{
    struct tpu__bufmem *y = &cx->bufs[op->out[0]];
    const struct tpu_window *w = &op->attrs.win;
    int rc = tpu__ops_check_buf(d, op, "y", y, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
    if (rc)
        return rc;
    struct tpu_window_part wp;
    tpu_window_part(w, &wp);
    size_t per = 0;
    if (wp.parts < 2 || cx->part >= wp.parts || !w->w || !w->c ||
        !tpu__mul_size((size_t)wp.hc * w->w, w->c, &per) || per == 0 ||
        tpu__ops_count(y) % per != 0)
        return tpu__fail(d, TPU_ESHAPE,
                         "row_mask: y has %zu elements, parts=%u, logical core %u: it needs "
                         "parts >= 2 and N*hc*w*c elements (hc = ceil(h/parts) = %llu, w = "
                         "%u, c = %u) on a device with parts cores per replica; verify the "
                         "program",
                         tpu__ops_count(y), (unsigned)w->parts, (unsigned)cx->part,
                         (unsigned long long)wp.hc, (unsigned)w->w, (unsigned)w->c);
    const size_t n = tpu__ops_count(y) / per, row = (size_t)w->w * w->c;
    float *yv = y->data; /* [N][hc][w][c] */
    for (size_t e = 0; e < n; e++)
        for (size_t i = 0; i < wp.hc; i++) {
            const float v = (uint64_t)cx->part * wp.hc + i < w->h ? 1.0f : 0.0f;
            float *r = yv + (e * wp.hc + i) * row;
            for (size_t t = 0; t < row; t++)
                r[t] = v;
        }
    return 0;
}
