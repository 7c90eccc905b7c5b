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
 *     lists the kept checkpoints oldest save first; "latest" is its last entry. An optional
 *     "deleting" array, of entries of the same form, names the files that fell out of
 *     "checkpoints" and that the save which wrote the index deletes right after; if a crash
 *     or a failed unlink leaves one, the next save still accounts for it and deletes it.
 *   *.tmp                            a save in progress (or one a crash interrupted)
 *   checkpoint.json.damaged          a damaged index a save moved aside (see below)
 * Global steps go from 0 to TPU_CHECKPOINT_MAX_STEP (2^53 - 1, the largest integer every
 * JSON reader holds exactly); a file's step must equal the step in its name and in the index.
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
 * the checkpoints that fell out of it deleted.
 *
 * What a save may delete (keep_max): only checkpoints the save can account for, that is the
 * entries of a valid index it read that are not among the latest keep_max saves of the index
 * it wrote (and those the index it read still lists under "deleting"), and leftover "*.tmp"
 * files of checkpoints and of the index. A
 * ckpt-<step>.safetensors file that no valid index names (copied in by a user, left by an
 * older index that was lost or damaged, or renamed into place by a save that crashed before
 * its index was written) is never deleted; a later save of the same step replaces it. If a
 * save cannot write its index, it removes the checkpoint file it just wrote, unless that
 * step was already in the index. One process saves into a model_dir at a time (as
 * TensorFlow's chief does).
 *
 * A damaged index (bad JSON or structure, or a directory where the index belongs) does not
 * stop a save: it is renamed to checkpoint.json.damaged (replacing an older one), the new
 * index lists only the new checkpoint, and the save returns 0 with a warning in the diag
 * (code 0, the message starting "warning: "). An index of a later version is refused.
 *
 * Finding the latest checkpoint (tpu_checkpoint_latest): the last entry of a valid index,
 * or, when the index is missing or damaged, the ckpt-<step>.safetensors file of the highest
 * step (a warning in the diag says so). Either way the file must verify completely (as
 * tpu_checkpoint_inspect does: structure, checksums, and its step against its name and the
 * index); if it does not, or is missing, that is an error naming the file, what is wrong and
 * the checkpoint before it: tpusim never falls back to an older checkpoint on its own (that
 * would redo steps and replace the damaged file), and never reports "no checkpoint" when
 * checkpoint files exist (so training never starts again at step 0 over them).
 *
 * Loading checks, before any caller buffer is written: the header length, the JSON (syntax
 * errors give line and column), the header's structure (dtypes, 2-D shapes, data_offsets
 * against dtype and shape, overlaps, gaps, the file's length), tpusim's metadata, the
 * caller's expected tensor names, dtypes and shapes, and every checksum. The global step
 * in the header must be at most TPU_CHECKPOINT_MAX_STEP and, when the file's name is
 * ckpt-<step>.safetensors, equal that step. The header length and every data offset are
 * checked against the file's real size before anything is allocated or read. Each failure
 * returns a negative code with one sentence in the diag naming the file and the tensor:
 *   TPU_EPARSE        damaged, truncated or overlong file, bad JSON or structure, checksum
 *                     mismatch, a step out of range or not the one of the file's name, or
 *                     a safetensors file tpusim did not write
 *   TPU_EINVAL        the path is a directory or another non-regular file
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

/* The largest global step a checkpoint holds: 2^53 - 1. */
#define TPU_CHECKPOINT_MAX_STEP ((UINT64_C(1) << 53) - 1)

/* A named 2-D tensor: [rows][cols] row-major elements of `dtype` (bf16 as its 16-bit
 * pattern, tpu_bf16) at `data`. The struct and everything it points to stay the caller's. */
struct tpu_tensor {
    const char *name;         /* non-empty UTF-8, unique in a checkpoint, not "__metadata__" */
    enum tpu_dtype dtype;
    uint32_t rows, cols;      /* both >= 1 */
    void *data;               /* rows * cols * tpu_dtype_bytes(dtype) bytes */
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

/* Creates model_dir and its missing parents, each new directory made durable (its parent
 * fsynced), as tpu_checkpoint_save does before it writes. Returns 0 (also when it exists),
 * TPU_EIO (a part cannot be made, or model_dir is not a directory) or TPU_ENOMEM. */
int tpu_checkpoint_make_dir(const char *model_dir, struct tpu_diag *d);

/* Saves tensors[0..n_tensors) as model_dir/ckpt-<global_step>.safetensors (replacing a file
 * of that step), makes it the latest in the index and deletes what keep_max lets go (see
 * above). Creates model_dir and its parents if needed. opts NULL means the defaults. The
 * full path of the new file goes to path_out (NUL-terminated) if path_out is not NULL; it
 * must fit in path_cap bytes or nothing is written (TPU_ERANGE). global_step is at most
 * TPU_CHECKPOINT_MAX_STEP. The tensors' data must not change during the call. Returns 0
 * (with a warning in d if a damaged index was moved aside), or TPU_EINVAL (bad tensors,
 * names, metadata or step), TPU_EUNSUPPORTED (the existing index is of a later version:
 * nothing is written), TPU_EIO, TPU_ENOMEM, or TPU_ECANCELED (a fault hook's simulated
 * crash). */
int tpu_checkpoint_save(const char *model_dir, uint64_t global_step,
                        const struct tpu_tensor *tensors, size_t n_tensors,
                        const struct tpu_checkpoint_options *opts, char *path_out,
                        size_t path_cap, struct tpu_diag *d);

/* The latest checkpoint in model_dir, by the rule above: its global step (if step is not
 * NULL) and full path (if path is not NULL; must fit in cap bytes, else TPU_ERANGE). Returns
 * 0, with a warning in d (code 0, message "warning: ...") if the index was missing or
 * damaged (d is left alone otherwise); TPU_ENOTFOUND when model_dir does not exist or holds
 * neither an index nor a checkpoint file; TPU_EINVAL when model_dir is not a directory;
 * TPU_EUNSUPPORTED for an index of a later version; TPU_EPARSE when the index is damaged and
 * no checkpoint file is there, or when the latest file does not verify; TPU_EIO when it is
 * missing or unreadable; TPU_ENOMEM. */
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
const char *tpu_checkpoint_dtype_name(enum tpu_dtype t);

#ifdef __cplusplus
}
#endif
#endif
