/* The option tables of the command line (cli/options.h), walked: every option of every
 * subcommand is in its --help, and an unknown option, a missing value, a bad number or word
 * and an option of another subcommand each get the one wording, through the subcommand's
 * real entry point (tpu__cli_gemm, tpu__cli_train, ...), so a parser that bypassed the
 * table would fail here. The errors are read back from stderr. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "options.h"

/* The entry point of the subcommand a table belongs to. */
static int (*entry(const struct tpu__cli_table_ref *ref))(int, char **)
{
    const char *w = ref->words[0];
    return !strcmp(w, "gemm") ? tpu__cli_gemm : !strcmp(w, "program") ? tpu__cli_program
           : !strcmp(w, "config") ? tpu__cli_config
           : !strcmp(w, "model")  ? tpu__cli_model
           : !strcmp(w, "shard")  ? tpu__cli_shard
           : !strcmp(w, "bench")  ? tpu__cli_bench
                                  : tpu__cli_train;
}

/* Runs the subcommand of ref with extra arguments; returns its exit code, and what it
 * printed on file descriptor `fd` (1 or 2) in out (cap bytes). */
static int run_fd(const struct tpu__cli_table_ref *ref, const char *a1, const char *a2, int fd_no,
                  char *out, size_t cap)
{
    char *argv[6];
    int argc = 0;
    argv[argc++] = (char *)ref->words[0];
    if (ref->words[1])
        argv[argc++] = (char *)ref->words[1];
    if (a1)
        argv[argc++] = (char *)a1;
    if (a2)
        argv[argc++] = (char *)a2;
    argv[argc] = NULL;
    char path[] = "/tmp/tpusim-cli-options-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stdout);
    fflush(stderr);
    int saved = dup(fd_no);
    assert_true(saved >= 0);
    assert_true(dup2(fd, fd_no) >= 0);
    int rc = entry(ref)(argc, argv);
    fflush(stdout);
    fflush(stderr);
    assert_true(dup2(saved, fd_no) >= 0);
    close(saved);
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return rc;
}

/* run_fd on stderr: the errors. */
static int run(const struct tpu__cli_table_ref *ref, const char *a1, const char *a2, char *err,
               size_t cap)
{
    return run_fd(ref, a1, a2, 2, err, cap);
}

static const char *cmd_words(const struct tpu__cli_table_ref *ref, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s", ref->words[0], ref->words[1] ? " " : "",
             ref->words[1] ? ref->words[1] : "");
    return buf;
}

static void every_option_is_in_help(void **state)
{
    (void)state;
    size_t n_tables;
    const struct tpu__cli_table_ref *refs = tpu__cli_tables(&n_tables);
    assert_true(n_tables >= 9);
    for (size_t t = 0; t < n_tables; t++) {
        const struct tpu__cli_opts *tab = refs[t].table;
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        assert_non_null(f);
        tpu__cli_opts_help(tab, f);
        fclose(f);
        char needle[128], words[64];
        for (size_t i = 0; i < tab->n_opts; i++) {
            const struct tpu__cli_opt *o = &tab->opts[i];
            /* at the start of a help line: "  --chip" or "  -m, --chip" */
            snprintf(needle, sizeof needle, "\n  %s%s%s", o->short_name ? o->short_name : "",
                     o->short_name ? ", " : "", o->name);
            if (!strstr(text, needle))
                fail_msg("tpusim %s --help: no line for %s", cmd_words(&refs[t], words,
                         sizeof words), o->name);
            assert_non_null(o->help);
            if (o->group) {
                snprintf(needle, sizeof needle, "\n%s\n", o->group);
                assert_non_null(strstr(text, needle));
            }
        }
        assert_non_null(strstr(text, "\n  -h, --help "));
        /* and the subcommand's real --help prints the table's text */
        static char printed[65536];
        assert_int_equal(run_fd(&refs[t], "--help", NULL, 1, printed, sizeof printed), 0);
        if (!strstr(printed, text))
            fail_msg("tpusim %s --help does not print its table's options",
                     cmd_words(&refs[t], words, sizeof words));
        free(text);
    }
}

static void unknown_option_has_one_wording(void **state)
{
    (void)state;
    size_t n_tables;
    const struct tpu__cli_table_ref *refs = tpu__cli_tables(&n_tables);
    char err[1024], want[512];
    for (size_t t = 0; t < n_tables; t++) {
        assert_int_equal(run(&refs[t], "--no-such-option", NULL, err, sizeof err),
                         TPU_CLI_USAGE);
        snprintf(want, sizeof want, "tpusim %s: error: unknown option '--no-such-option'; run "
                 "'tpusim %s --help' for the list\n", refs[t].cmd, refs[t].cmd);
        assert_string_equal(err, want);
    }
}

