/* Typed array elements for the dataset readers (see idx.h): the sizes of IDX's and NumPy's
 * element types, and their conversion to the f32 features and targets a dataset holds.
 *
 * IDX data is big-endian, NumPy's (as tpusim reads it) little-endian; both come through
 * here so that a value means the same thing whichever file it came from. Nothing here
 * allocates or reads files. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "data/idx.h"
#include "util.h"

size_t tpu__elem_bytes(enum tpu__elem e)
{
    switch (e) {
    case TPU__ELEM_U8:
    case TPU__ELEM_I8:
        return 1;
    case TPU__ELEM_I16:
        return 2;
    case TPU__ELEM_I32:
    case TPU__ELEM_F32:
        return 4;
    case TPU__ELEM_I64:
    case TPU__ELEM_F64:
        return 8;
    }
    return 1;
}

bool tpu__elem_is_float(enum tpu__elem e)
{
    return e == TPU__ELEM_F32 || e == TPU__ELEM_F64;
}

/* The n-byte unsigned integer at p in the given byte order. */
static uint64_t load_uint(const unsigned char *p, size_t n, bool big)
{
    uint64_t v = 0;
    for (size_t k = 0; k < n; k++)
        v |= (uint64_t)p[big ? k : n - 1 - k] << (8 * (n - 1 - k));
    return v;
}

int64_t tpu__elem_int(const unsigned char *src, enum tpu__elem e, bool big, size_t i)
{
    const size_t n = tpu__elem_bytes(e);
    const uint64_t u = load_uint(src + i * n, n, big);
    switch (e) {
    case TPU__ELEM_U8:
        return (int64_t)u;
    case TPU__ELEM_I8:
        return (int8_t)(uint8_t)u;
    case TPU__ELEM_I16:
        return (int16_t)(uint16_t)u;
    case TPU__ELEM_I32:
        return (int32_t)(uint32_t)u;
    case TPU__ELEM_I64:
        return (int64_t)u; /* two's complement, as every supported machine */
    case TPU__ELEM_F32:
    case TPU__ELEM_F64:
        break;
    }
    return 0;
}

int tpu__elem_to_float(const unsigned char *src, enum tpu__elem e, bool big, size_t n,
                       float *dst, const char *file, struct tpu_diag *d)
{
    if (e == TPU__ELEM_U8) {
        /* x = byte / 255.0f, one correctly rounded division per byte value */
        float scale[256];
        for (unsigned v = 0; v < 256; v++)
            scale[v] = (float)v / 255.0f;
        for (size_t i = 0; i < n; i++)
            dst[i] = scale[src[i]];
        return 0;
    }
    const size_t size = tpu__elem_bytes(e);
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = src + i * size;
        double shown; /* the value as stored, for a message */
        if (e == TPU__ELEM_F32) {
            uint32_t bits = (uint32_t)load_uint(p, 4, big);
            memcpy(&dst[i], &bits, sizeof bits);
            shown = dst[i];
        } else if (e == TPU__ELEM_F64) {
            uint64_t bits = load_uint(p, 8, big);
            memcpy(&shown, &bits, sizeof bits);
            dst[i] = (float)shown;
        } else {
            dst[i] = (float)tpu__elem_int(src, e, big, i); /* round to nearest, once */
            continue;
        }
        if (!isfinite(dst[i]))
            return tpu__fail(d, TPU_ERANGE, "%s: the value at index %zu (in row-major order) "
                             "is %g%s; features and targets must be finite numbers: replace "
                             "or drop it (numpy: np.nan_to_num, or a[np.isfinite(a)])", file,
                             i, shown, isfinite(shown) ? ", beyond the float32 range" : "");
    }
    return 0;
}

void tpu__shape_text(struct tpu_shape s, char *buf, size_t size)
{
    if (s.h == 1 && s.w == 1)
        snprintf(buf, size, "%u", (unsigned)s.c);
    else if (s.c == 1)
        snprintf(buf, size, "%ux%u", (unsigned)s.h, (unsigned)s.w);
    else
        snprintf(buf, size, "%ux%ux%u", (unsigned)s.h, (unsigned)s.w, (unsigned)s.c);
}
