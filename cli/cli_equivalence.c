/* `tpusim train --check-equivalence N`: the sharded run as configured against the same model
 * on one core, N steps, with a table of the differences per step (or --json) and a verdict
 * against the bound (include/tpusim/equivalence.h does the work; this file sets it up from
 * the train options and prints). The exit status is 1 when a step is outside the bound. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_train.h"
#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/equivalence.h"
#include "tpusim/models.h"
#include "tpusim/net.h"

/* The options that do not go with the check, each with why. */
static int check_options(const struct train_opts *o)
{
    const char *cmd = o->cmd;
    if (!o->check_equivalence)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--equivalence-free-running is a mode of "
                              "--check-equivalence N: give --check-equivalence N with it, or "
                              "leave it out");
    if (o->steps || o->max_steps || o->epochs > 0)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--check-equivalence N trains N steps: leave "
                              "--steps, --max-steps and --epochs out");
    if (o->timing_only)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--check-equivalence compares values and "
                              "--timing-only computes none: leave --timing-only out");
    if (o->rc.model_dir[0])
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--check-equivalence trains both runs from the "
                              "seed's initial params and writes no checkpoints, but --model-dir "
                              "'%s' was given (a checkpoint there would be resumed by one run "
                              "only): leave --model-dir out", o->rc.model_dir);
    if (o->reference)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--check-equivalence compares the sharded run "
                              "with one core on the chip; --reference (the fp32 host trainer) "
                              "does not go with it: leave --reference out");
    if (o->trace[0])
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--check-equivalence runs two devices and "
                              "writes no timeline: leave --trace out, or trace a plain 'tpusim "
                              "train' of the same configuration");
    if (o->backend == TRAIN_BACKEND_RTL)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--check-equivalence runs on the native "
                              "backend (both devices); leave --backend rtl out (the RTL array "
                              "gives the native backend's values bit for bit, test_rtl_backend)");
    if (o->backend == TRAIN_BACKEND_SYSTEMC)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--check-equivalence runs on the native "
                              "backend (both devices); leave --backend systemc out (the SystemC "
                              "model gives the native backend's values and cycles, "
                              "test_systemc_backend)");
    if (o->step_shares)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--step-shares measures a plain training "
                              "run's steps, and --check-equivalence runs two devices step by "
                              "step: leave --step-shares out, or measure a plain 'tpusim train' "
                              "of the same configuration");
    if (o->tuner_given || o->target_overhead_given)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--check-equivalence runs one step per loop "
                              "and no tuner chooses loop sizes: leave --tuner and "
                              "--tuner-target-overhead out");
    if (o->rc.per_host_input_for_training == TPU_BROADCAST)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--check-equivalence with "
                              "--per-host-input-for-training BROADCAST: every replica sees the "
                              "whole global batch, so the sharded run trains on each example "
                              "once per replica and cannot equal one core on the global batch; "
                              "check with PER_HOST_V2 (or PER_HOST_V1, PER_SHARD_V1)");
    return 0;
}

struct printer {
    const struct train_opts *o;
    const struct tpu_chip_config *chip;
    const char *model;
    uint64_t rows;
};

static void print_head(const struct printer *p, const struct tpu_equivalence_report *r);

/* A relative figure: 0 as "0", else three digits. */
static void fmt_rel(char *buf, size_t size, double v)
{
    if (v == 0)
        snprintf(buf, size, "0");
    else
        snprintf(buf, size, "%.2e", v);
}

static int print_step(void *ctx, const struct tpu_equivalence_report *so_far,
                      const struct tpu_equivalence_step *st, struct tpu_diag *d)
{
    struct printer *p = ctx;
    (void)d;
    if (!p->rows)
        print_head(p, so_far);
    if (p->o->json) {
        printf("%s\n    {\"step\": %llu, \"loss_sharded\": %.9g, \"loss_single\": %.9g, "
               "\"loss_abs\": %.9g, \"loss_rel\": %.9g, \"param_abs\": %.9g, \"param_rel\": "
               "%.9g, \"worst_param\": ", p->rows ? "," : "", (unsigned long long)st->step,
               (double)st->loss_sharded, (double)st->loss_single, st->loss_abs, st->loss_rel,
               st->param_abs, st->param_rel);
        tpu__cli_json_string(stdout, st->worst_param);
        printf(", \"worst_index\": %llu, \"worst_replica\": %u, \"worst_sharded\": %.9g, \"worst_single\": %.9g, "
               "\"step_seconds_sharded\": %.9g, \"step_seconds_single\": %.9g, \"within\": "
               "%s}", (unsigned long long)st->worst_index, st->worst_replica,
               (double)st->worst_sharded,
               (double)st->worst_single, st->step_seconds_sharded, st->step_seconds_single,
               st->within ? "true" : "false");
    } else {
        char lr[32], pr[32], worst[112];
        fmt_rel(lr, sizeof lr, st->loss_rel);
        fmt_rel(pr, sizeof pr, st->param_rel);
        /* the replica whose copy differs most, when there are several (every replica's copy
         * is compared) */
        if (st->worst_param[0] && so_far->n_replicas > 1)
            snprintf(worst, sizeof worst, "%s[%llu] replica %u", st->worst_param,
                     (unsigned long long)st->worst_index, st->worst_replica);
        else if (st->worst_param[0])
            snprintf(worst, sizeof worst, "%s[%llu]", st->worst_param,
                     (unsigned long long)st->worst_index);
        else
            snprintf(worst, sizeof worst, "-");
        printf("%6llu  %12.7f  %12.7f  %9.2e  %9s  %9.2e  %9s  %-24s %s\n",
               (unsigned long long)st->step, (double)st->loss_sharded,
               (double)st->loss_single, st->loss_abs, lr, st->param_abs, pr, worst,
               st->within ? "ok" : "OUTSIDE");
    }
    fflush(stdout);
    p->rows++;
    return 0;
}

