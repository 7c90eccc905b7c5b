/* Checkpoints: a run's named 2-D tensors saved as safetensors files in model_dir, written
 * atomically, listed in a small JSON index, and read back with every kind of damage detected
 * and reported instead of loaded.
 *
 * This module stores and verifies tensors; it does not know what they mean. The host runtime
 * decides which buffers to save (weights, optimizer state) and when (loop boundaries).
 *
 * Files in model_dir:
 *   ckpt-<global_step>.safetensors   one checkpoint (step in decimal, no leading zeros)
 *   checkpoint.json                  the index (like TensorFlow's "checkpoint" file):
 *       {"format": "tpusim-checkpoint-index", "version": 1,
 *        "latest": {"path": "ckpt-300.safetensors", "global_step": 300},
 *        "checkpoints": [{"path": "ckpt-200.safetensors", "global_step": 200},
 *                        {"path": "ckpt-300.safetensors", "global_step": 300}]}
 *     Paths are file names relative to model_dir (the directory can be moved). "checkpoints"
 *     lists the kept checkpoints oldest save first; "latest" is its last entry.
 *   *.tmp                            a save in progress (or one a crash interrupted)
 *
 * The safetensors file (Hugging Face's format, readable by its libraries and by any JSON
 * reader): 8 bytes N (unsigned 64-bit little-endian), N bytes of UTF-8 JSON starting with
 * '{' and padded with spaces so that N is a multiple of 8, then the data section. The JSON
 * maps each tensor name to {"dtype": "F32"|"BF16"|"I8"|"I32", "shape": [rows, cols],
 * "data_offsets": [begin, end]}, offsets relative to the start of the data section, end
 * exclusive; the tensors tile the data section exactly (no gaps, no overlaps) and each is
 * row-major, little-endian. Tensors are laid out by element size (4-byte dtypes first, then
 * BF16, then I8), in the caller's order within one size, so every tensor starts aligned to
 * its element size. The key "__metadata__" maps strings to strings.
 *
 * tpusim's extension, inside __metadata__ (other tools ignore metadata):
 *   "tpusim.format"          "tpusim-checkpoint-v1"
 *   "tpusim.global_step"     the global step, decimal
 *   "tpusim.data_crc32"      CRC-32 (zlib's crc32, the ISO-HDLC polynomial Python's
 *                            zlib.crc32 also computes) of the whole data section, as 8
 *                            lowercase hex digits
 *   "tpusim.crc32.<name>"    CRC-32 of tensor <name>'s bytes, same form
 * plus the caller's own entries (e.g. a fingerprint of the run's configuration), whose keys
 * must not start with "tpusim.". The checksums catch bit flips in the data; damage to the
 * JSON header is caught by its syntax and the structural checks (and by the caller's
 * expected names, dtypes and shapes), not by a checksum.
 *
 * Saving (crash safety): the file is written to "<name>.tmp" in model_dir, flushed, fsynced,
 * renamed over its final name, and the directory fsynced; then the index is written the same
 * way. A checkpoint counts once the index names it: a crash at any point leaves the previous
 * index and every checkpoint it names intact. Only after the new index is safely on disk are
 * the checkpoints that fell out of it deleted; with keep_max > 0 that is every
 * ckpt-<step>.safetensors file in model_dir the index does not name (so the leftovers of an
 * earlier crash go too); leftover "*.tmp" files of checkpoints and of the index are always
 * deleted. One process saves into a model_dir at a time (as TensorFlow's chief does).
 *
 * Loading checks, before any caller buffer is written: the header length, the JSON (syntax
 * errors give line and column), the header's structure (dtypes, 2-D shapes, data_offsets
 * against dtype and shape, overlaps, gaps, the file's length), tpusim's metadata, the
 * caller's expected tensor names, dtypes and shapes, and every checksum. Each failure returns
 * a negative code with one sentence in the diag naming the file and the tensor:
 *   TPU_EPARSE        damaged, truncated or overlong file, bad JSON or structure, checksum
 *                     mismatch, or a safetensors file tpusim did not write
 *   TPU_ESHAPE        a tensor missing or extra, or of another dtype or shape, than expected
 *   TPU_EUNSUPPORTED  a later tpusim checkpoint format
 *   TPU_EIO, TPU_ENOMEM  the file system or memory failed
 *
 * All functions are reentrant; none keeps state between calls. */