/* Whether option o belongs to the subcommand of ref. */
static bool in_scope(const struct tpu__cli_table_ref *ref, const struct tpu__cli_opt *o)
{
    return !o->scope || !ref->scope || (o->scope & ref->scope);
}

static void missing_values_have_one_wording(void **state)
{
    (void)state;
    size_t n_tables;
    const struct tpu__cli_table_ref *refs = tpu__cli_tables(&n_tables);
    char err[1024], want[512];
    for (size_t t = 0; t < n_tables; t++) {
        const struct tpu__cli_opts *tab = refs[t].table;
        for (size_t i = 0; i < tab->n_opts; i++) {
            const struct tpu__cli_opt *o = &tab->opts[i];
            if (o->kind == TPU__CLI_FLAG)
                continue;
            assert_int_equal(run(&refs[t], o->name, NULL, err, sizeof err), TPU_CLI_USAGE);
            snprintf(want, sizeof want, "tpusim %s: error: option '%s' needs a value: %s ",
                     refs[t].cmd, o->name, o->name);
            if (strncmp(err, want, strlen(want)) != 0)
                fail_msg("%s: got %s", o->name, err);
        }
    }
}

static void bad_values_have_one_wording(void **state)
{
    (void)state;
    size_t n_tables;
    const struct tpu__cli_table_ref *refs = tpu__cli_tables(&n_tables);
    char err[1024], want[512];
    size_t n_checked = 0;
    for (size_t t = 0; t < n_tables; t++) {
        const struct tpu__cli_opts *tab = refs[t].table;
        for (size_t i = 0; i < tab->n_opts; i++) {
            const struct tpu__cli_opt *o = &tab->opts[i];
            const bool few = o->kind == TPU__CLI_ENUM || (o->kind == TPU__CLI_U64 && o->n_only);
            const char *rule = few                          ? "is not one of"
                               : o->kind == TPU__CLI_U64    ? "is not a whole number from"
                               : o->kind == TPU__CLI_DOUBLE ? "is not a number"
                                                            : NULL;
            if (!rule || !in_scope(&refs[t], o))
                continue;
            assert_int_equal(run(&refs[t], o->name, "x1", err, sizeof err), TPU_CLI_USAGE);
            snprintf(want, sizeof want, "tpusim %s: error: %s 'x1' %s ", refs[t].cmd, o->name,
                     rule);
            if (strncmp(err, want, strlen(want)) != 0)
                fail_msg("%s: got %s", o->name, err);
            /* a range gets an example; a list of values is its own example */
            snprintf(want, sizeof want, "; give e.g. %s ", o->name);
            if ((o->kind == TPU__CLI_U64 && !few) || o->kind == TPU__CLI_DOUBLE)
                assert_non_null(strstr(err, want));
            else
                assert_null(strstr(err, "give e.g."));
            n_checked++;
        }
    }
    assert_true(n_checked > 30);
}

static void options_of_other_subcommands_have_one_wording(void **state)
{
    (void)state;
    size_t n_tables;
    const struct tpu__cli_table_ref *refs = tpu__cli_tables(&n_tables);
    char err[1024], want[512];
    size_t n_checked = 0;
    for (size_t t = 0; t < n_tables; t++) {
        const struct tpu__cli_opts *tab = refs[t].table;
        for (size_t i = 0; i < tab->n_opts; i++) {
            const struct tpu__cli_opt *o = &tab->opts[i];
            if (in_scope(&refs[t], o))
                continue;
            /* a value that passes any check of its own: the scope is what fails */
            const char *v = o->kind == TPU__CLI_FLAG ? NULL : "1";
            assert_int_equal(run(&refs[t], o->name, v, err, sizeof err), TPU_CLI_USAGE);
            snprintf(want, sizeof want, "tpusim %s: error: %s belongs to ", refs[t].cmd,
                     o->name);
            if (strncmp(err, want, strlen(want)) != 0)
                fail_msg("%s: got %s", o->name, err);
            assert_non_null(strstr(err, "); leave it out\n"));
            n_checked++;
        }
    }
    assert_true(n_checked >= 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_option_is_in_help),
        cmocka_unit_test(unknown_option_has_one_wording),
        cmocka_unit_test(missing_values_have_one_wording),
        cmocka_unit_test(bad_values_have_one_wording),
        cmocka_unit_test(options_of_other_subcommands_have_one_wording),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
