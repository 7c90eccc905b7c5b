/* The fp32 reference: the same MLP trained on the host in plain fp32 (OpenBLAS sgemm for the
 * matmuls), with the same initial weights, the same stream of batches, the same loss scaling
 * and the same optimizer formulas as the device programs of mlp.c. The only differences
 * from the chip are the precision (fp32 matmul inputs instead of bf16) and the summation
 * order, so comparing the two measures what mixed precision costs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/reference.h"
#include "util.h"

#ifdef TPUSIM_HAVE_CBLAS
#include <cblas.h>

struct layer {
    uint32_t in, out;
    float *w, *b, *gw, *gb, *s1w, *s1b, *s2w, *s2b; /* state 1: velocity or m; 2: v */
    float *z, *h, *dz;                               /* [batch][out] */
};

static void update(const struct tpu_mlp_spec *s, float *p, float *g, float *s1, float *s2,
                   size_t n, float gamma, uint64_t t)
{
    if (s->optimizer == TPU_OPT_SGD_MOMENTUM) {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + gamma * p[i];
            s1[i] = s->momentum * s1[i] + gi;
            p[i] = p[i] - s->learning_rate * s1[i];
        }
        return;
    }
    double c1 = 1.0 - pow(s->beta1, (double)t), c2 = 1.0 - pow(s->beta2, (double)t);
    float fc1 = (float)c1, fc2 = (float)c2;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + gamma * p[i];
        s1[i] = s->beta1 * s1[i] + (1 - s->beta1) * gi;
        s2[i] = s->beta2 * s2[i] + (1 - s->beta2) * (gi * gi);
        p[i] = p[i] - (s->learning_rate * (s1[i] / fc1)) / (sqrtf(s2[i] / fc2) + s->epsilon);
    }
}

/* Forward over `rows` rows of x into the layers' z/h; returns the logits (last z). */
static float *forward(struct layer *L, uint32_t n, const float *x, uint32_t rows)
{
    const float *in = x;
    for (uint32_t l = 0; l < n; l++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)L[l].out,
                    (int)L[l].in, 1.0f, in, (int)L[l].in, L[l].w, (int)L[l].out, 0.0f, L[l].z,
                    (int)L[l].out);
        for (uint32_t r = 0; r < rows; r++)
            for (uint32_t j = 0; j < L[l].out; j++) {
                float v = L[l].z[(size_t)r * L[l].out + j] + L[l].b[j];
                L[l].z[(size_t)r * L[l].out + j] = v;
                if (l + 1 < n)
                    L[l].h[(size_t)r * L[l].out + j] = v > 0 ? v : 0;
            }
        in = L[l].h;
    }
    return L[n - 1].z;
}

/* The layers' params, optimizer state, gradients and activations for batches of B rows,
 * zeroed. Returns 0 or TPU_ENOMEM (what was allocated is freed by free_layers). */
static int alloc_layers(struct layer *L, const struct tpu_mlp_spec *spec, uint32_t B)
{
    for (uint32_t l = 0; l < spec->n_layers; l++) {
        struct layer *a = &L[l];
        a->in = spec->sizes[l];
        a->out = spec->sizes[l + 1];
        size_t nw = (size_t)a->in * a->out, nb = a->out, na = (size_t)B * a->out;
        float **w[] = {&a->w, &a->gw, &a->s1w, &a->s2w};
        float **b[] = {&a->b, &a->gb, &a->s1b, &a->s2b};
        for (int k = 0; k < 4; k++) {
            *w[k] = calloc(nw, sizeof(float));
            *b[k] = calloc(nb, sizeof(float));
            if (!*w[k] || !*b[k])
                return TPU_ENOMEM;
        }
        a->z = calloc(na, sizeof(float));
        a->h = calloc(na, sizeof(float));
        a->dz = calloc(na, sizeof(float));
        if (!a->z || !a->h || !a->dz)
            return TPU_ENOMEM;
    }
    return 0;
}

