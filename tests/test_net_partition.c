/* The partitioned lowering (host/models/net_lower_part.c) against the unpartitioned one: the
 * same net, the same initial params and the same data, trained on one core (one replica of
 * the whole batch) and on P = 2 and 4 cores of one replica, driving the device directly: the
 * test writes each core its params' slices, infeeds each core its slice of the input (rows
 * of the images for features dims [1, P, 1, 1]; nothing to logical cores > 0 for dims of
 * product 1) and gathers the params back from the cores, with its own code for the layouts
 * runtime.h and spec A describe.
 *
 *   - cnn.json (valid convs: 26 rows over 4 cores leave padding rows, a max pool, dropout,
 *     flatten into a dense layer split by rows), resnet_small.json (same convs, strides 2
 *     with 14 and 7 rows over 2 and 4 cores, batch norm, residual adds, global average
 *     pool), and an MLP (tpu_mlp_model, whose programs on several cores per replica are a
 *     net of dense layers split by columns, then rows);
 *   - the first conv's forward output (outfed right after its ops, a line added to the
 *     program's text) is bit-identical on the rows each core computes, and its padding rows
 *     are 0;
 *   - the loss of each of 3 steps and every param (optimizer state included) after steps 1
 *     and 3 agree within the bound below; every core of a replica reports the same loss bits
 *     and holds the same bits of every param that is not split;
 *   - what the lowering refuses, with its message.
 *
 * The bound. The partitioned program adds the same terms in another order wherever a sum
 * crosses the cut: batch norm's statistics and gradients, every kernel and bias gradient of
 * a layer on cut rows (each core's partial sum, then all_reduce), the dense layers split by
 * rows (partial products, then all_reduce) and so the logits, the loss and the gradients
 * flowing back from them. Each such value differs by fp32 rounding: at most about u = 2^-24
 * per addition times the magnitudes summed, u * L for a sum of L terms (L up to 9216 here,
 * cnn's flatten: 5e-4 in the worst case), typically sqrt(L) * u (6e-6); SGD (learning rate
 * 0.05, momentum 0.9) carries gradient differences into the params scaled by the rate. The
 * measured largest differences, relative to each tensor's largest magnitude, are printed:
 * 1.4e-7 (MLP) and 7.6e-6 (cnn) for params and optimizer state after 3 steps, 3e-7 for the
 * loss. REL_TOL allows 5e-5: well under the worst case, over what is measured, while a
 * missing halo row, an unmasked padding row, a gradient summed twice or once too few, or a
 * wrong slice changes values by a large fraction of their magnitude. resnet_small's training
 * at this batch amplifies any rounding difference from step to step; its bound also admits
 * what rounding the inputs differently does (test_resnet_small_rows). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/config.h"
#include "tpusim/device.h"
#include "tpusim/equivalence.h"
#include "tpusim/models.h"
#include "tpusim/net.h"
#include "tpusim/program.h"
#include "tpusim/runtime.h"
#include "xorshift.h"

#define STEPS 3
#define SEED 11
/* the partitioned lowering's bound, which the equivalence check holds model parallelism to */
#define REL_TOL TPU_EQUIVALENCE_MODEL_PARALLEL_LOSS_REL

static void ok(int rc, const struct tpu_diag *d)
{
    if (rc)
        fail_msg("error %d: %s", rc, d->msg);
}

