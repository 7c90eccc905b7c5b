/* The `tpusim` command line: one function per subcommand and the helpers they share.
 * Only the CLI prints; it turns the library's status codes and diagnostics into messages
 * on stderr and exit codes:
 *   0  success
 *   1  the work failed (a file could not be read, a value was rejected by the library)
 *   2  the command line itself was wrong (unknown flag, bad number, missing argument)
 * Every error is one line, "tpusim <subcommand>: error: <sentence>", and the sentence names
 * the value, the rule and the fix. */
#ifndef TPUSIM_HOST_CLI_H
#define TPUSIM_HOST_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tpusim/error.h"

#define TPU_CLI_OK 0
#define TPU_CLI_FAIL 1
#define TPU_CLI_USAGE 2

/* Each takes argv as it follows the subcommand name (argv[0] is the subcommand). */
int tpu__cli_config(int argc, char **argv);
int tpu__cli_gemm(int argc, char **argv);
/* train, evaluate and predict (argv[0] says which) */
int tpu__cli_train(int argc, char **argv);
int tpu__cli_program(int argc, char **argv);

/* The world size mpirun gave this process (OMPI_COMM_WORLD_SIZE in its environment), 0 when
 * mpirun did not start it. */
uint32_t tpu__cli_mpirun_world_size(void);

/* A parallel launcher other than Open MPI's mpirun (srun, a PMIx or MPICH launcher) started
 * this process as one of several: prints why that cannot work and returns the exit code;
 * 0 otherwise (cli_ranks.c). */
int tpu__cli_other_launcher(int argc, char **argv);

/* main under mpirun (cli_ranks.c): initialises MPI, runs `dispatch` (main's table of
 * commands) as usual on a world of one rank, and on several: compares the ranks' command
 * lines, refuses every command but train, evaluate and predict, runs them as rank h's host
 * of the pod slice, prints an error every rank has once and ends the job on an error of
 * some ranks only; a tpusim built without MPI refuses a world above one. Returns the exit
 * code. */
int tpu__cli_main_ranks(int argc, char **argv, int (*dispatch)(int argc, char **argv));

/* per_host_input_for_training's words (NULL-ended) and values, and
 * eval_training_input_configuration's: a word's index is its enum value (runtime.h). */
extern const char *const tpu__cli_input_mode_words[];
extern const int tpu__cli_input_mode_values[];
extern const char *const tpu__cli_eval_input_words[];
extern const int tpu__cli_eval_input_values[];

/* Prints "tpusim <cmd>: error: <formatted>" on stderr (on ranks: keeps it for the ranks'
 * agreement on their outcomes, see tpu__cli_set_error_capture). Returns `code` (an exit
 * code). */
