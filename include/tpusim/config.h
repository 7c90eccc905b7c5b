/* Chip configuration: what a simulated chip is made of, read from JSON data (configs/).
 *
 * A configuration is plain data; nothing in the simulator is sized by a #define. Presets
 * (tpu-v1 .. tpu-v4, tiny) are compiled into the library from the JSON files in configs/ so that
 * `--chip tpu-v4` works from any directory; a user's own file is read with
 * tpu_config_load_file(). Every loader validates the whole document: an unknown field, a
 * wrong type, a zero or negative size, or values that contradict each other are rejected with
 * one sentence naming the file, the field (or line and column for a syntax error), the rule
 * and the fix. Nothing is allocated on failure. */
#ifndef TPUSIM_CONFIG_H
#define TPUSIM_CONFIG_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

#include "tpusim/dtype.h"
#include "tpusim/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_CONFIG_NAME_MAX 64
#define TPU_CONFIG_TEXT_MAX 512
#define TPU_CONFIG_MAX_SOURCES 8

/* Interconnect topology between chips (ICI). */
enum tpu_topology {
    TPU_TOPO_NONE = 0, /* no inter-chip links (tpu-v1) */
    TPU_TOPO_RING,
    TPU_TOPO_TORUS_2D,
    TPU_TOPO_TORUS_3D,
};


struct tpu_chip_config {
    char name[TPU_CONFIG_NAME_MAX];          /* "tpu-v4" */
    char description[TPU_CONFIG_TEXT_MAX];   /* one line */
    char sources[TPU_CONFIG_MAX_SOURCES][TPU_CONFIG_TEXT_MAX]; /* citations, as in the file */
    uint32_t n_sources;

    uint32_t chips_per_host;   /* chips one host drives over its host links */
    uint32_t cores_per_chip;   /* TensorCores per chip */
    double clock_mhz;          /* core clock */

    /* matrix units, per core */
    uint32_t mxu_per_core;
    uint32_t mxu_rows;         /* R: rows of the weight-stationary array (the K dimension) */
    uint32_t mxu_cols;         /* C: columns (the N dimension) */
    uint32_t mxu_dtypes;       /* TPU_DTYPE_BIT(TPU_BF16) | ... (dtype.h) */
    uint32_t accumulator_rows; /* rows of C-wide fp32/int32 accumulators per MXU: the
                                  longest M stream a weight tile can take before the
                                  accumulators must be drained */

    /* vector unit, per core */
    uint32_t vector_sublanes;
    uint32_t vector_lanes;
    uint32_t vector_alus_per_lane;

    /* memory */
    uint64_t hbm_bytes;              /* off-chip memory per chip */
    double hbm_gbytes_per_s;         /* its bandwidth, per chip, 1e9 bytes/s */
    uint64_t vmem_bytes;             /* on-chip memory per core */
    uint32_t dma_engines;            /* per core */

    /* host link (PCIe), per chip */
    double host_link_gbytes_per_s;   /* each direction */
    double host_link_latency_ns;
    uint32_t infeed_queue_depth;     /* entries per core */
    uint32_t outfeed_queue_depth;

    /* inter-chip interconnect */
    enum tpu_topology ici_topology;
    uint32_t ici_links_per_chip;
    double ici_gbytes_per_s_per_link; /* one direction */
    double ici_latency_ns;
};

/* Derived figures, computed from a configuration (tpu_config_derive). */
struct tpu_chip_derived {
    double peak_macs_per_s;         /* chip: cores * mxus * R * C * clock */
    double peak_flops_per_s;        /* 2 * peak_macs_per_s */
    double hbm_bytes_per_s;
    double ridge_macs_per_byte;     /* peak MAC/s / HBM bytes/s: the roofline's ridge point */
    double host_link_bytes_per_s;
    uint32_t total_mxus;            /* per chip */
};

/* Loads and validates a preset by name ("tpu-v4"). On failure returns TPU_ENOTFOUND (unknown
 * name; the message lists the presets) or TPU_ECONFIG. */
int tpu_config_load_preset(const char *name, struct tpu_chip_config *out, struct tpu_diag *d);

/* Loads and validates a JSON file. TPU_EIO if unreadable, TPU_EPARSE for a syntax error
 * (message gives line and column), TPU_ECONFIG for a semantic error (message names the field). */
int tpu_config_load_file(const char *path, struct tpu_chip_config *out, struct tpu_diag *d);

/* Parses and validates JSON text; `origin` names it in messages (a file name). */
int tpu_config_load_string(const char *json, const char *origin, struct tpu_chip_config *out,
                           struct tpu_diag *d);

/* `name_or_path`: a preset name if one matches, otherwise a file path. */
int tpu_config_load(const char *name_or_path, struct tpu_chip_config *out, struct tpu_diag *d);

/* Checks the cross-field rules of an already filled struct (also run by every loader). */
int tpu_config_validate(const struct tpu_chip_config *cfg, const char *origin,
                        struct tpu_diag *d);

void tpu_config_derive(const struct tpu_chip_config *cfg, struct tpu_chip_derived *out);

/* NULL-terminated list of preset names, static storage. */
const char *const *tpu_config_preset_names(void);

/* The preset's JSON text, or NULL. Static storage. */
const char *tpu_config_preset_json(const char *name);

const char *tpu_topology_name(enum tpu_topology t);

#ifdef __cplusplus
}
#endif
#endif