static struct tpu_net *load_model(const char *name)
{
    const char *dir = getenv("TPUSIM_MODELS_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "configs/models", name);
    struct tpu_diag d = {0};
    struct tpu_net *net = NULL;
    ok(tpu_net_load_file(path, &net, &d), &d);
    return net;
}

/* ---- one run on the device ----------------------------------------------------------------- */

struct data {
    uint32_t B, h, w, c;  /* the batch and the input image (an MLP: 1 x 1 x features) */
    float *x;             /* [STEPS][B][h*w*c] */
    int32_t *labels;      /* [STEPS][B] */
};

struct param {
    char name[48];
    uint32_t rows, cols;  /* full */
    float *after[2];      /* after step 1 and after step STEPS */
};

struct result {
    float loss[STEPS];
    uint32_t n_params;
    struct param *params;
    float *probe;         /* the probe layer's output at step 1, global [B*ho*wo][C] */
    size_t probe_n;
};

static void result_free(struct result *r)
{
    for (uint32_t i = 0; i < r->n_params; i++)
        for (int k = 0; k < 2; k++)
            free(r->params[i].after[k]);
    free(r->params);
    free(r->probe);
    memset(r, 0, sizeof *r);
}

/* One core, or P cores making one replica: tiny has 2 cores per chip. */
static struct tpu_device *open_device(uint32_t P)
{
    struct tpu_chip_config chip;
    struct tpu_diag d = {0};
    ok(tpu_config_load_preset("tiny", &chip, &d), &d);
    struct tpu_device_settings s;
    if (P == 1)
        chip.cores_per_chip = 1;
    tpu_device_default_settings(&s, &chip);
    s.n_chips = P > 2 ? P / 2 : 1;
    s.cores_per_replica = P;
    s.n_threads = 2;
    struct tpu_device *dev = NULL;
    ok(tpu_device_open(&s, &dev, &d), &d);
    assert_int_equal(tpu_device_n_replicas(dev), 1);
    assert_int_equal(tpu_device_n_cores(dev), P);
    return dev;
}

/* Adds "outfeed <probe>.y" after the last op that writes it (its forward ops). */
static void add_probe(struct tpu_model_program *mp, const char *probe)
{
    char *text = NULL;
    assert_int_equal(tpu_program_to_string(mp->prog, &text), 0);
    char key[64];
    snprintf(key, sizeof key, "%s.y = ", probe);
    char *at = NULL;
    for (char *line = text; *line;) {
        char *end = strchr(line, '\n');
        const char *p = line;
        while (*p == ' ')
            p++;
        if (!strncmp(p, key, strlen(key)))
            at = end ? end + 1 : line + strlen(line);
        if (!end)
            break;
        line = end + 1;
    }
    assert_non_null(at);
    char *out = malloc(strlen(text) + 64);
    assert_non_null(out);
    size_t head = (size_t)(at - text);
    memcpy(out, text, head);
    sprintf(out + head, "outfeed %s.y\n%s", probe, at);
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0};
    if (tpu_program_parse(out, "probe", &p, &d))
        fail_msg("%s", d.msg);
    tpu_program_destroy(&mp->prog);
    mp->prog = p;
    free(out);
    free(text);
}

/* Copies between a full param [rows][cols] and logical core k's part [br][bc]. */
static void part_copy(uint8_t split, uint32_t k, float *full, uint32_t rows, uint32_t cols,
                      float *part, uint32_t br, uint32_t bc, bool to_part)
{
    for (uint32_t r = 0; r < br; r++)
        for (uint32_t c = 0; c < bc; c++) {
            uint32_t fr = split == TPU_SPLIT_ROWS ? k * br + r : r;
            uint32_t fc = split == TPU_SPLIT_COLS ? k * bc + c : c;
            bool in = fr < rows && fc < cols;
            if (to_part)
                part[r * bc + c] = in ? full[(size_t)fr * cols + fc] : 0.0f;
            else if (in)
                full[(size_t)fr * cols + fc] = part[r * bc + c];
            else
                assert_true(part[r * bc + c] == 0.0f); /* padding of a split param stays 0 */
        }
}

/* Reads every param back: split ones from each core, whole ones from core 0 (and checks
 * that every core holds the same bits). */
static void gather(struct tpu_device *dev, const struct tpu_model_program *mp, uint32_t P,
                   struct result *res, int slot)
{
    struct tpu_diag d = {0};
    for (uint32_t i = 0; i < mp->n_params; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->params[i]);
        struct param *q = &res->params[i];
        size_t n = (size_t)b->rows * b->cols;
        float *part = malloc(n * sizeof *part), *core0 = malloc(n * sizeof *core0);
        q->after[slot] = calloc((size_t)q->rows * q->cols, sizeof(float));
        assert_true(part && core0 && q->after[slot]);
        for (uint32_t k = 0; k < P; k++) {
            ok(tpu_device_read(dev, k, mp->params[i], k ? part : core0, n * sizeof *part, &d),
               &d);
            if (mp->param_split[i] != TPU_SPLIT_NONE)
                part_copy(mp->param_split[i], k, q->after[slot], q->rows, q->cols,
                          k ? part : core0, b->rows, b->cols, false);
            else if (k && memcmp(part, core0, n * sizeof *part))
                fail_msg("param '%s': core %u's copy differs from core 0's", q->name, k);
        }
        if (mp->param_split[i] == TPU_SPLIT_NONE)
            memcpy(q->after[slot], core0, n * sizeof *core0);
        free(part);
        free(core0);
    }
}

/* Writes every param: full values from the model's init_param (vary: those it fills with
 * one value, such as biases, gamma and the moving statistics, get varied values around it,
 * so that a param read in the wrong place shows), each core its part; res lists them. */
