/* The partitioned lowering: a net on the P = cores_per_replica cores of each replica (model
 * parallelism, issue #12). This file plans how each tensor lies over a replica's cores and
 * refuses what it cannot partition; net_lower_layers.c emits each layer's ops accordingly,
 * net_lower.c the params' splits and the gradients' reductions. With one core per replica
 * nothing here adds an op, and the programs are what they were.
 *
 * Two kinds of parallelism, chosen from the input partition dims (runtime.h's struct
 * tpu_build_shape; dims[0] the features, dims[1] the labels):
 *
 * 1. Row partitioning (spatial), features dims [1, P, 1, 1] of the input image [B, h, w, c]:
 *    core k holds image rows [k*hc, k*hc + hc), hc = ceil(h / P), rows >= h being padding
 *    that holds 0 (the geometry of the window ops' `parts`, program.h). Every tensor computed
 *    from it stays cut by rows (NL_ROWS) until the net leaves the image:
 *      conv2d, max/avg pool   halo (each core receives the rows its windows reach from its
 *                             neighbours: the extended slice) then the window op with parts;
 *                             a 1 x 1 conv with strides 1, and a dense layer applied per
 *                             pixel, are matmuls of the local rows of pixels
 *      relu, add, dropout     elementwise on the local rows (dropout_mask with the window:
 *                             the same mask values as the whole image's)
 *      batch_norm             sums over the local rows, all_reduce over the replica's cores
 *                             (group 1), divided by the global row count B*h*w; then, with
 *                             cross_replica, the all-reduce mean over replicas as before
 *      global_avg_pool2d      a window over the whole image with parts: core 0 gathers it
 *                             (halo) and averages, the others write 0; an all_reduce (group
 *                             1, sum) gives every core the result (NL_WHOLE again, exactly)
 *      flatten                a reshape of the local slice (NL_FLAT), read by a dense layer
 *                             whose kernel is split by ROWS the same way: each core's partial
 *                             product, all_reduce (group 1, sum), then the bias (NL_WHOLE);
 *                             this needs h divisible by P (the kernel's split is ceil(full /
 *                             P) rows per core). A flatten of a 1-row image is all-reduced
 *                             to NL_WHOLE like global_avg_pool2d.
 *    Padding rows hold 0 everywhere: the window ops write 0 there, and wherever an op could
 *    make them non-zero (a bias, batch norm's shift, beta) the lowering multiplies by the
 *    row_mask (only when h does not divide by P; else there is no padding row). Backward,
 *    the adjoints of the window ops write the extended slice and halo_grad sums it back to
 *    the rows' owners; batch norm's input gradient is masked too, so gradients hold 0 in
 *    padding rows as well. The kernel, bias and batch-norm gradients a core computes are its
 *    part of a sum over the image: they are all_reduce'd over the replica's cores (group 1)
 *    before the usual sum over replicas (group 0).
 *
 * 2. Dense model parallelism (features None: every core gets the whole input, or a product
 *    of 1: logical core 0 gets it and an all_reduce (group 1, sum; the others hold zeros)
 *    shares it). Two consecutive dense layers d1 -> d2, d1's output read only by d2 (with a
 *    relu layer or nothing in between), become d1 split by COLS (kernel and bias: core k
 *    computes output columns [k*c, k*c + c), c = ceil(units / P), NL_COLS) and d2 split by
 *    ROWS (its partial product over its input's columns, all_reduce group 1 sum, then the
 *    bias). Backward, d1's input gradient is a partial sum, all-reduced the same way; each
 *    split param's gradient is local and summed over the replicas only. A dense layer not in
 *    such a pair stays whole. The layers before (convolutions on a whole input) run alike on
 *    every core. The --layers MLP of the CLI is lowered as such a net of dense layers.
 *
 * Padded rows and columns of split params (past the full size) start at 0 (the runtime
 * writes them so) and stay 0: they meet only zero inputs (padded activations) or produce
 * only columns nothing reads, so their gradients are 0, and every optimizer here moves a
 * param with a zero gradient, zero state and zero value by exactly 0 (weight decay of 0 is
 * 0).
 *
 * Exactness. Forward values that no sum over a cut crosses are bit-identical to the
 * unpartitioned program's: every conv2d, pool and elementwise op on its rows (the window ops
 * compute each output row in the same order), the masks, the all-reduces that add zeros
 * (global_avg_pool2d, core 0's input). What adds partial sums differs in the order of its
 * additions, so it is within fp32 rounding of the unpartitioned value, about u = 2^-24
 * times the magnitudes summed per addition: batch norm's statistics and gradients, the
 * kernel and bias gradients of layers on cut rows, the dense layers split by rows (and the
 * loss after them). tests/test_net_partition.c measures it.
 *
 * Refused, by tpu_net_build before any op is added (the message names the layer, the dims
 * and what is supported): features dims other than None, a product of 1 or [1, P, 1, 1];
 * labels dims other than None or a product of 1; on a row-cut tensor: reshape (only flatten
 * into a dense layer leaves the image), batch_norm or a window op after flatten, a flatten
 * of h rows not divisible by P into a dense layer, a row-cut tensor as the net's output
 * (the loss reads the whole output), an add of a cut and a whole tensor. */
