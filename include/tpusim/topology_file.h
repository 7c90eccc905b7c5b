/* SCALE-Sim topology files: the CSV layer tables that `tpusim gemm --topology` reads.
 *
 * Two formats, told apart by their header line (SCALE-Sim itself is told by a command-line
 * switch, -i gemm, and skips the first line unread):
 *
 *   GEMM ("M, N, K") format, SCALE-Sim's topologies/GEMM_mnk/ files:
 *       Layer, M, N, K,
 *       fc1, 128, 256, 784,
 *     Y[M][N] = A[M][K] * B[K][N] per row, as in tpusim/mxu.h and tpusim/scalesim.h.
 *
 *   Convolution format, SCALE-Sim's topologies/conv_nets/ files:
 *       Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels,
 *       Num Filter, Strides,
 *       Conv1, 224, 224, 11, 11, 3, 96, 4,
 *     (or "Stride height, Stride width" in place of "Strides", as SCALE-Sim's own
 *     write_topo_file() writes it). Each layer becomes the GEMM SCALE-Sim's operand matrices
 *     compute (scalesim/compute/operand_matrix.py), with its ofmap size
 *     (topology_utils.topo_calc_hyperparams()): Oh = ceil((Ih - Fh) / stride_h) + 1 by Ow
 *     likewise -- no padding, but a last window that hangs over the edge still counts, so
 *     224 x 224 with an 11 x 11 filter at stride 4 gives 55 x 55 -- and
 *       M = Oh * Ow (ofmap pixels per filter), K = Fh * Fw * C (window), N = Num Filter.
 *     As in SCALE-Sim (topology_utils.load_arrays_conv()), a layer whose name contains "DP"
 *     is depth-wise: it becomes C layers named "<name>Channel_<i>", each with 1 channel.
 *
 * Both: fields are split at commas and trimmed of spaces and tabs; one or more trailing
 * empty fields (the customary trailing comma) are dropped; a field that starts with '#'
 * begins a comment running to the end of the line (as in SCALE-Sim's mobilnet_paper.csv,
 * "Conv2_dw, 112, 112, 3, 3, 1, 1, 1,#dw"), so a line starting with '#' is all comment;
 * blank lines are ignored;
 * CRLF line ends and a UTF-8 byte-order mark are accepted. A last column "Sparsity" (an N:M
 * ratio, SCALE-Sim's sparse extension) may be present or absent; only dense ratios (N == M,
 * e.g. 1:1) are accepted, since the serial-fold model times dense layers. Dimensions are whole
 * numbers >= 1; M * N * K must fit in 64 bits. Layer names need not be unique: SCALE-Sim
 * identifies layers by position (LayerID), and so do reports made from this table.
 *
 * Where this reader is kinder than SCALE-Sim's, it accepts files SCALE-Sim misreads: SCALE-Sim
 * drops the last field of every row, so a row without a trailing comma loses its K (or its
 * stride) there; here the trailing comma is optional. A file whose first line is a layer is
 * rejected here (SCALE-Sim would silently skip that layer as a header). */
#ifndef TPUSIM_TOPOLOGY_FILE_H
#define TPUSIM_TOPOLOGY_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "tpusim/error.h"

enum tpu_topology_file_format {
    TPU_TOPOLOGY_FILE_GEMM = 0, /* Layer, M, N, K */
    TPU_TOPOLOGY_FILE_CONV = 1, /* Layer name, IFMAP Height, ..., Strides */
};

/* A convolution layer as the file gives it, with the ofmap size derived from it. */
struct tpu_topology_file_conv {
    uint64_t ifmap_h, ifmap_w;
    uint64_t filter_h, filter_w;
    uint64_t channels;    /* 1 for each layer of an expanded depth-wise ("DP") row */
    uint64_t num_filters;
    uint64_t stride_h, stride_w;
    uint64_t ofmap_h, ofmap_w;
};

struct tpu_topology_file_layer {
    char *name;       /* NUL-terminated, owned by the topology */
    uint64_t m, n, k; /* the GEMM: Y[M][N] = A[M][K] * B[K][N] */
    uint32_t line;    /* 1-based line of the file this layer came from */
    struct tpu_topology_file_conv conv; /* the convolution (conv files only; all 0 for GEMM) */
};

struct tpu_topology_file {
    enum tpu_topology_file_format format;
    size_t n_layers;                    /* >= 1 after a successful read */
    struct tpu_topology_file_layer *layers; /* [n_layers], owned by the topology */
};

/* Most layers one table may hold (after depth-wise expansion). */
#define TPU_TOPOLOGY_FILE_MAX_LAYERS ((size_t)1 << 20)
/* Largest file read. */
#define TPU_TOPOLOGY_FILE_MAX_BYTES ((size_t)64 << 20)

/* Reads the topology file at `path` into *out. Returns 0; or TPU_EIO (cannot open or read
 * the file), TPU_EPARSE (not a topology, or a malformed row), TPU_ERANGE (a value or product
 * too large, too many layers, file too large), TPU_EUNSUPPORTED (a sparse N:M ratio) or
 * TPU_ENOMEM, with a sentence in d (may be NULL) of the form "<path>:<line>: <problem>".
 * On failure *out is untouched and nothing needs freeing; on success the caller owns *out
 * and releases it with tpu_topology_file_free(). */
int tpu_topology_file_read(const char *path, struct tpu_topology_file *out, struct tpu_diag *d);

/* The same for text already in memory: `text` of `len` bytes (need not be NUL-terminated);
 * `source` names it in messages, as the path does for tpu_topology_file_read(). */
int tpu_topology_file_parse(const char *text, size_t len, const char *source,
                        struct tpu_topology_file *out, struct tpu_diag *d);

/* Frees what a successful read allocated and empties *t. Accepts NULL and an empty topology. */
void tpu_topology_file_free(struct tpu_topology_file *t);

#endif