static void write_params(struct tpu_device *dev, const struct tpu_model_program *mp,
                         const struct tpu_model *model, uint32_t P, bool vary,
                         struct result *res)
{
    struct tpu_diag d = {0};
    struct rng r = {0x9a7a};
    res->n_params = mp->n_params;
    res->params = calloc(mp->n_params, sizeof *res->params);
    assert_non_null(res->params);
    for (uint32_t i = 0; i < mp->n_params; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->params[i]);
        struct param *q = &res->params[i];
        snprintf(q->name, sizeof q->name, "%s", b->name);
        q->rows = mp->param_split[i] == TPU_SPLIT_ROWS ? mp->param_full[i] : b->rows;
        q->cols = mp->param_split[i] == TPU_SPLIT_COLS ? mp->param_full[i] : b->cols;
        float *full = malloc((size_t)q->rows * q->cols * sizeof *full);
        float *part = malloc((size_t)b->rows * b->cols * sizeof *part);
        assert_true(full && part);
        model->init_param(model->ctx, q->name, q->rows, q->cols, full, SEED + i);
        const size_t n = (size_t)q->rows * q->cols;
        bool constant = true;
        for (size_t e = 1; e < n; e++)
            constant = constant && full[e] == full[0];
        if (vary && constant) /* 0 or 1 (bias, beta, gamma, moving statistics): varied */
            for (size_t e = 0; e < n; e++)
                full[e] = full[0] + rnd_f32(&r, full[0] > 0 ? -0.5f : -0.2f, 0.2f);
        for (uint32_t k = 0; k < P; k++) {
            const float *src = full;
            if (mp->param_split[i] != TPU_SPLIT_NONE) {
                part_copy(mp->param_split[i], k, full, q->rows, q->cols, part, b->rows,
                          b->cols, true);
                src = part;
            }
            ok(tpu_device_write(dev, k, mp->params[i], src, tpu_buffer_bytes(b), &d), &d);
        }
        free(full);
        free(part);
    }
}

static bool product_one(const struct tpu_partition_dims *p)
{
    uint64_t product = 1;
    for (uint32_t k = 0; k < p->rank; k++)
        product *= p->dims[k];
    return p->rank && product == 1;
}

/* Step s's inputs to the P cores: x (its rows of every example for features dims [1, P, 1,
 * 1], zero past the image's last row; nothing to cores > 0 for dims of product 1), then,
 * unless predicting, the labels (nothing to cores > 0 for labels dims of product 1). */
static void infeed(struct tpu_device *dev, const struct tpu_model_program *mp,
                   const struct data *x, uint32_t s, uint32_t P,
                   const struct tpu_partition_dims *fd, const struct tpu_partition_dims *ld)
{
    struct tpu_diag d = {0};
    const bool rows = fd->rank == 4 && fd->dims[1] == P && P > 1;
    const uint32_t hc = rows ? (x->h + P - 1) / P : x->h;
    const size_t img = (size_t)x->h * x->w * x->c, lrow = (size_t)x->w * x->c;
    const struct tpu_buffer_desc *xb = tpu_program_buffer(mp->prog, mp->infeed[0]);
    assert_int_equal(xb->rows, x->B);
    assert_int_equal(xb->cols, hc * lrow);
    float *xs = calloc((size_t)x->B * hc * lrow, sizeof *xs);
    assert_non_null(xs);
    const float *gx = x->x + (size_t)s * x->B * img;
    for (uint32_t k = 0; k < P; k++) {
        for (uint32_t n = 0; n < x->B; n++)
            for (uint32_t i = 0; i < hc; i++) {
                uint32_t g = (rows ? k * hc : 0) + i;
                float *dst = xs + ((size_t)n * hc + i) * lrow;
                if (g < x->h)
                    memcpy(dst, gx + n * img + (size_t)g * lrow, lrow * sizeof *dst);
                else
                    memset(dst, 0, lrow * sizeof *dst);
            }
        if (!(product_one(fd) && k > 0))
            ok(tpu_device_infeed(dev, k, xs, tpu_buffer_bytes(xb), 0, &d), &d);
        if (mp->n_infeed > 1 && !(product_one(ld) && k > 0))
            ok(tpu_device_infeed(dev, k, x->labels + (size_t)s * x->B, x->B * sizeof(int32_t),
                                 0, &d), &d);
    }
    free(xs);
}

/* Builds `mode` of `model` for one replica of P cores on a fresh device and loads it. */
static struct tpu_model_program *build_load(struct tpu_device *dev, const struct tpu_model *model,
                                            enum tpu_mode mode, const struct data *x,
                                            uint32_t P, const struct tpu_partition_dims *fd,
                                            const struct tpu_partition_dims *ld,
                                            const char *probe)
{
    struct tpu_diag d = {0};
    const struct tpu_build_shape sh = {.batch_per_replica = x->B, .global_batch = x->B,
                                       .n_replicas = 1, .cores_per_replica = P, .n_dims = 2,
                                       .dims = {*fd, *ld}};
    struct tpu_model_program *mp = calloc(1, sizeof *mp);
    assert_non_null(mp);
    ok(model->build(model->ctx, mode, &sh, mp, &d), &d);
    if (probe)
        add_probe(mp, probe);
    ok(tpu_program_verify(mp->prog, tpu_device_chip(dev), &d), &d);
    ok(tpu_device_load(dev, mp->prog, &d), &d);
    return mp;
}