static void print_head(const struct printer *p, const struct tpu_equivalence_report *r)
{
    const struct train_opts *o = p->o;
    const struct tpu_equivalence_bound *b = &r->bound;
    const uint32_t R = r->n_replicas, P = r->cores_per_replica;
    if (o->json) {
        printf("{\"chip\": ");
        tpu__cli_json_string(stdout, p->chip->name);
        printf(", \"model\": ");
        tpu__cli_json_string(stdout, p->model);
        printf(", \"cores\": %u, \"replicas\": %u, \"cores_per_replica\": %u, \"hosts\": %u, "
               "\"global_batch\": %u, \"params\": %u, \"param_values\": %llu, \"mode\": \"%s\","
               "\n  \"bound\": {\"exact\": %s, \"loss_rel\": %.9g, \"loss_rel_later\": %.9g, "
               "\"param_rel\": %.9g, \"why\": ", r->n_cores, R, P,
               o->rc.num_hosts ? o->rc.num_hosts : 1, o->rc.train_batch_size, r->n_params,
               (unsigned long long)r->n_param_values,
               o->equivalence_free_running ? "free-running" : "lockstep",
               b->exact ? "true" : "false", b->loss_rel, b->loss_rel_later, b->param_rel);
        tpu__cli_json_string(stdout, b->why);
        printf("},\n  \"steps\": [");
        return;
    }
    printf("tpusim train --check-equivalence: %s on %s, %u core%s (%u replica%s x %u core%s) "
           "against 1 core, global batch %u\n", p->model, p->chip->name, r->n_cores,
           r->n_cores == 1 ? "" : "s", R, R == 1 ? "" : "s", P, P == 1 ? "" : "s",
           o->rc.train_batch_size);
    if (b->exact)
        printf("bound: bit for bit (%s)\n", b->why);
    else
        printf("bound: %s; loss within a relative %.3g%s, every param within %.3g of its "
               "largest value\n  why: %s\n", o->equivalence_free_running
               ? "free-running (each run goes on from its own params)"
               : "lockstep (each step starts both runs from the one-core params)", b->loss_rel,
               b->loss_rel_later != b->loss_rel ? " at step 1 (2^-12 after)" : "",
               b->param_rel, b->why);
    printf("%6s  %12s  %12s  %9s  %9s  %9s  %9s  %-24s %s\n", "step", "loss sharded",
           "loss 1 core", "|dloss|", "rel", "max|dw|", "rel", "worst param[index]", "verdict");
}

struct check {
    struct tpu_net *net;
    struct tpu_dataset train, test;
    struct tpu_dataset_input in;
    bool in_init;
};

static void check_free(struct check *c)
{
    if (c->in_init)
        tpu_dataset_input_free(&c->in);
    tpu_net_destroy(&c->net);
    tpu_dataset_free(&c->train);
    tpu_dataset_free(&c->test);
}

