/* The RTL tests' provider: one Verilator MXU model per MXU of the chip cfg describes; fails
 * the test (with the library's message) when it cannot be made. Include after <cmocka.h>. */
#ifndef TPUSIM_TESTS_RTL_HELPERS_H
#define TPUSIM_TESTS_RTL_HELPERS_H

#include "mxu_rtl_provider.h"
#include "tpusim/config.h"

static inline struct tpu_mxu_rtl_provider *make_provider(const struct tpu_chip_config *cfg)
{
    struct tpu_mxu_rtl_provider *p = NULL;
    struct tpu_diag d = {0};
    uint32_t units = cfg->chips_per_host * cfg->cores_per_chip * cfg->mxu_per_core;
    if (tpu_mxu_rtl_provider_create(cfg->mxu_rows, cfg->mxu_cols, units, &p, &d) != 0)
        fail_msg("provider: %s", d.msg);
    return p;
}

#endif