/* Trains STEPS steps of `model` on P cores of one replica with features dims fd and labels
 * dims ld (rank 0: None), one step per launch. probe: the layer whose output is outfed. */
static void train(const struct tpu_model *model, const struct data *x, uint32_t P,
                  const struct tpu_partition_dims *fd, const struct tpu_partition_dims *ld,
                  const char *probe, struct result *res)
{
    struct tpu_diag d = {0};
    memset(res, 0, sizeof *res);
    struct tpu_device *dev = open_device(P);
    struct tpu_model_program *mp = build_load(dev, model, TPU_MODE_TRAIN, x, P, fd, ld, probe);
    write_params(dev, mp, model, P, false, res);
    const struct tpu_buffer_desc *pb = NULL;
    float *pl = NULL;
    if (probe) {
        char name[64];
        uint32_t id = 0;
        snprintf(name, sizeof name, "%s.y", probe);
        assert_int_equal(tpu_program_find_buffer(mp->prog, name, &id), 0);
        pb = tpu_program_buffer(mp->prog, id);
        pl = malloc(tpu_buffer_bytes(pb));
        res->probe_n = (size_t)pb->rows * pb->cols * P;
        res->probe = calloc(res->probe_n, sizeof *res->probe);
        assert_true(pl && res->probe);
    }
    for (uint32_t s = 0; s < STEPS; s++) {
        ok(tpu_device_set_var(dev, mp->var_iterations, 1), &d);
        infeed(dev, mp, x, s, P, fd, ld);
        ok(tpu_device_run(dev, 0, NULL, &d), &d);
        for (uint32_t k = 0; k < P; k++) {
            if (probe) {
                ok(tpu_device_outfeed(dev, k, pl, tpu_buffer_bytes(pb), 0, NULL, &d), &d);
                if (s == 0)
                    memcpy(res->probe + (size_t)k * pb->rows * pb->cols, pl,
                           tpu_buffer_bytes(pb));
            }
            float loss;
            ok(tpu_device_outfeed(dev, k, &loss, sizeof loss, 0, NULL, &d), &d);
            if (k == 0)
                res->loss[s] = loss;
            else if (memcmp(&loss, &res->loss[s], sizeof loss))
                fail_msg("step %u: core %u's loss %.9g differs from core 0's %.9g", s + 1, k,
                         (double)loss, (double)res->loss[s]);
        }
        if (s == 0 || s == STEPS - 1)
            gather(dev, mp, P, res, s == 0 ? 0 : 1);
    }
    free(pl);
    tpu_program_destroy(&mp->prog);
    free(mp);
    tpu_device_close(&dev);
}

/* One prediction step of `model` on P cores with features dims fd, the params varied
 * (write_params): the outputs [B][size], malloc'd (core 0's; every core's must be the same
 * bits). */
static float *predict(const struct tpu_model *model, const struct data *x, uint32_t P,
                      const struct tpu_partition_dims *fd, size_t *n)
{
    struct tpu_diag d = {0};
    struct tpu_device *dev = open_device(P);
    const struct tpu_partition_dims none = {0, {0}};
    struct tpu_model_program *mp = build_load(dev, model, TPU_MODE_PREDICT, x, P, fd, &none,
                                              NULL);
    struct result scratch = {0};
    write_params(dev, mp, model, P, true, &scratch);
    result_free(&scratch);
    ok(tpu_device_set_var(dev, mp->var_iterations, 1), &d);
    infeed(dev, mp, x, 0, P, fd, &none);
    ok(tpu_device_run(dev, 0, NULL, &d), &d);
    const struct tpu_buffer_desc *ob = tpu_program_buffer(mp->prog, mp->outfeed[0]);
    *n = (size_t)ob->rows * ob->cols;
    float *out = malloc(*n * sizeof *out), *other = malloc(*n * sizeof *other);
    assert_true(out && other);
    for (uint32_t k = 0; k < P; k++) {
        ok(tpu_device_outfeed(dev, k, k ? other : out, *n * sizeof *out, 0, NULL, &d), &d);
        if (k && memcmp(out, other, *n * sizeof *out))
            fail_msg("core %u's predictions differ from core 0's", k);
    }
    free(other);
    tpu_program_destroy(&mp->prog);
    free(mp);
    tpu_device_close(&dev);
    return out;
}

/* ---- comparing ------------------------------------------------------------------------------ */

static const struct param *find(const struct result *r, const char *name)
{
    for (uint32_t i = 0; i < r->n_params; i++)
        if (!strcmp(r->params[i].name, name))
            return &r->params[i];
    fail_msg("no param '%s'", name);
    return NULL;
}

