/* Fuzz target: a device program's text form (`tpusim program check|run FILE`), parsed by
 * tpu_program_parse() and verified against the CLI's default chip (tiny) as the CLI does.
 * Every program that parses must also print back canonically: print -> parse -> print gives
 * the same bytes (the text form's contract, sim/program/program_parse.c). */
#include "fuzz_util.h"
#include "tpusim/config.h"
#include "tpusim/program.h"

static void check_round_trip(const struct tpu_program *p)
{
    char *first = NULL, *second = NULL;
    struct tpu_program *q = NULL;
    struct tpu_diag d = {0};
    if (tpu_program_to_string(p, &first) != 0)
        fuzz_die("tpu_program_to_string of", "a parsed program");
    int rc = tpu_program_parse(first, "<printed>", &q, &d);
    if (rc != 0) {
        fprintf(stderr, "fuzz harness: the printed program does not parse back: %s\n--- "
                "printed:\n%s", d.msg, first);
        abort();
    }
    if (tpu_program_to_string(q, &second) != 0)
        fuzz_die("tpu_program_to_string of", "a reparsed program");
    if (strcmp(first, second) != 0) {
        fprintf(stderr, "fuzz harness: print -> parse -> print changed the text\n--- first:\n"
                "%s--- second:\n%s", first, second);
        abort();
    }
    free(first);
    free(second);
    tpu_program_destroy(&q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tpu_chip_config chip;
    struct tpu_diag d = {0};
    if (tpu_config_load_preset("tiny", &chip, &d) != 0)
        fuzz_die("loading the chip preset", "tiny");
    char *text = fuzz_string(data, size);
    struct tpu_program *p = NULL;
    int rc = tpu_program_parse(text, "fuzz.tpuprog", &p, &d);
    fuzz_check_diag("tpu_program_parse", rc, &d);
    free(text);
    if (rc == 0) {
        rc = tpu_program_verify(p, &chip, &d);
        fuzz_check_diag("tpu_program_verify", rc, &d);
        check_round_trip(p);
    }
    tpu_program_destroy(&p);
    return 0;
}