int tpu__cli_error(const char *cmd, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* tpu__cli_error that prints at once, even on ranks: for a failure that ends the job from
 * whatever thread hit it. */
int tpu__cli_error_print(const char *cmd, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prints an error line as tpu__cli_error does (after the rank's prefix). */
void tpu__cli_error_line(const char *line);
/* On ranks (cli_ranks.c): from now on tpu__cli_error keeps the first error's line in buf
 * (size bytes, emptied now; the caller owns it and empties it after each agreement) instead
 * of printing it. NULL stops keeping. Call from main's thread. */
void tpu__cli_set_error_capture(char *buf, size_t size);

/* Sends tpu__cli_error's lines to f, each after prefix ("rank 1: "), for a process that is
 * one rank of several (cli_ranks.c). Call once from main's thread before any other thread
 * exists. tpu__cli_error_stream: where errors go (stderr unless set). */
void tpu__cli_set_error_output(FILE *f, const char *prefix);
FILE *tpu__cli_error_stream(void);

/* Prints the one wording for a word that is none of the commands `names` (NULL-ended) of
 * `cmd` ("program", "config"; NULL for tpusim itself): "'x' is not a command of tpusim
 * program; the commands are check and run (run 'tpusim program --help')". Returns
 * TPU_CLI_USAGE. */
int tpu__cli_unknown_command(const char *cmd, const char *word, const char *const *names);

/* Seconds on the monotonic clock (the simulator's own wall time, for reports). */
double tpu__cli_now_s(void);

/* Whether `path`, the value of output option `opt`, can be written, checked before any
 * work: not a directory, not a read-only file, in an existing writable directory. On
 * failure prints an error naming the path, the rule and the fix; returns TPU_CLI_USAGE. */
int tpu__cli_check_output_file(const char *cmd, const char *opt, const char *path);

/* The same for a directory the command writes into (--model-dir): an existing writable
 * directory, or a missing one whose nearest existing ancestor is a writable directory (it
 * is created with its parents). */
int tpu__cli_check_output_dir(const char *cmd, const char *opt, const char *path);

/* Parses and checks the options of a run config file (--config's JSON) for subcommand
 * cmd ("train", "evaluate" or "predict") as the command line would, without running
 * anything; prints an error like any option error. Returns an exit code (0 when valid). */
int tpu__cli_train_check_config(const char *cmd, const char *path);

/* `tpusim shard` (cli_shard.c): the shard plan of a pod slice, as text, JSON or SVG. */
int tpu__cli_shard(int argc, char **argv);

/* The limits train, evaluate, predict and shard share: the most chips tpusim simulates in
 * one process (hosts x chips per host), hosts, chips per host, and TPUConfig's largest
 * num_cores_per_replica. */
#define TPU__CLI_MAX_CHIPS 4096u
#define TPU__CLI_MAX_HOSTS 1024
#define TPU__CLI_MAX_CHIPS_PER_HOST 4096
#define TPU__CLI_MAX_CORES_PER_REPLICA 128

/* The shard spec (tpusim/shard.h) of a run, built the same way for `tpusim shard` and for
 * train, evaluate and predict (cli_shard.c): the pod slice of `chip` with rc's hosts (0: one)
 * of chips_per_host chips (0: the chip's chips_per_host), rc's TPUConfig fields and the
 * batch of `mode`; a model file's input tensors (model_file not NULL nor "") are added after
 * the tensors s already holds (the caller zeroes s, or fills its tensors), and rc's
 * input_partition_dims are applied to them ([0] to the first, [1] to the others). Checks
 * hosts x chips against TPU__CLI_MAX_CHIPS. 0, or the exit code after printing the error. */
struct tpu_chip_config;
struct tpu_run_config;
struct tpu_shard_spec;
int tpu__cli_shard_spec(const char *cmd, const struct tpu_chip_config *chip,
                        uint32_t chips_per_host, const struct tpu_run_config *rc,
                        int mode, const char *model_file, struct tpu_shard_spec *s);

/* shard's --tensor NAME:SHAPE ("images:28x28x1", or "labels:" for a scalar per example) into
 * t (zeroed first; a name of 1 to 31 characters, 0 to 7 sizes from 1 to 2^32 joined by x).
 * 0, or the exit code after printing the error. */
struct tpu_shard_tensor;
int tpu__cli_shard_parse_tensor(const char *cmd, const char *v, struct tpu_shard_tensor *t);

/* `tpusim model` (cli_model.c): model show. */
int tpu__cli_model(int argc, char **argv);

/* `tpusim fit` (cli_fit.c): Keras's compile, fit and evaluate with callbacks. */
int tpu__cli_fit(int argc, char **argv);

/* `tpusim bench` (cli_bench.c): bench loops. */
int tpu__cli_bench(int argc, char **argv);

/* bench loops' --list "1,4,16": ascending loop sizes from 1 to TPU_SWEEP_MAX_LOOP_SIZE, at
 * most TPU_SWEEP_MAX_SIZES of them, into sizes[0 .. *n). 0, or the exit code after printing
 * the error. */
int tpu__cli_bench_parse_list(const char *text, uint64_t *sizes, size_t *n);

/* Writes n with a comma between groups of three digits ("1,199,882") into buf. */
void tpu__cli_group_digits(uint64_t n, char *buf, size_t size);

/* Prints a JSON string literal (quoted, escaped) to f. */
void tpu__cli_json_string(FILE *f, const char *s);

#endif