/* The largest relative difference of the loss of step s (s < STEPS), or of param i after
 * step 1 (slot 0) or STEPS (slot 1): |a - b| over the tensor's largest magnitude in a. */
static double loss_rel(const struct result *a, const struct result *b, uint32_t s)
{
    return fabs((double)a->loss[s] - (double)b->loss[s]) / fabs((double)a->loss[s]);
}

static double param_rel(const struct result *one, const struct result *other, uint32_t i,
                        int slot, size_t *where)
{
    const struct param *a = &one->params[i], *b = find(other, a->name);
    assert_int_equal(a->rows, b->rows);
    assert_int_equal(a->cols, b->cols);
    const size_t n = (size_t)a->rows * a->cols;
    double scale = 0, diff = 0;
    for (size_t e = 0; e < n; e++) {
        scale = fmax(scale, fabs((double)a->after[slot][e]));
        double dd = fabs((double)a->after[slot][e] - (double)b->after[slot][e]);
        if (!(dd <= diff)) { /* NaN shows */
            diff = dd;
            *where = e;
        }
    }
    return scale > 0 ? diff / scale : diff;
}

/* The loss of every step and every param after steps 1 and STEPS: within REL_TOL of the
 * one-core run's, or, given a control (the one-core run with every input moved by one ulp),
 * within CONTROL_FACTOR times the control's own difference where that is larger. Prints the
 * largest differences. */
#define CONTROL_FACTOR 8.0
static void compare(const char *what, const struct result *one, const struct result *part,
                    const struct result *control)
{
    assert_int_equal(one->n_params, part->n_params);
    double worst_param = 0, worst_loss = 0, worst_ctl = 0;
    for (uint32_t s = 0; s < STEPS; s++) {
        const double rel = loss_rel(one, part, s);
        const double bound = fmax(REL_TOL, control ? CONTROL_FACTOR * loss_rel(one, control, s)
                                                   : 0);
        if (!(rel <= bound))
            fail_msg("%s: step %u's loss %.9g, unpartitioned %.9g (relative %.3g, bound "
                     "%.3g)", what, s + 1, (double)part->loss[s], (double)one->loss[s], rel,
                     bound);
        worst_loss = fmax(worst_loss, rel);
    }
    for (uint32_t i = 0; i < one->n_params; i++)
        for (int slot = 0; slot < 2; slot++) {
            size_t at = 0, cat = 0;
            const double rel = param_rel(one, part, i, slot, &at);
            const double ctl = control ? param_rel(one, control, i, slot, &cat) : 0;
            const double bound = fmax(REL_TOL, CONTROL_FACTOR * ctl);
            if (!(rel <= bound)) {
                const struct param *a = &one->params[i], *b = find(part, a->name);
                fail_msg("%s: param '%s' [%u, %u] after step %d: element %zu is %.9g, "
                         "unpartitioned %.9g (%.3g of the largest magnitude; bound %.3g)",
                         what, a->name, a->rows, a->cols, slot ? STEPS : 1, at,
                         (double)b->after[slot][at], (double)a->after[slot][at], rel, bound);
            }
            worst_param = fmax(worst_param, rel);
            worst_ctl = fmax(worst_ctl, ctl);
        }
    printf("%s: largest relative difference: loss %.3g, params %.3g (bound %.0e", what,
           worst_loss, worst_param, REL_TOL);
    if (control)
        printf("; the one-core run with its inputs moved by one ulp: params %.3g", worst_ctl);
    printf(")\n");
}

/* The probe's rows on P cores, local [B][hoc][wo][C] each, against the unpartitioned [B][ho]
 * [wo][C]: bit for bit, and padding rows 0. */
static void compare_probe(const char *what, const struct result *one, const struct result *part,
                          uint32_t P, uint32_t B, uint32_t ho, uint32_t wo, uint32_t C)
{
    const uint32_t hoc = (ho + P - 1) / P;
    assert_int_equal(one->probe_n, (size_t)B * ho * wo * C);
    assert_int_equal(part->probe_n, (size_t)P * B * hoc * wo * C);
    const size_t row = (size_t)wo * C;
    for (uint32_t k = 0; k < P; k++)
        for (uint32_t n = 0; n < B; n++)
            for (uint32_t i = 0; i < hoc; i++) {
                const float *got = part->probe + (((size_t)k * B + n) * hoc + i) * row;
                const uint32_t g = k * hoc + i;
                for (size_t e = 0; e < row; e++) {
                    const float want = g < ho ? one->probe[((size_t)n * ho + g) * row + e] : 0;
                    if (memcmp(&got[e], &want, sizeof want))
                        fail_msg("%s: core %u example %u local row %u (global %u) element %zu "
                                 "is %.9g, not %.9g", what, k, n, i, g, e, (double)got[e],
                                 (double)want);
                }
            }
}

