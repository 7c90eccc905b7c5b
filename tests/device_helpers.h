/* Helpers the device-level tests share: the tiny preset, a program parsed from text, a
 * device opened from settings and a program loaded on it; each fails the test (with the
 * library's message) when the library refuses. Include after <cmocka.h>. */
#ifndef TPUSIM_TESTS_DEVICE_HELPERS_H
#define TPUSIM_TESTS_DEVICE_HELPERS_H

#include "tpusim/device.h"
#include "tpusim/program.h"

static inline struct tpu_chip_config tiny(void)
{
    struct tpu_chip_config cfg;
    struct tpu_diag d = {0};
    if (tpu_config_load_preset("tiny", &cfg, &d) != 0)
        fail_msg("%s", d.msg);
    return cfg;
}

static inline struct tpu_program *parse(const char *text)
{
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0};
    if (tpu_program_parse(text, "test", &p, &d) != 0)
        fail_msg("parse: %s", d.msg);
    return p;
}

static inline struct tpu_device *open_settings(const struct tpu_device_settings *s)
{
    struct tpu_device *dev = NULL;
    struct tpu_diag d = {0};
    if (tpu_device_open(s, &dev, &d) != 0)
        fail_msg("open: %s", d.msg);
    return dev;
}

static inline void load(struct tpu_device *dev, const struct tpu_program *p)
{
    struct tpu_diag d = {0};
    if (tpu_device_load(dev, p, &d) != 0)
        fail_msg("load: %s", d.msg);
}

#endif
