/* tpu__cli_train_check_config: a run config file (--config's JSON) checked as the command
 * line checks it, without running anything. Each case writes a real file; the errors the
 * function prints go to stderr. Under ASan, a value kept as a pointer into the freed JSON or
 * a leak fails the test. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

struct fixture {
    char dir[64];
    char path[128];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    strcpy(f->dir, "/tmp/tpusim-cli-config-XXXXXX");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    snprintf(f->path, sizeof f->path, "%s/run.json", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* Writes text as the config file and checks it for cmd. */
static int check(struct fixture *f, const char *cmd, const char *text)
{
    FILE *fp = fopen(f->path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    assert_int_equal(fclose(fp), 0);
    return tpu__cli_train_check_config(cmd, f->path);
}

static void valid_configs(void **state)
{
    struct fixture *f = *state;
    /* several string options: each is copied out of the JSON before it is freed */
    assert_int_equal(check(f, "train", "{\"chip\": \"tiny\", \"data\": \"/nonexistent\", "
                                       "\"trace\": \"t.json\", \"model_dir\": \"m\", "
                                       "\"layers\": \"8,4\", \"optimizer\": \"sgd\", "
                                       "\"steps\": 3, \"json\": true, \"no_eval\": false}"),
                     TPU_CLI_OK);
    assert_int_equal(check(f, "evaluate", "{\"model_dir\": \"m\", \"steps\": 2, "
                                          "\"eval_batch_size\": 100}"), TPU_CLI_OK);
    assert_int_equal(check(f, "predict", "{\"model_dir\": \"m\", \"limit\": 10, "
                                         "\"output\": \"l.npy\"}"), TPU_CLI_OK);
}

static void invalid_configs(void **state)
{
    struct fixture *f = *state;
    /* an option of another subcommand */
    assert_int_equal(check(f, "evaluate", "{\"model_dir\": \"m\", \"epochs\": 1}"),
                     TPU_CLI_USAGE);
    assert_int_equal(check(f, "predict", "{\"model_dir\": \"m\", \"steps\": 1}"), TPU_CLI_USAGE);
    /* what the command line would refuse too */
    assert_int_equal(check(f, "evaluate", "{\"steps\": 1}"), TPU_CLI_USAGE); /* no model_dir */
    assert_int_equal(check(f, "train", "{\"steps\": 1, \"epochs\": 2}"), TPU_CLI_USAGE);
    assert_int_equal(check(f, "train", "{\"json\": 1}"), TPU_CLI_USAGE);
    assert_int_equal(check(f, "train", "{\"steps\": true}"), TPU_CLI_USAGE);
    assert_int_equal(check(f, "train", "{\"config\": \"other.json\"}"), TPU_CLI_USAGE);
    assert_int_equal(check(f, "train", "{\"colour\": \"blue\"}"), TPU_CLI_USAGE);
    assert_int_equal(check(f, "train", "{\"steps\": [1]}"), TPU_CLI_USAGE);
    assert_int_equal(check(f, "train", "{\"steps\": 1,}"), TPU_CLI_USAGE);
    assert_int_equal(check(f, "train", "[1]"), TPU_CLI_USAGE);
    assert_int_equal(check(f, "train", "{\"chip\": \"\"}"), TPU_CLI_USAGE);
    /* a model_dir longer than the runtime's 511 characters */
    char text[700];
    snprintf(text, sizeof text, "{\"model_dir\": \"%0600d\"}", 0);
    assert_int_equal(check(f, "train", text), TPU_CLI_USAGE);
    snprintf(text, sizeof text, "{\"model_dir\": \"%0511d\"}", 0);
    assert_int_equal(check(f, "train", text), TPU_CLI_OK);
}

static void bad_arguments(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(tpu__cli_train_check_config("gemm", f->path), TPU_CLI_USAGE);
    assert_int_equal(tpu__cli_train_check_config(NULL, f->path), TPU_CLI_USAGE);
    assert_int_equal(tpu__cli_train_check_config("train", NULL), TPU_CLI_USAGE);
    assert_int_equal(tpu__cli_train_check_config("train", f->dir), TPU_CLI_USAGE); /* a dir */
    assert_int_equal(tpu__cli_train_check_config("train", "/nonexistent/run.json"),
                     TPU_CLI_USAGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(valid_configs, setup, teardown),
        cmocka_unit_test_setup_teardown(invalid_configs, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_arguments, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