static void make_data(struct data *x, uint32_t B, uint32_t h, uint32_t w, uint32_t c,
                      uint32_t classes, uint64_t seed)
{
    struct rng r = {seed};
    x->B = B;
    x->h = h;
    x->w = w;
    x->c = c;
    const size_t n = (size_t)STEPS * B * h * w * c;
    x->x = malloc(n * sizeof *x->x);
    x->labels = malloc((size_t)STEPS * B * sizeof *x->labels);
    assert_true(x->x && x->labels);
    for (size_t e = 0; e < n; e++)
        x->x[e] = rnd_f32(&r, 0.0f, 1.0f);
    for (size_t e = 0; e < (size_t)STEPS * B; e++)
        x->labels[e] = (int32_t)rnd_below(&r, classes);
}

static void data_free(struct data *x)
{
    free(x->x);
    free(x->labels);
}

static struct tpu_train_spec sgd(void)
{
    struct tpu_train_spec s;
    tpu_train_spec_default(&s);
    s.optimizer = TPU_OPT_SGD_MOMENTUM;
    s.learning_rate = 0.05f;
    s.momentum = 0.9f;
    s.passes = 3;
    s.seed = 5;
    return s;
}

static const struct tpu_partition_dims ROWS2 = {4, {1, 2, 1, 1}};
static const struct tpu_partition_dims ROWS4 = {4, {1, 4, 1, 1}};
static const struct tpu_partition_dims NONE_DIMS = {0, {0}};

/* The inputs moved by one ulp each, up or down (a fixed pattern): the control run. */
static void nudge(const struct data *x, struct data *y)
{
    *y = *x;
    const size_t n = (size_t)STEPS * x->B * x->h * x->w * x->c;
    y->x = malloc(n * sizeof *y->x);
    assert_non_null(y->x);
    for (size_t e = 0; e < n; e++)
        y->x[e] = nextafterf(x->x[e], (e * 2654435761u) % 7 < 3 ? -1.0f : 2.0f);
}

/* A net from a model file on 1, 2 and 4 cores; probe: its first conv (ho x wo x C).
 * with_control: also the one-core run on inputs moved by one ulp, whose difference scales
 * the bound (a net whose training amplifies rounding, see test_resnet_small_rows). */
static void check_file(const char *file, const char *probe, uint32_t ho, uint32_t wo, uint32_t C,
                       bool with_control, bool predict_exact)
{
    struct tpu_net *net = load_model(file);
    struct tpu_train_spec spec = sgd();
    struct tpu_model m;
    struct tpu_diag d = {0};
    ok(tpu_net_model(&m, net, &spec, &d), &d);
    struct data x, y;
    make_data(&x, 2, 28, 28, 1, 10, 0x5eed);
    struct result one, two, four, ctl;
    train(&m, &x, 1, &NONE_DIMS, &NONE_DIMS, probe, &one);
    if (with_control) {
        nudge(&x, &y);
        train(&m, &y, 1, &NONE_DIMS, &NONE_DIMS, NULL, &ctl);
        free(y.x);
    }
    train(&m, &x, 2, &ROWS2, &NONE_DIMS, probe, &two);
    train(&m, &x, 4, &ROWS4, &NONE_DIMS, probe, &four);
    char what[64];
    snprintf(what, sizeof what, "%s on 2 cores", file);
    compare_probe(what, &one, &two, 2, x.B, ho, wo, C);
    compare(what, &one, &two, with_control ? &ctl : NULL);
    snprintf(what, sizeof what, "%s on 4 cores", file);
    compare_probe(what, &one, &four, 4, x.B, ho, wo, C);
    compare(what, &one, &four, with_control ? &ctl : NULL);
    result_free(&one);
    result_free(&two);
    result_free(&four);
    if (with_control)
        result_free(&ctl);

    /* prediction (batch norm with the moving statistics, varied params): bit-identical where
       no sum crosses the cut (resnet_small: its only all-reduce adds zeros), else within
       REL_TOL of the outputs' largest magnitude (cnn: the dense layer split by rows) */
    size_t n1, n2, n4;
    float *p1 = predict(&m, &x, 1, &NONE_DIMS, &n1);
    float *p2 = predict(&m, &x, 2, &ROWS2, &n2);
    float *p4 = predict(&m, &x, 4, &ROWS4, &n4);
    assert_int_equal(n1, n2);
    assert_int_equal(n1, n4);
    double scale = 0, diff = 0;
    for (size_t e = 0; e < n1; e++) {
        scale = fmax(scale, fabs((double)p1[e]));
        diff = fmax(diff, fmax(fabs((double)p1[e] - p2[e]), fabs((double)p1[e] - p4[e])));
    }
    printf("%s: predictions on 2 and 4 cores: largest difference %.3g of the largest "
           "magnitude %.3g\n", file, diff / scale, scale);
    if (predict_exact) {
        assert_memory_equal(p1, p2, n1 * sizeof *p1);
        assert_memory_equal(p1, p4, n1 * sizeof *p1);
    } else {
        assert_true(diff <= REL_TOL * scale);
    }
    free(p1);
    free(p2);
    free(p4);
    data_free(&x);
    tpu_net_destroy(&net);
}