#ifndef TPUSIM_CHECKPOINT_H
#define TPUSIM_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "tpusim/error.h"
#include "tpusim/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A named 2-D tensor: [rows][cols] row-major elements of `dtype` (bf16 as its 16-bit
 * pattern, tpu_bf16) at `data`. The struct and everything it points to stay the caller's. */
struct tpu_tensor {
    const char *name;         /* non-empty UTF-8, unique in a checkpoint, not "__metadata__" */
    enum tpu_buf_dtype dtype;
    uint32_t rows, cols;      /* both >= 1 */
    void *data;               /* rows * cols * tpu_buf_dtype_bytes(dtype) bytes */
};

/* A __metadata__ entry: UTF-8 strings. */
struct tpu_checkpoint_kv {
    const char *key;
    const char *value;
};

/* The steps of a save, in order, for fault injection. The data file and then the index go
 * through CREATE .. FSYNC_DIR each; DELETE comes before each old file is deleted. */
enum tpu_checkpoint_stage {
    TPU_CHECKPOINT_CREATE = 0, /* before the temporary file is created */
    TPU_CHECKPOINT_WRITE,      /* the header is written and flushed, the rest not yet */
    TPU_CHECKPOINT_FSYNC,      /* everything is written and flushed, not yet fsynced */
    TPU_CHECKPOINT_RENAME,     /* the temporary file is fsynced and closed, not yet renamed */
    TPU_CHECKPOINT_FSYNC_DIR,  /* renamed, the directory not yet fsynced */
    TPU_CHECKPOINT_DELETE,     /* the new index is durable; an old file is about to go */
};

/* What a fault hook tells the save to do at a stage. */
enum tpu_checkpoint_fault_action {
    TPU_CHECKPOINT_PROCEED = 0,
    /* The step fails as if the file system had returned EIO: the save cleans up (removes its
     * temporary file) and returns TPU_EIO. At DELETE, the old file just stays (not fatal). */
    TPU_CHECKPOINT_FAIL = 1,
    /* The save stops at once, cleaning up nothing, and returns TPU_ECANCELED: the files are
     * what a process killed at that point leaves (a temporary file, maybe partial, stays). */
    TPU_CHECKPOINT_CRASH = 2,
};

/* Name of a stage ("create", "write", "fsync", "rename", "fsync_dir", "delete"). */
const char *tpu_checkpoint_stage_name(enum tpu_checkpoint_stage s);

struct tpu_checkpoint_options {
    /* How many checkpoints the index keeps: the latest keep_max saves. 0 keeps all. */
    uint32_t keep_max;
    /* Extra __metadata__ entries; keys unique, not starting with "tpusim.". Borrowed. */
    const struct tpu_checkpoint_kv *meta;
    size_t n_meta;
    /* Fault injection for tests of crash safety (NULL in normal use): called before each
     * stage with the file's final path; returns a tpu_checkpoint_fault_action. */
    int (*fault)(void *fault_ctx, enum tpu_checkpoint_stage stage, const char *path);
    void *fault_ctx;
};

/* keep_max 5 (TensorFlow's max_to_keep), no metadata, no fault hook. */
void tpu_checkpoint_default_options(struct tpu_checkpoint_options *o);

