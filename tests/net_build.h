/* Building small layer graphs in the tests (test_net_ref.c, test_net_chip.c): each helper adds
 * one layer with net.h's builder and fails the running CMocka test with the builder's message
 * if it refuses. Include after <cmocka.h>. Test-only. */
#ifndef TPUSIM_TESTS_NET_BUILD_H
#define TPUSIM_TESTS_NET_BUILD_H

#include <stdbool.h>
#include <stdint.h>

#include "tpusim/net.h"

static inline void ok(int rc, const struct tpu_diag *d)
{
    if (rc)
        fail_msg("error %d: %s", rc, d->msg);
}

/* The build shape of R = global / per_replica replicas (at least one) of one core each. */
#define DATA_SHAPE(per_replica, global)                                                       \
    (&(struct tpu_build_shape){.batch_per_replica = (per_replica), .global_batch = (global), \
                               .n_replicas = (global) >= (per_replica)                     \
                                                 ? (global) / (per_replica) : 1,           \
                               .cores_per_replica = 1})

static inline struct tpu_net *new_net(uint32_t h, uint32_t w, uint32_t c)
{
    struct tpu_net *net = NULL;
    struct tpu_diag d = {0};
    ok(tpu_net_create("ref", h, w, c, &net, &d), &d);
    return net;
}

static inline uint32_t dense(struct tpu_net *net, uint32_t x, uint32_t units,
                             enum tpu_activation a)
{
    struct tpu_diag d = {0};
    uint32_t y;
    ok(tpu_net_dense(net, NULL, x, units, a, &y, &d), &d);
    return y;
}

static inline uint32_t conv(struct tpu_net *net, uint32_t x, uint32_t f, uint32_t kh,
                            uint32_t kw, uint32_t s, enum tpu_padding p, enum tpu_activation a,
                            bool bias)
{
    struct tpu_layer_desc l;
    tpu_layer_desc_init(&l, TPU_LAYER_CONV2D);
    l.filters = f;
    l.kh = kh;
    l.kw = kw;
    l.sh = l.sw = s;
    l.padding = p;
    l.activation = a;
    l.use_bias = bias;
    struct tpu_diag d = {0};
    uint32_t y;
    ok(tpu_net_add(net, &l, &x, 1, &y, &d), &d);
    return y;
}

static inline uint32_t pool(struct tpu_net *net, enum tpu_layer_kind k, uint32_t x, uint32_t kh,
                            uint32_t kw, uint32_t sh, uint32_t sw, enum tpu_padding p)
{
    struct tpu_layer_desc l;
    tpu_layer_desc_init(&l, k);
    l.kh = kh;
    l.kw = kw;
    l.sh = sh;
    l.sw = sw;
    l.padding = p;
    struct tpu_diag d = {0};
    uint32_t y;
    ok(tpu_net_add(net, &l, &x, 1, &y, &d), &d);
    return y;
}

static inline uint32_t unary(struct tpu_net *net, enum tpu_layer_kind k, uint32_t x)
{
    struct tpu_diag d = {0};
    uint32_t y;
    ok(tpu_net_unary(net, NULL, k, x, &y, &d), &d);
    return y;
}

static inline uint32_t reshape(struct tpu_net *net, uint32_t x, uint32_t h, uint32_t w,
                               uint32_t c)
{
    struct tpu_layer_desc l;
    tpu_layer_desc_init(&l, TPU_LAYER_RESHAPE);
    l.target = (struct tpu_shape){h, w, c};
    struct tpu_diag d = {0};
    uint32_t y;
    ok(tpu_net_add(net, &l, &x, 1, &y, &d), &d);
    return y;
}

static inline uint32_t dropout(struct tpu_net *net, uint32_t x, float rate)
{
    struct tpu_diag d = {0};
    uint32_t y;
    ok(tpu_net_dropout(net, NULL, x, rate, &y, &d), &d);
    return y;
}

static inline uint32_t batch_norm(struct tpu_net *net, uint32_t x, bool cross)
{
    struct tpu_diag d = {0};
    uint32_t y;
    ok(tpu_net_batch_norm(net, NULL, x, cross, &y, &d), &d);
    return y;
}

static inline uint32_t add(struct tpu_net *net, uint32_t a, uint32_t b)
{
    struct tpu_diag d = {0};
    uint32_t y;
    ok(tpu_net_add2(net, NULL, a, b, &y, &d), &d);
    return y;
}

static inline void output(struct tpu_net *net, uint32_t t, enum tpu_loss loss)
{
    struct tpu_diag d = {0};
    ok(tpu_net_set_output(net, t, loss, &d), &d);
}

#endif