static void test_cnn_rows(void **state)
{
    (void)state;
    check_file("cnn.json", "conv2d", 26, 26, 32, false, false);
}

/* resnet_small's training at this batch (2 examples, so batch norm's statistics cover few
 * values) amplifies rounding: the one-core run itself, on inputs moved by one ulp, moves its
 * kernel gradients by up to ~5e-4 at step 1 and some params by tens of percent after 3 steps
 * (measured; printed). So its bound is that control's difference times CONTROL_FACTOR where
 * it exceeds REL_TOL: the partitioned run must differ from the one-core run no more than
 * rounding the inputs differently does (it differs less: ~1e-5 at step 1). A missing halo
 * row or padding row left non-zero changes the step-1 values by a large fraction. */
static void test_resnet_small_rows(void **state)
{
    (void)state;
    check_file("resnet_small.json", "stem_conv", 28, 28, 16, true, true);
}

/* The MLP: one core runs tpu_mlp_build's program; 2 and 4 cores the net of dense layers,
 * w0/b0 split by columns, w1 by rows, the last layer whole; the features whole on every core
 * (2) or sent to core 0 and shared (4, dims of product 1). */
static void test_mlp_dense_split(void **state)
{
    (void)state;
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 3;
    spec.sizes[0] = 20;
    spec.sizes[1] = 13; /* not a multiple of 2 or 4: padded columns and rows */
    spec.sizes[2] = 12;
    spec.sizes[3] = 10;
    spec.learning_rate = 0.05f;
    spec.passes = 3;
    struct tpu_model m;
    tpu_mlp_model(&m, &spec);
    struct data x;
    make_data(&x, 8, 1, 1, 20, 10, 0xfeed);
    const struct tpu_partition_dims one_core = {2, {1, 1}};
    struct result one, two, four;
    train(&m, &x, 1, &NONE_DIMS, &NONE_DIMS, NULL, &one);
    train(&m, &x, 2, &NONE_DIMS, &one_core, NULL, &two);
    train(&m, &x, 4, &one_core, &NONE_DIMS, NULL, &four);
    compare("MLP on 2 cores (labels to core 0)", &one, &two, NULL);
    compare("MLP on 4 cores (features to core 0)", &one, &four, NULL);
    result_free(&one);
    result_free(&two);
    result_free(&four);
    data_free(&x);

    /* how the params split */
    struct tpu_model_program *mp = calloc(1, sizeof *mp);
    assert_non_null(mp);
    struct tpu_diag d = {0};
    const struct tpu_build_shape sh = {.batch_per_replica = 8, .global_batch = 8,
                                       .n_replicas = 1, .cores_per_replica = 4};
    ok(m.build(m.ctx, TPU_MODE_TRAIN, &sh, mp, &d), &d);
    const char *names[] = {"w0", "b0", "w1", "b1", "w2", "w0.vel", "w1.vel"};
    const uint8_t splits[] = {TPU_SPLIT_COLS, TPU_SPLIT_COLS, TPU_SPLIT_ROWS, TPU_SPLIT_NONE,
                              TPU_SPLIT_NONE, TPU_SPLIT_COLS, TPU_SPLIT_ROWS};
    const uint32_t shapes[][2] = {{20, 4}, {1, 4}, {4, 12}, {1, 12}, {12, 10}, {20, 4},
                                  {4, 12}};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        bool found = false;
        for (uint32_t i = 0; i < mp->n_params; i++) {
            const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->params[i]);
            if (strcmp(b->name, names[k]))
                continue;
            found = true;
            assert_int_equal(mp->param_split[i], splits[k]);
            assert_int_equal(b->rows, shapes[k][0]);
            assert_int_equal(b->cols, shapes[k][1]);
            if (splits[k] != TPU_SPLIT_NONE)
                assert_int_equal(mp->param_full[i], 13);
        }
        if (!found)
            fail_msg("no param %s", names[k]);
    }
    tpu_program_destroy(&mp->prog);
    free(mp);
}

/* ---- what the lowering refuses ------------------------------------------------------------ */