#include <stdio.h>
#include <string.h>

#include "models/net_lower_int.h"
#include "util.h"

static uint32_t ceil_div(uint32_t a, uint32_t b)
{
    return (a + b - 1) / b;
}

static uint64_t dims_product(const struct tpu_partition_dims *p)
{
    uint64_t v = 1;
    for (uint32_t k = 0; k < p->rank && k < TPU_PARTITION_MAX_RANK; k++)
        v *= p->dims[k];
    return v;
}

static void dims_text(const struct tpu_partition_dims *p, char *buf, size_t size)
{
    if (!p->rank) {
        snprintf(buf, size, "None");
        return;
    }
    size_t n = (size_t)snprintf(buf, size, "[");
    for (uint32_t k = 0; k < p->rank && k < TPU_PARTITION_MAX_RANK && n < size; k++)
        n += (size_t)snprintf(buf + n, size - n, "%s%u", k ? ", " : "", p->dims[k]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

static const char *part_text(const struct lower *s, uint32_t t, char *buf, size_t size)
{
    const struct lw *w = &s->lw[t];
    switch ((enum nl_part)w->part) {
    case NL_ROWS:
        snprintf(buf, size, "an image cut by rows over the %u cores of a replica", s->P);
        break;
    case NL_FLAT:
        snprintf(buf, size, "the flatten of an image cut by rows over the %u cores of a "
                 "replica", s->P);
        break;
    case NL_COLS:
        snprintf(buf, size, "a dense layer's output cut by columns over the %u cores of a "
                 "replica", s->P);
        break;
    default:
        snprintf(buf, size, "whole on every core");
    }
    return buf;
}

/* The common refusal: layer i cannot read tensor t as it lies. */
static int refuse(const struct lower *s, uint32_t i, uint32_t t, const char *supported,
                  struct tpu_diag *d)
{
    const struct tpu__net_layer *L = &s->net->layers[i];
    char how[96];
    return tpu__fail(d, TPU_EUNSUPPORTED, "net '%s': layer '%s' (%s) reads '%s', %s (from "
                     "input_partition_dims %s): %s", s->net->name, L->desc.name,
                     tpu_layer_kind_name(L->desc.kind), s->net->layers[t].desc.name,
                     part_text(s, t, how, sizeof how), s->dims_text, supported);
}

/* The live layers reading tensor t (the loss counts as one): their number, and the last. */
static uint32_t readers(const struct lower *s, uint32_t t, uint32_t *last)
{
    uint32_t n = t == s->net->output ? 1 : 0;
    *last = 0;
    for (uint32_t j = t + 1; j < s->net->n_layers; j++)
        for (uint32_t k = 0; k < s->net->layers[j].n_in; k++)
            if (s->lw[j].live && s->net->layers[j].in[k] == t) {
                n++;
                *last = j;
            }
    return n;
}

/* The dense layer that dense layer i pairs with (d2 of the pair d1 = i), or 0: i's output is
 * read only by it, directly or through one relu layer read only by it. */
static uint32_t partner(const struct lower *s, uint32_t i)
{
    uint32_t j, k;
    if (readers(s, i, &j) != 1 || !j)
        return 0;
    const enum tpu_layer_kind kj = s->net->layers[j].desc.kind;
    if (kj == TPU_LAYER_DENSE)
        return j;
    if (kj != TPU_LAYER_RELU || readers(s, j, &k) != 1 || !k)
        return 0;
    return s->net->layers[k].desc.kind == TPU_LAYER_DENSE ? k : 0;
}

static void same_as(struct lw *w, const struct lw *a)
{
    w->part = a->part;
    w->hl = a->hl;
    w->cl = a->cl;
    w->img = a->img;
}

/* Layer i's place over the cores, from its input's; 0 or a refusal. */
static int plan_layer(struct lower *s, uint32_t i, struct tpu_diag *d)
{
    const struct tpu__net_layer *L = &s->net->layers[i];
    struct lw *w = &s->lw[i];
    const uint32_t in0 = L->in[0];
    const struct lw *a = &s->lw[in0];
    const enum nl_part pa = (enum nl_part)a->part;
    const uint32_t P = s->P;
    switch (L->desc.kind) {
    case TPU_LAYER_DENSE:
        if (pa == NL_ROWS) { /* per pixel, on the local rows */
            same_as(w, a);
            w->cl = L->out.c;
        } else if (pa == NL_FLAT) {
            if ((uint64_t)a->cl * P != L->in_shape.c) {
                char why[320];
                snprintf(why, sizeof why, "its kernel is split by the image's rows, which "
                         "needs the image's %u rows to divide by the %u cores per replica; "
                         "use a stride or pool that leaves a multiple of %u rows, a "
                         "global_avg_pool2d before it, or fewer cores per replica", a->img.h,
                         P, P);
                return refuse(s, i, in0, why, d);
            }
            w->split = TPU_SPLIT_ROWS;
        } else if (pa == NL_COLS) {
            w->split = TPU_SPLIT_ROWS;
        } else if (partner(s, i)) {
            w->split = TPU_SPLIT_COLS;
            w->part = NL_COLS;
            w->cl = ceil_div(L->out.c, P);
        }
        return 0;
    case TPU_LAYER_CONV2D:
    case TPU_LAYER_MAX_POOL2D:
    case TPU_LAYER_AVG_POOL2D:
        if (pa == NL_WHOLE)
            return 0;
        if (pa != NL_ROWS)
            return refuse(s, i, in0, "a window op reads an image: whole, or cut by rows", d);
        w->part = NL_ROWS;
        w->hl = L->desc.kind == TPU_LAYER_CONV2D && L->desc.kh == 1 && L->desc.kw == 1 &&
                        L->desc.sh == 1 && L->desc.sw == 1
                    ? a->hl
                    : ceil_div(L->out.h, P);
        return 0;
    case TPU_LAYER_GLOBAL_AVG_POOL2D:
        if (pa != NL_WHOLE && pa != NL_ROWS)
            return refuse(s, i, in0, "a window op reads an image: whole, or cut by rows", d);
        return 0; /* NL_WHOLE: all-reduced after the pool */
    case TPU_LAYER_FLATTEN:
        if (pa == NL_ROWS && L->in_shape.h > 1) {
            w->part = NL_FLAT;
            w->cl = a->hl * L->in_shape.w * L->in_shape.c;
            w->img = L->in_shape;
        } else if (pa == NL_FLAT) {
            same_as(w, a);
        } else if (pa == NL_COLS) {
            return refuse(s, i, in0, "only a relu layer or the paired dense layer reads "
                          "it", d);
        } /* NL_WHOLE, or a 1-row image: all-reduced to NL_WHOLE */
        return 0;
    case TPU_LAYER_RESHAPE:
        if (pa != NL_WHOLE)
            return refuse(s, i, in0, "reshape needs the whole tensor; of a row-cut image "
                          "only flatten into a dense layer is supported (or give the "
                          "features None)", d);
        return 0;
    case TPU_LAYER_RELU:
        same_as(w, a);
        return 0;
    case TPU_LAYER_DROPOUT:
        if (s->train && pa == NL_COLS)
            return refuse(s, i, in0, "only a relu layer or the paired dense layer reads "
                          "it", d);
        same_as(w, a);
        return 0;
    case TPU_LAYER_BATCH_NORM:
        if (pa != NL_WHOLE && pa != NL_ROWS)
            return refuse(s, i, in0, "batch_norm normalizes an image whole or cut by rows, "
                          "not after flatten; put it before the flatten", d);
        same_as(w, a);
        return 0;
    case TPU_LAYER_ADD: {
        const struct lw *b = &s->lw[L->in[1]];
        if (a->part != b->part || a->hl != b->hl || a->cl != b->cl) {
            char hb[96], what[192];
            snprintf(what, sizeof what, "and '%s', %s; add needs both inputs lying alike",
                     s->net->layers[L->in[1]].desc.name,
                     part_text(s, L->in[1], hb, sizeof hb));
            return refuse(s, i, in0, what, d);
        }
        same_as(w, a);
        return 0;
    }
    default:
        return 0;
    }
}

int tpu__nl_plan(struct lower *s, const struct tpu_build_shape *sh, struct tpu_diag *d)
{
    const struct tpu_net *net = s->net;
    for (uint32_t i = 0; i < net->n_layers; i++) {
        struct lw *w = &s->lw[i];
        w->part = NL_WHOLE;
        w->hl = net->layers[i].out.h;
        w->cl = net->layers[i].out.c;
        w->split = TPU_SPLIT_NONE;
    }
    const struct tpu_partition_dims none = {0};
    const struct tpu_partition_dims *fd = sh->n_dims >= 1 ? &sh->dims[0] : &none;
    const struct tpu_partition_dims *ld = sh->n_dims >= 2 ? &sh->dims[1] : &none;
    dims_text(fd, s->dims_text, sizeof s->dims_text);
    if (s->P == 1)
        return 0; /* a product of 1 on one core is the whole tensor */
    const struct tpu_shape in = net->layers[0].out;
    const uint32_t P = s->P;
    if (fd->rank && dims_product(fd) == 1) {
        s->x_core0 = true;
    } else if (fd->rank) {
        if (fd->rank != 4 || fd->dims[0] != 1 || fd->dims[1] != P || fd->dims[2] != 1 ||
            fd->dims[3] != 1)
            return tpu__fail(d, TPU_EUNSUPPORTED, "net '%s': input_partition_dims %s for the "
                             "features [B, %u, %u, %u] over %u cores per replica: the net's "
                             "lowering partitions an input image by rows only, [1, %u, 1, 1]; "
                             "or give a product of 1 (logical core 0 receives the features "
                             "and shares them) or None (every core receives all of them)",
                             net->name, s->dims_text, in.h, in.w, in.c, P, P);
        s->lw[0].part = NL_ROWS;
        s->lw[0].hl = ceil_div(in.h, P);
    }
    if (ld->rank && dims_product(ld) != 1) {
        char text[96];
        dims_text(ld, text, sizeof text);
        return tpu__fail(d, TPU_EUNSUPPORTED, "net '%s': input_partition_dims %s for the "
                         "labels: the loss reads every example's label on every core of a "
                         "replica, so the labels are not cut; give None, or a product of 1 "
                         "(logical core 0 receives them and shares them)", net->name, text);
    }
    s->labels_core0 = ld->rank != 0;
    for (uint32_t i = 1; i < net->n_layers; i++) {
        if (!s->lw[i].live)
            continue; /* no ops: stays whole */
        int rc = plan_layer(s, i, d);
        if (rc)
            return rc;
    }
    const uint32_t o = net->output;
    if (s->lw[o].part != NL_WHOLE) {
        char how[96];
        return tpu__fail(d, TPU_EUNSUPPORTED, "net '%s': the output '%s' is %s (from "
                         "input_partition_dims %s), but the loss reads the whole output on "
                         "every core; end the net with flatten and a dense layer, or "
                         "global_avg_pool2d", net->name, net->layers[o].desc.name,
                         part_text(s, o, how, sizeof how), s->dims_text);
    }
    return 0;
}

/* ---- the ops of the partitioned lowering --------------------------------------------------- */

struct tpu_window tpu__nl_window(const struct lower *s, uint32_t i)
{
    const struct tpu__net_layer *L = &s->net->layers[i];
    const struct tpu_shape x = L->in_shape;
    struct tpu_window w;
    memset(&w, 0, sizeof w);
    w.h = x.h;
    w.w = x.w;
    w.c = x.c;
    if (L->desc.kind == TPU_LAYER_GLOBAL_AVG_POOL2D) {
        w.kh = w.sh = x.h;
        w.kw = w.sw = x.w;
        w.ho = w.wo = 1;
    } else {
        w.kh = L->desc.kh;
        w.kw = L->desc.kw;
        w.sh = L->desc.sh;
        w.sw = L->desc.sw;
        w.pt = L->pt;
        w.pl = L->pl;
        w.ho = L->out.h;
        w.wo = L->out.w;
    }
    if (s->lw[L->in[0]].part == NL_ROWS)
        w.parts = s->P;
    return w;
}

uint32_t tpu__nl_ext_tmp(struct lower *s, uint32_t i, const char *what)
{
    const struct tpu_window w = tpu__nl_window(s, i);
    const uint32_t hoc = ceil_div(w.ho, s->P), E = (hoc - 1) * w.sh + w.kh;
    return tpu__nl_tmp(s, i, what, (uint64_t)s->B * E * w.w, w.c);
}

uint32_t tpu__nl_halo(struct lower *s, uint32_t i)
{
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.win = tpu__nl_window(s, i);
    s->lw[i].ext = tpu__nl_ext_tmp(s, i, "ext");
    tpu__nl_op(s, TPU_OP_HALO, s->lw[i].ext, N, s->lw[s->net->layers[i].in[0]].y, N, &at);
    return s->lw[i].ext;
}

void tpu__nl_halo_grad(struct lower *s, uint32_t i, uint32_t dst, uint32_t ext)
{
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.win = tpu__nl_window(s, i);
    tpu__nl_op(s, TPU_OP_HALO_GRAD, dst, N, ext, N, &at);
}

void tpu__nl_mask_rows(struct lower *s, uint32_t t, uint32_t y)
{
    const struct tpu_shape sh = s->net->layers[t].out;
    const struct lw *w = &s->lw[t];
    if (w->part != NL_ROWS || (uint64_t)w->hl * s->P == sh.h)
        return; /* no padding rows */
    uint32_t mask = N;
    for (uint32_t k = 0; k < s->n_masks && mask == N; k++)
        if (s->masks[k].shape.h == sh.h && s->masks[k].shape.w == sh.w &&
            s->masks[k].shape.c == sh.c)
            mask = s->masks[k].buf;
    if (mask == N) {
        struct tpu_op_attrs at = tpu__nl_attrs0();
        at.win = (struct tpu_window){.h = sh.h, .w = sh.w, .c = sh.c, .kh = 1, .kw = 1,
                                     .sh = 1, .sw = 1, .ho = sh.h, .wo = sh.w, .parts = s->P};
        mask = tpu__nl_tmp(s, t, "row_mask", (uint64_t)s->B * w->hl * sh.w, sh.c);
        tpu__nl_op(s, TPU_OP_ROW_MASK, mask, N, N, N, &at);
        if (s->n_masks < NL_MAX_MASKS) {
            s->masks[s->n_masks].shape = sh;
            s->masks[s->n_masks++].buf = mask;
        }
    }
    tpu__nl_op(s, TPU_OP_MUL, y, N, y, mask, NULL);
}

void tpu__nl_all_reduce_cores(struct lower *s, uint32_t y)
{
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.reduce = TPU_REDUCE_SUM;
    at.group = 1;
    tpu__nl_op(s, TPU_OP_ALL_REDUCE, y, N, y, N, &at);
}

void tpu__nl_core0_share(struct lower *s, uint32_t y, uint32_t rows, uint32_t cols)
{
    /* a row_mask of a 1-row image: 1 on logical core 0 (row 0 < h = 1), 0 on the others */
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.win = (struct tpu_window){.h = 1, .w = 1, .c = cols, .kh = 1, .kw = 1, .sh = 1, .sw = 1,
                                 .ho = 1, .wo = 1, .parts = s->P};
    char name[48];
    snprintf(name, sizeof name, "core0.%ux%u", rows, cols);
    uint32_t ind = N;
    if (tpu_program_find_buffer(s->b.p, name, &ind)) {
        ind = tpu__b_buf(&s->b, name, TPU_F32, TPU_BUF_TEMP, rows, cols);
        tpu__nl_op(s, TPU_OP_ROW_MASK, ind, N, N, N, &at);
    }
    tpu__nl_op(s, TPU_OP_MUL, y, N, y, ind, NULL);
    tpu__nl_all_reduce_cores(s, y);
}