/* The model, the data and the devices' settings, as cli_train.c's setup makes them. */
static int prepare(struct train_opts *o, struct check *c, struct tpu_equivalence_settings *s,
                   struct tpu_chip_config *chip)
{
    const char *cmd = o->cmd;
    struct tpu_diag d = {0};
    int rc = check_options(o);
    if (rc)
        return rc;
    if (tpu_config_load(o->chip, chip, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    if (!(chip->mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16)))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "chip '%s' cannot train: its matrix unit "
                              "multiplies int8 only; check on a chip whose matrix unit takes "
                              "bf16 (tpu-v2 and later, or tiny)", chip->name);
    /* the sharding rules before the data is read (exit 2, as every option error) */
    if ((rc = tpu__cli_train_check_plan(o, chip, false, true)))
        return rc;
    if (o->model_file[0] && (rc = tpu__cli_train_load_net(o, &c->net)))
        return rc;
    if ((rc = tpu__cli_train_load_data(o, true, &c->train, &c->test)))
        return rc;
    rc = c->net ? tpu__cli_train_fit_net(o, c->net, true, &c->train, &c->test)
                : tpu__cli_train_fit_mlp(o, true, &c->train, &c->test);
    if (rc)
        return rc;
    memset(s, 0, sizeof *s);
    tpu__cli_train_device_settings(o, chip, &s->device);
    s->run = o->rc;
    if (c->net) {
        if (tpu_net_model(&s->model, c->net, &o->tspec, &d))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--model '%s': %s", o->model_file, d.msg);
    } else {
        struct tpu_mlp_spec check = o->spec;
        check.batch_per_replica = check.global_batch = 1;
        struct tpu_mlp_program mp;
        if (tpu_mlp_build(&check, TPU_MLP_TRAIN, &mp, &d))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s", d.msg);
        tpu_mlp_program_free(&mp);
        tpu_mlp_model(&s->model, &o->spec);
    }
    tpu_dataset_input_init(&c->in, &c->train, o->rc.seed);
    c->in_init = true;
    s->input = &c->in.input;
    s->steps = o->check_equivalence;
    s->free_running = o->equivalence_free_running;
    return 0;
}

int tpu__cli_train_check_equivalence(struct train_opts *o)
{
    struct check c;
    memset(&c, 0, sizeof c);
    struct tpu_equivalence_settings s;
    struct tpu_chip_config chip;
    int rc = prepare(o, &c, &s, &chip);
    if (rc) {
        check_free(&c);
        return rc;
    }
    char model[400];
    tpu__cli_train_describe(o, c.net, model, sizeof model);
    struct tpu_layer_info li;
    for (uint32_t i = 0; c.net && !o->json && i < tpu_net_n_layers(c.net); i++)
        if (!tpu_net_layer(c.net, i, &li) && li.kind == TPU_LAYER_BATCH_NORM) {
            fprintf(stderr, "tpusim train: warning: layer '%s' is batch norm, which reads the "
                    "batch's statistics: %s; the bound assumes examples computed "
                    "independently\n", li.name, li.desc.cross_replica
                    ? "cross-replica, they carry the sums' rounding into every example's "
                      "forward values, and one-pass bf16 matmuls may round them apart (give "
                      "--passes 6 to see rounding only)"
                    : "per replica, it is another model than one core on the global batch");
            break;
        }
    struct tpu_equivalence_report rep;
    struct printer pr = {.o = o, .chip = &chip, .model = model};
    s.on_step = print_step;
    s.ctx = &pr;
    struct tpu_diag d = {0};
    rc = tpu_equivalence_check(&s, &rep, &d);
    check_free(&c);
    if (rc) {
        if (pr.rows && o->json)
            printf("]}\n");
        /* a setting the check refuses before its first step is an option error (exit 2);
         * exit 1 is a step outside the bound or a failure while running */
        const bool usage = !pr.rows && (rc == TPU_EINVAL || rc == TPU_EUNSUPPORTED);
        return tpu__cli_error(o->cmd, usage ? TPU_CLI_USAGE : TPU_CLI_FAIL, "%s", d.msg);
    }
    const bool ok = rep.steps_outside == 0;
    if (o->json) {
        printf("\n  ],\n  \"steps_outside\": %llu, \"max_loss_rel\": %.9g, \"max_param_rel\": "
               "%.9g, \"within\": %s}\n", (unsigned long long)rep.steps_outside, rep.max_loss_rel, rep.worst.param_rel,
               ok ? "true" : "false");
    } else if (ok) {
        printf("verdict: all %llu steps within the bound (%u params, %llu values compared per "
               "step); largest param difference %.3g of its largest value%s%s at step %llu, "
               "largest loss difference %.3g\n", (unsigned long long)rep.steps, rep.n_params,
               (unsigned long long)rep.n_param_values, rep.worst.param_rel,
               rep.worst.worst_param[0] ? " in " : "", rep.worst.worst_param,
               (unsigned long long)rep.worst.step, rep.max_loss_rel);
    } else {
        printf("verdict: %llu of %llu steps OUTSIDE the bound; the sharded run does not compute "
               "the one-core model (largest param difference %.3g of its largest value in %s at "
               "step %llu, largest loss difference %.3g); if that param's exact gradient is 0 "
               "(a bias before batch norm), Adam moves it by the sign of rounding alone: give "
               "its layer use_bias false\n",
               (unsigned long long)rep.steps_outside, (unsigned long long)rep.steps,
               rep.worst.param_rel, rep.worst.worst_param, (unsigned long long)rep.worst.step,
               rep.max_loss_rel);
    }
    return ok ? TPU_CLI_OK : TPU_CLI_FAIL;
}