static void expect_refused(const struct tpu_net *net, uint32_t P,
                           const struct tpu_partition_dims *fd,
                           const struct tpu_partition_dims *ld, const char *want)
{
    struct tpu_train_spec spec = sgd();
    struct tpu_build_shape sh = {.batch_per_replica = 2, .global_batch = 2, .n_replicas = 1,
                                 .cores_per_replica = P, .n_dims = ld ? 2 : 1, .dims = {*fd}};
    if (ld)
        sh.dims[1] = *ld;
    struct tpu_model_program *mp = calloc(1, sizeof *mp);
    assert_non_null(mp);
    struct tpu_diag d = {0};
    int rc = tpu_net_build(net, &spec, TPU_MODE_TRAIN, &sh, mp, NULL, &d);
    if (rc != TPU_EUNSUPPORTED)
        fail_msg("expected a refusal (%d), got %d: %s", TPU_EUNSUPPORTED, rc, d.msg);
    if (!strstr(d.msg, want))
        fail_msg("the message\n  %s\nlacks\n  %s", d.msg, want);
    assert_null(mp->prog);
    free(mp);
}

static void test_refusals(void **state)
{
    (void)state;
    struct tpu_net *cnn = load_model("cnn.json");
    const struct tpu_partition_dims cols = {4, {1, 1, 2, 1}}, rank2 = {2, {1, 2}};
    expect_refused(cnn, 2, &cols, NULL, "net 'cnn': input_partition_dims [1, 1, 2, 1] for the "
                   "features [B, 28, 28, 1] over 2 cores per replica: the net's lowering "
                   "partitions an input image by rows only, [1, 2, 1, 1]");
    expect_refused(cnn, 2, &rank2, NULL, "input_partition_dims [1, 2] for the features");
    expect_refused(cnn, 2, &ROWS2, &rank2, "input_partition_dims [1, 2] for the labels: the "
                   "loss reads every example's label on every core of a replica");
    /* 12 rows of the flatten over 8 cores: the dense kernel cannot follow them */
    const struct tpu_partition_dims rows8 = {4, {1, 8, 1, 1}};
    expect_refused(cnn, 8, &rows8, NULL, "layer 'dense' (dense) reads 'flatten', the flatten "
                   "of an image cut by rows over the 8 cores of a replica (from "
                   "input_partition_dims [1, 8, 1, 1]): its kernel is split by the image's "
                   "rows, which needs the image's 12 rows to divide by the 8 cores per replica");
    tpu_net_destroy(&cnn);

    /* a reshape of a row-cut image, and a row-cut output */
    struct tpu_net *net = NULL;
    struct tpu_diag d = {0};
    uint32_t t, y;
    ok(tpu_net_create("cut", 8, 8, 2, &net, &d), &d);
    ok(tpu_net_conv2d(net, "conv", 0, 4, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_RELU, &t, &d), &d);
    struct tpu_layer_desc l;
    tpu_layer_desc_init(&l, TPU_LAYER_RESHAPE);
    snprintf(l.name, sizeof l.name, "reshape");
    l.target = (struct tpu_shape){4, 16, 4};
    ok(tpu_net_add(net, &l, &t, 1, &y, &d), &d);
    ok(tpu_net_set_output(net, y, TPU_LOSS_MSE, &d), &d);
    expect_refused(net, 2, &ROWS2, NULL, "layer 'reshape' (reshape) reads 'conv', an image cut "
                   "by rows over the 2 cores of a replica (from input_partition_dims [1, 2, 1, "
                   "1]): reshape needs the whole tensor");
    ok(tpu_net_set_output(net, t, TPU_LOSS_MSE, &d), &d);
    expect_refused(net, 2, &ROWS2, NULL, "net 'cut': the output 'conv' is an image cut by rows "
                   "over the 2 cores of a replica (from input_partition_dims [1, 2, 1, 1]), "
                   "but the loss reads the whole output on every core");
    tpu_net_destroy(&net);

    /* the MLP's own program (one core per replica) takes no cut */
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 1;
    spec.sizes[0] = 4;
    spec.sizes[1] = 3;
    struct tpu_model m;
    tpu_mlp_model(&m, &spec);
    struct tpu_build_shape sh = {.batch_per_replica = 2, .global_batch = 2, .n_replicas = 1,
                                 .cores_per_replica = 1, .n_dims = 1, .dims = {rank2}};
    struct tpu_model_program *mp = calloc(1, sizeof *mp);
    assert_non_null(mp);
    assert_int_equal(m.build(m.ctx, TPU_MODE_TRAIN, &sh, mp, &d), TPU_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "the MLP model takes no input_partition_dims, but the "
                                  "features have [1, 2]"));
    free(mp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_mlp_dense_split),
        cmocka_unit_test(test_cnn_rows),
        cmocka_unit_test(test_resnet_small_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