static void free_layers(struct layer *L, uint32_t n)
{
    for (uint32_t l = 0; l < n; l++) {
        free(L[l].w);
        free(L[l].b);
        free(L[l].gw);
        free(L[l].gb);
        free(L[l].s1w);
        free(L[l].s1b);
        free(L[l].s2w);
        free(L[l].s2b);
        free(L[l].z);
        free(L[l].h);
        free(L[l].dz);
    }
}

/* The same initial values as the estimator's: the model's init_param for each weight and
 * bias, with the seed of its place among the model program's params. */
static int init_weights(struct layer *L, const struct tpu_model *model, uint32_t B,
                        uint64_t seed, struct tpu_diag *d)
{
    const struct tpu_build_shape shape = {.batch_per_replica = B, .global_batch = B,
                                          .n_replicas = 1, .cores_per_replica = 1};
    struct tpu_model_program *mp = calloc(1, sizeof *mp);
    if (!mp)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    int rc = model->build(model->ctx, TPU_MODE_TRAIN, &shape, mp, d);
    if (rc) {
        free(mp);
        return rc;
    }
    for (uint32_t i = 0; i < mp->n_params; i++) {
        const struct tpu_buffer_desc *bd = tpu_program_buffer(mp->prog, mp->params[i]);
        unsigned l = 0;
        if ((bd->name[0] == 'w' || bd->name[0] == 'b') && !strchr(bd->name, '.')) {
            l = (unsigned)atoi(bd->name + 1);
            model->init_param(model->ctx, bd->name, bd->rows, bd->cols,
                              bd->name[0] == 'w' ? L[l].w : L[l].b, seed + i);
        }
    }
    tpu_program_destroy(&mp->prog);
    free(mp);
    return 0;
}

/* Softmax cross-entropy of logits [B][C] against labels y: the gradient, scaled by alpha,
 * into g [B][C]; returns the loss summed over the rows. */
static double softmax_xent(const float *logits, const int32_t *y, uint32_t B, uint32_t C,
                           float alpha, float *g)
{
    double loss = 0;
    for (uint32_t r = 0; r < B; r++) {
        const float *row = logits + (size_t)r * C;
        float m = row[0];
        for (uint32_t j = 1; j < C; j++)
            m = row[j] > m ? row[j] : m;
        float s = 0;
        for (uint32_t j = 0; j < C; j++)
            s += expf(row[j] - m);
        loss += logf(s) - (row[y[r]] - m);
        for (uint32_t j = 0; j < C; j++)
            g[(size_t)r * C + j] = alpha * (expf(row[j] - m) / s - (j == (uint32_t)y[r]));
    }
    return loss;
}

/* Backward from the last layer's dz: every layer's gw and gb, and the dz of the layers below
 * (dh [B][widest] is scratch). */
static void backward(struct layer *L, uint32_t n, const float *x, uint32_t B, float *dh)
{
    for (uint32_t li = n; li-- > 0;) {
        struct layer *a = &L[li];
        const float *in = li ? L[li - 1].h : x;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)a->in, (int)a->out, (int)B,
                    1.0f, in, (int)a->in, a->dz, (int)a->out, 0.0f, a->gw, (int)a->out);
        for (uint32_t j = 0; j < a->out; j++) {
            float sgb = 0;
            for (uint32_t r = 0; r < B; r++)
                sgb += a->dz[(size_t)r * a->out + j];
            a->gb[j] = sgb;
        }
        if (li > 0) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)B, (int)a->in,
                        (int)a->out, 1.0f, a->dz, (int)a->out, a->w, (int)a->out, 0.0f, dh,
                        (int)a->in);
            const float *zprev = L[li - 1].z;
            for (size_t k = 0; k < (size_t)B * a->in; k++)
                L[li - 1].dz[k] = zprev[k] > 0 ? dh[k] : 0;
        }
    }
}