/* Saves tensors[0..n_tensors) as model_dir/ckpt-<global_step>.safetensors (replacing a file
 * of that step), makes it the latest in the index and deletes what keep_max lets go (see
 * above). Creates model_dir and its parents if needed. opts NULL means the defaults. The
 * full path of the new file goes to path_out (NUL-terminated) if path_out is not NULL; it
 * must fit in path_cap bytes or nothing is written (TPU_ERANGE). global_step is at most
 * 2^63 - 1. The tensors' data must not change during the call. Returns 0, or TPU_EINVAL
 * (bad tensors, names or metadata), TPU_EPARSE (the existing index is damaged: nothing is
 * written), TPU_EIO, TPU_ENOMEM, or TPU_ECANCELED (a fault hook's simulated crash). */
int tpu_checkpoint_save(const char *model_dir, uint64_t global_step,
                        const struct tpu_tensor *tensors, size_t n_tensors,
                        const struct tpu_checkpoint_options *opts, char *path_out,
                        size_t path_cap, struct tpu_diag *d);

/* The latest checkpoint in model_dir: its global step (if step is not NULL) and full path
 * (if path is not NULL; must fit in cap bytes, else TPU_ERANGE). TPU_ENOTFOUND when
 * model_dir has no index (no checkpoint was ever completed there); TPU_EPARSE for a damaged
 * index; TPU_EIO when the index names a file that is missing. */
int tpu_checkpoint_latest(const char *model_dir, uint64_t *step, char *path, size_t cap,
                          struct tpu_diag *d);

/* One kept checkpoint. */
struct tpu_checkpoint_entry {
    uint64_t global_step;
    char *path; /* model_dir joined with the file name */
};

/* The index's checkpoints, oldest save first, into a new array owned by the caller (free it
 * with tpu_checkpoint_list_free). No index: 0 with *entries NULL and *n 0. On failure
 * *entries and *n are untouched. */
int tpu_checkpoint_list(const char *model_dir, struct tpu_checkpoint_entry **entries,
                        size_t *n, struct tpu_diag *d);
/* Frees what tpu_checkpoint_list returned. Accepts NULL. */
void tpu_checkpoint_list_free(struct tpu_checkpoint_entry *entries, size_t n);

/* Loads the checkpoint at `path` into the caller's buffers. tensors[0..n) name every tensor
 * the caller expects, with its dtype and shape, and the buffer to fill; the file must hold
 * exactly these. All or nothing: the whole file is read and verified into scratch memory
 * first, so on any failure no caller buffer (and not *global_step) is modified. The global
 * step goes to *global_step if it is not NULL. */
int tpu_checkpoint_load(const char *path, struct tpu_tensor *tensors, size_t n,
                        uint64_t *global_step, struct tpu_diag *d);

/* What a checkpoint holds, after the same verification as a load (every checksum). */
struct tpu_checkpoint_info {
    uint64_t global_step;
    size_t n_tensors;
    struct tpu_tensor *tensors;     /* in data order; data is NULL */
    size_t n_meta;
    struct tpu_checkpoint_kv *meta; /* the caller's entries of the save (no "tpusim." keys) */
    void *storage_;                 /* internal: owns the arrays and strings */
};

/* Verifies the checkpoint at `path` and describes it in *out, which owns its memory until
 * tpu_checkpoint_info_free. On failure *out is untouched. */
int tpu_checkpoint_inspect(const char *path, struct tpu_checkpoint_info *out,
                           struct tpu_diag *d);
/* The value of a metadata entry saved with the checkpoint (e.g. a configuration
 * fingerprint), or NULL if there is none. Points into *info. */
const char *tpu_checkpoint_info_meta(const struct tpu_checkpoint_info *info, const char *key);
/* Frees the info's memory and zeroes it. Accepts NULL. */
void tpu_checkpoint_info_free(struct tpu_checkpoint_info *info);

/* The safetensors dtype name: "F32", "BF16", "I8", "I32"; "unknown" otherwise. */
const char *tpu_checkpoint_dtype_name(enum tpu_buf_dtype t);

#ifdef __cplusplus
}
#endif
#endif