/* The share of the test set classified right, B rows at a time (x, y: one batch's room). */
static double test_accuracy(struct layer *L, uint32_t n, const struct tpu_dataset *test,
                            uint32_t B, uint32_t C, float *x, int32_t *y)
{
    uint64_t correct = 0;
    for (uint32_t start = 0; start < test->n_examples; start += B) {
        uint32_t real = tpu_dataset_gather(test, NULL, start, B, x, y);
        const float *logits = forward(L, n, x, B);
        for (uint32_t r = 0; r < real; r++) {
            uint32_t best = 0;
            for (uint32_t j = 1; j < C; j++)
                if (logits[(size_t)r * C + j] > logits[(size_t)r * C + best])
                    best = j;
            correct += best == (uint32_t)y[r];
        }
    }
    return (double)correct / test->n_examples;
}

int tpu_reference_train(const struct tpu_mlp_spec *spec, const struct tpu_model *model,
                         struct tpu_input *input, const struct tpu_dataset *test,
                         uint64_t steps, uint32_t global_batch, uint64_t seed,
                         struct tpu_reference_result *out, struct tpu_diag *d)
{
    const uint32_t n = spec->n_layers, B = global_batch, C = spec->sizes[n];
    struct layer L[TPU_MLP_MAX_LAYERS];
    memset(L, 0, sizeof L);
    int rc = 0;
    float *x = malloc((size_t)B * spec->sizes[0] * sizeof *x);
    int32_t *y = malloc((size_t)B * sizeof *y);
    uint32_t widest = 0;
    for (uint32_t l = 0; l <= n; l++)
        widest = spec->sizes[l] > widest ? spec->sizes[l] : widest;
    float *dh = malloc((size_t)B * widest * sizeof *dh);
    if (!x || !y || !dh || alloc_layers(L, spec, B)) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory for the fp32 reference");
        goto out;
    }
    if ((rc = init_weights(L, model, B, seed, d)))
        goto out;
    if (input->start && (rc = input->start(input->ctx, TPU_MODE_TRAIN, 0, B, d)))
        goto out;
    const float alpha = 1.0f / (float)B;
    for (uint64_t t = 1; t <= steps; t++) {
        void *tens[2] = {x, y};
        uint32_t real = 0;
        rc = input->next(input->ctx, TPU_MODE_TRAIN, 0, B, tens, &real, d);
        if (rc <= 0 || real < B) {
            rc = rc < 0 ? rc : 0;
            out->steps = t - 1;
            break;
        }
        rc = 0;
        float *logits = forward(L, n, x, B);
        out->final_loss = softmax_xent(logits, y, B, C, alpha, L[n - 1].dz) / B;
        backward(L, n, x, B, dh);
        for (uint32_t l = 0; l < n; l++) {
            update(spec, L[l].w, L[l].gw, L[l].s1w, L[l].s2w, (size_t)L[l].in * L[l].out,
                   spec->l2, t);
            update(spec, L[l].b, L[l].gb, L[l].s1b, L[l].s2b, L[l].out, 0.0f, t);
        }
        out->steps = t;
    }
    if (!rc)
        out->test_accuracy = test_accuracy(L, n, test, B, C, x, y);
out:
    free_layers(L, n);
    free(x);
    free(y);
    free(dh);
    return rc;
}

#else

int tpu_reference_train(const struct tpu_mlp_spec *spec, const struct tpu_model *model,
                         struct tpu_input *input, const struct tpu_dataset *test,
                         uint64_t steps, uint32_t global_batch, uint64_t seed,
                         struct tpu_reference_result *out, struct tpu_diag *d)
{
    (void)spec, (void)model, (void)input, (void)test, (void)steps, (void)global_batch;
    (void)seed, (void)out;
    return tpu__fail(d, TPU_EUNSUPPORTED, "the fp32 reference needs OpenBLAS; install "
                     "libopenblas-dev and rebuild");
}

#endif
