#!/usr/bin/env python3
r"""Show that two revisions of tpusim behave the same: same output bytes, same speed.

    python3 benchmarks/same_behaviour.py --base REV [--head REV] [--keep DIR] [--quick]
                                         [--no-bench] [--data-dir DIR] [--only REGEX]

BASE and HEAD are git revisions of the repository this script is in; without --head, HEAD is
that repository's working tree as it is (uncommitted changes included). Each revision is
exported with `git archive` into a temporary directory (or DIR/src-<commit> with --keep, so
that a second run only re-runs ninja), configured as a release build (`--buildtype=release
-Drtl=disabled`) and built. The script finds what it runs by name, not by its place in the
tree: the `tpusim` executable is BUILD/cli/tpusim, else BUILD/host/tpusim; the benchmarks are
the executables named bench_step and bench_gemm anywhere under BUILD.

What is compared. Every case in CASES below is run once with each build, each time in a fresh
empty working directory that holds a copy of the same inputs (taken from the BASE revision, so
both builds read identical bytes under identical relative paths): configs/*.json as in/configs,
tests/data/config as in/config, tests/data/topology as in/topology, tests/data/program as
in/program, .npy operands the script writes itself (in/a.npy ...), and in/fashion: the first
512 training and 128 test examples of Fashion-MNIST (from the Debian package's .gz files, or
--data-dir), written as the uncompressed IDX files tpusim reads. A case is one command or a
few run in turn in that directory (train, then evaluate and predict on its model_dir). For
each case the exit status, stdout, stderr of every command and the files the case names
(outputs and whole directories, each by its sha256 and, if it differs, by its text) must be
the same byte for byte after masking.
The main job is the command of cli/demo.sh (Fashion-MNIST MLP on tpu-v3, 15 epochs,
--reference, data from the Debian package, or --data-dir given as its --data), run once with
--json and once with --verbose 2; --quick runs it for 1 epoch instead. The short jobs train a
784-64-10 MLP for 6 steps on in/fashion, each setup twice (--json, --verbose 2): every
--per-host-input-for-training mode, --eval-training-input-configuration SLICED,
--cores-per-replica 2, --iterations-per-loop 1s, --host-call-every-n-steps, checkpoints
(--save-checkpoints-steps 2 --keep-checkpoint-max 2) read back by evaluate and predict
--output, int8 evaluate/predict on tpu-v4 and tpu-v1, --reference.

Agreeing is not enough: each command of a case must end with the exit status the case
expects (0 unless the case says otherwise; "error wording" cases any non-zero status, four
of them any status, see there) and every file the case names must be there (a directory not
empty). Otherwise the case is FAILED, whether or not the builds agree: two builds that both
fail to find the data agree and have compared nothing.

What is masked, and why: only figures of the host's wall clock, which differ from run to run
of the same binary. Nothing simulated is masked (simulated seconds, cycles, utilisation and
modeled host time are deterministic and compared).
  JSON keys whose value is replaced by "*" (the key itself must still be there):
    train --json       wall_seconds            the simulator's own run time for training
                       reference_wall_seconds  the fp32 host reference's run time
    metrics.jsonl      wall_seconds            wall time at each loop's end (per line);
                       host_seconds there is the *modeled* host time and is compared
    gemm --json        host_seconds            wall time of computing the values on the host
  Text masked in stdout and stderr by these regular expressions (TEXT_MASKS; the figure
  becomes "*"):
    \d+(?:\.\d+)? s of wall time                 train: 'simulation  2.6 s of wall time ...'
    \d+(?:\.\d+)? s wall\b                       train --verbose 2: 'epoch 1 done ..., 2.6 s wall'
    (fp32 host reference .*), \d+(?:\.\d+)? s$   train: the reference's run time ending its line
    computed on the host in \d+(?:\.\d+)? s      gemm's text output
  The checkpoints (.safetensors) and checkpoint.json hold no wall time and are compared by
  sha256 unmasked; metrics.jsonl is compared after the mask above.
  The trace of `program run --trace` (Chrome trace JSON) is not reproducible byte for byte
  even between two runs of one binary, with --threads 1 too: (a) the order of its event
  lines follows the scheduling of the threads that record them, and (b) the counter events
  "core N queues" sample infeed/outfeed queue depths that the host's feeder threads change
  concurrently. So it is compared as its sorted lines (trailing commas dropped) with the
  "args" of those counter events replaced by "*"; every other event (names, units, simulated
  start times and durations) and every counter's timestamp are compared.

Sections. "behaviour" cases must be identical, and any difference there, or a FAILED case in
any section, makes the script exit with status 1. "error wording" (unknown option, missing
value, bad number for each subcommand: stderr and exit status; and `program check` given
options of `program run` it ignored before issue #10 and refuses since) and "help" (every
--help) are reported apart, because issue #10's single option table may change their
wording on purpose: a difference there is printed but does not fail the run.

Performance. bench_step and bench_gemm of both builds run alternately, --rounds times each
(base then head in odd rounds, head then base in even ones, so that neither build always
follows the other), with the load average printed before and after each round. Every figure
of their output is printed with the median of each build, the head/base ratio and each
build's spread across rounds ((max - min) / median), so that whether a change is within
noise can be judged. A figure whose ratio is further from 1 than the larger of the two
spreads is marked '<-- outside the spread'. Performance never changes the exit status (the
machine may be shared; the judgement is the reader's).

The last line is: behaviour: N same, N different, N FAILED (...); performance: ...
--only REGEX runs only the cases whose name matches (to look at a few while iterating).
"""

import argparse
import difflib
import hashlib
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile

# ---------------------------------------------------------------------------------------------
# The cases, as data. argv is given to tpusim; paths are relative to the fresh working dir.
# "files": files or directories the case leaves behind that are compared too.
# "json_mask": JSON keys whose values are masked in stdout; "file_masks": {file name: function
# that masks its text}.
# ---------------------------------------------------------------------------------------------

MAIN_JOB = ["train", "--chip", "tpu-v3", "--layers", "512,256", "--optimizer", "adam",
            "--learning-rate", "0.001", "--train-batch-size", "512", "--epochs", "{epochs}",
            "--iterations-per-loop", "100", "--model-dir", "model", "--reference", "{data}"]
MAIN_JOB_EPOCHS, QUICK_EPOCHS = "15", "1"
FASHION_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_TRAIN, FASHION_TEST = 512, 128      # the subset in/fashion of the short jobs

# The short training jobs: a small MLP, 6 steps of a global batch of 128 (past the end of the
# 512 training examples' first epoch), the Fashion-MNIST subset the script writes.
SMALL = ["--layers", "64", "--data", "in/fashion", "--train-batch-size", "128", "--steps", "6"]
SMALL_DATA = ["--layers", "64", "--data", "in/fashion"]
NONZERO, ANY = "non-zero", "any"           # expected exit statuses besides a number

TRAIN_JSON_WALL_KEYS = ["wall_seconds", "reference_wall_seconds"]
METRICS_WALL_KEYS = ["wall_seconds"]
GEMM_JSON_WALL_KEYS = ["host_seconds"]

TEXT_MASKS = [
    (r"\d+(?:\.\d+)? s of wall time", "* s of wall time"),
    (r"\d+(?:\.\d+)? s wall\b", "* s wall"),
    (r"(fp32 host reference .*), \d+(?:\.\d+)? s$", r"\1, * s"),
    (r"computed on the host in \d+(?:\.\d+)? s", "computed on the host in * s"),
]

SECTIONS = ["behaviour", "error wording", "help"]
PROG = "in/program/mlp_step.tpuprog"
PRESETS = ["tiny", "tpu-v1", "tpu-v2", "tpu-v3", "tpu-v4"]


def mask_metrics(text):
    """masked: wall_seconds of each line: the wall clock at each loop's end."""
    return mask_json_keys(text, METRICS_WALL_KEYS)


def normalise_trace(text):
    """sorted event lines, queue depths masked: see the module's docstring."""
    lines = [re.sub(r'("name": "core \d+ queues".*"args": )\{[^}]*\}', r"\1*", line)
             .rstrip(",") for line in text.splitlines()]
    return "\n".join(sorted(lines)) + "\n"


def gemm(name, *args, files=(), json=True):
    argv = ["gemm", *args] + (["--json"] if json else [])
    return dict(section="behaviour", name="gemm " + name, runs=[(argv, 0)], files=list(files),
                json_mask=GEMM_JSON_WALL_KEYS)


def case(section, argv, name=None, expect=None, **kw):
    """One command in a fresh directory. expect: the exit status it must end with (default:
    0 in "behaviour" and "help", any non-zero status in "error wording", written NONZERO)."""
    if expect is None:
        expect = NONZERO if section == "error wording" else 0
    return dict(section=section, name=name or " ".join(argv), runs=[(argv, expect)], **kw)


def job(name, train, *after, files=(), requires=(), masks=None):
    """A short training setup on the Fashion-MNIST subset (in/fashion), run as two cases: the
    whole sequence with --json, and again with --verbose 2. train: options given to `train`
    after SMALL; after: further commands (evaluate, predict) run in the same directory, each
    given --data in/fashion and the model's --layers. Every command must exit with 0."""
    cases = []
    for tag, out in (("--json", ["--json"]), ("--verbose 2", ["--verbose", "2"])):
        runs = [(["train"] + SMALL + train + out, 0)]
        runs += [(a + SMALL_DATA + out, 0) for a in after]
        cases.append(dict(section="behaviour", name=f"{name} {tag}", runs=runs,
                          files=list(files), requires=list(requires),
                          json_mask=TRAIN_JSON_WALL_KEYS,
                          file_masks=dict(masks or {}, **{"metrics.jsonl": mask_metrics})))
    return cases


CASES = [
    # the main job: its summary (JSON and text), and every file it leaves in its model_dir
    case("behaviour", MAIN_JOB + ["--verbose", "1", "--json"], name="main job --json",
         files=["model"], json_mask=TRAIN_JSON_WALL_KEYS,
         file_masks={"metrics.jsonl": mask_metrics}),
    case("behaviour", MAIN_JOB + ["--verbose", "2"], name="main job --verbose 2",
         files=["model"], file_masks={"metrics.jsonl": mask_metrics}),

    # short training jobs: each input mode, sliced evaluation input, model parallelism, loop
    # size in simulated time, host calls, checkpoints and the commands that read them back,
    # int8 quantization, the fp32 host reference
    *[c for mode in ["PER_SHARD_V1", "PER_HOST_V1", "PER_HOST_V2", "BROADCAST"]
      for c in job("train tpu-v2 " + mode, ["--chip", "tpu-v2",
                                             "--per-host-input-for-training", mode])],
    *job("train tpu-v2 SLICED evaluation input", ["--chip", "tpu-v2",
                                                  "--eval-training-input-configuration",
                                                  "SLICED"]),
    *job("train tpu-v2 --cores-per-replica 2", ["--chip", "tpu-v2", "--cores-per-replica", "2"]),
    *job("train tiny --iterations-per-loop 1s", ["--chip", "tiny", "--iterations-per-loop",
                                                 "1s"]),
    *job("train tpu-v2 --host-call-every-n-steps 2", ["--chip", "tpu-v2",
                                                       "--iterations-per-loop", "2",
                                                       "--host-call-every-n-steps", "2"]),
    *job("train tiny checkpoints, evaluate, predict",
         ["--chip", "tiny", "--iterations-per-loop", "2", "--save-checkpoints-steps", "2",
          "--keep-checkpoint-max", "2", "--model-dir", "model"],
         ["evaluate", "--chip", "tiny", "--model-dir", "model"],
         ["predict", "--chip", "tiny", "--model-dir", "model", "--output", "l.npy"],
         files=["model", "l.npy"],
         requires=["model/checkpoint.json", "model/ckpt-4.safetensors",
                   "model/ckpt-6.safetensors", "model/metrics.jsonl"]),
    *job("train tpu-v4, int8 evaluate and predict on tpu-v4 and tpu-v1",
         ["--chip", "tpu-v4", "--model-dir", "model"],
         ["evaluate", "--chip", "tpu-v4", "--model-dir", "model", "--int8"],
         ["predict", "--chip", "tpu-v4", "--model-dir", "model", "--int8", "--output",
          "l8.npy"],
         ["evaluate", "--chip", "tpu-v1", "--model-dir", "model", "--int8"],
         ["predict", "--chip", "tpu-v1", "--model-dir", "model", "--int8", "--output",
          "l8v1.npy"],
         files=["model", "l8.npy", "l8v1.npy"]),
    *job("train tiny --reference", ["--chip", "tiny", "--reference"]),

    # one matrix multiply: every chip, every dtype, both schedules and all dataflows
    gemm("tiny bf16", "--chip", "tiny", "-m", "64", "-k", "64", "-n", "64"),
    gemm("tiny bf16 text", "--chip", "tiny", "-m", "33", "-k", "47", "-n", "29", json=False),
    gemm("tpu-v1 int8", "--chip", "tpu-v1", "--dtype", "int8", "-m", "256", "-k", "300",
         "-n", "200"),
    gemm("tpu-v2 bf16", "--chip", "tpu-v2", "-m", "300", "-k", "200", "-n", "100"),
    gemm("tpu-v3 bf16", "--chip", "tpu-v3", "-m", "512", "-k", "384", "-n", "256",
         "--seed", "7"),
    gemm("tpu-v4 int8", "--chip", "tpu-v4", "--dtype", "int8", "-m", "128", "-k", "512",
         "-n", "64"),
    gemm("tpu-v4 fp32 passes 1", "--dtype", "fp32", "--passes", "1", "-m", "96", "-k", "96",
         "-n", "96"),
    gemm("tpu-v4 fp32 passes 3", "--dtype", "fp32", "--passes", "3", "-m", "128", "-k", "256",
         "-n", "128"),
    gemm("tiny fp32 passes 6", "--chip", "tiny", "--dtype", "fp32", "-m", "40", "-k", "24",
         "-n", "16"),
    gemm("tiny serial ws", "--chip", "tiny", "--schedule", "serial", "--dataflow", "ws",
         "-m", "50", "-k", "30", "-n", "20"),
    gemm("tiny serial os", "--chip", "tiny", "--schedule", "serial", "--dataflow", "os",
         "-m", "50", "-k", "30", "-n", "20"),
    gemm("tiny serial is", "--chip", "tiny", "--schedule", "serial", "--dataflow", "is",
         "-m", "50", "-k", "30", "-n", "20"),
    gemm("tpu-v2 serial os --array 32x32", "--chip", "tpu-v2", "--array", "32x32",
         "--schedule", "serial", "--dataflow", "os", "-m", "100", "-k", "70", "-n", "90"),
    gemm("tpu-v4 --timing-only", "--timing-only", "-m", "4096", "-k", "4096", "-n", "4096"),
    gemm("tpu-v3 --timing-only serial is", "--chip", "tpu-v3", "--timing-only",
         "--schedule", "serial", "--dataflow", "is", "-m", "2048", "-k", "1000", "-n", "3000"),
    gemm("tiny --a --b --dump bf16", "--chip", "tiny", "--a", "in/a.npy", "--b", "in/b.npy",
         "--dump", "y.npy", "--dump-inputs", "seen", files=["y.npy", "seen_a.npy",
                                                             "seen_b.npy"]),
    gemm("tpu-v4 --a --b --dump fp32 passes 3", "--dtype", "fp32", "--passes", "3",
         "--a", "in/a.npy", "--b", "in/b.npy", "--dump", "y.npy", files=["y.npy"]),
    gemm("tpu-v1 --a --b --dump int8", "--chip", "tpu-v1", "--dtype", "int8",
         "--a", "in/a8.npy", "--b", "in/b8.npy", "--dump", "y.npy", files=["y.npy"]),
    # --topology cases are added below, one per tests/data/topology/*.csv

    # device programs
    case("behaviour", ["program", "check", PROG]),
    case("behaviour", ["program", "check", PROG, "--chip", "tpu-v4"]),
    case("behaviour", ["program", "run", PROG, "--var", "iterations=2"]),
    case("behaviour", ["program", "run", PROG, "--var", "iterations=3", "--json"]),
    case("behaviour", ["program", "run", PROG, "--var", "iterations=1", "--var", "step=5",
                       "--seed", "9", "--chip", "tpu-v3", "--json"]),
    case("behaviour", ["program", "run", PROG, "--var", "iterations=4", "--chips", "2",
                       "--timing-only", "--json"]),
    case("behaviour", ["program", "run", PROG, "--var", "iterations=2", "--trace", "t.json"],
         files=["t.json"], file_masks={"t.json": normalise_trace}),

    # chip configurations (config show/check of files are added below)
    case("behaviour", ["config", "list"]),
    case("behaviour", ["config", "list", "--json"]),
    *[case("behaviour", ["config", "show", p] + j) for p in PRESETS for j in ([], ["--json"])],
    case("behaviour", ["gemm", "--chip", "tpu-v1", "-m", "8", "-k", "8", "-n", "8"],
         name="gemm bf16 on tpu-v1 (rejected)", expect=1),

    # error wording: may change on purpose (issue #10, item 4); reported apart
    case("error wording", [], name="(no arguments)"),
    *[case("error wording", a) for a in [
        ["bogus"], ["--bogus"],
        ["gemm", "--bogus"], ["gemm", "-m"], ["gemm", "-m", "abc", "-k", "1", "-n", "1"],
        ["gemm", "-m", "8", "-k", "8", "-n", "8", "--passes", "2", "--dtype", "fp32"],
        ["gemm", "-m", "8", "-k", "8", "-n", "8", "--dtype", "fp16"],
        ["gemm", "-m", "8", "-k", "8", "-n", "8", "--chip", "nosuch"],
        ["gemm", "-m", "8", "-k", "8"], ["gemm", "--array", "8by8", "-m", "1", "-k", "1",
                                         "-n", "1"],
        ["train", "--bogus"], ["train", "--steps"], ["train", "--steps", "x"],
        ["train", "--learning-rate", "abc"], ["train", "--verbose", "5"],
        ["train", "--iterations-per-loop", "10q"], ["train", "--chip", "nosuch"],
        ["evaluate", "--bogus"], ["evaluate", "--model-dir"], ["predict", "--limit", "x"],
        ["program"], ["program", "bogus"], ["program", "run"], ["program", "check"],
        ["program", "run", PROG, "--bogus"], ["program", "run", PROG, "--chips"],
        ["program", "run", PROG, "--seed", "x"], ["program", "run", PROG, "--var", "nope=1"],
        ["program", "run", PROG, "--var", "iterations"], ["program", "check", "missing.tpuprog"],
        ["config"], ["config", "bogus"], ["config", "show"], ["config", "show", "nosuch"],
        ["config", "list", "--bogus"], ["config", "show", "tiny", "--bogus"],
        ["config", "check"], ["config", "check", "missing.json"],
    ]],
    # options of `program run` that `program check` ignored before issue #10 (exit status 0)
    # and refuses since (status 1), on purpose: any status is accepted, the change is shown
    *[case("error wording", ["program", "check", PROG] + a, expect=ANY) for a in [
        ["--json"], ["--chips", "2"], ["--seed", "3"], ["--threads", "1"],
    ]],

    # help texts: generated from the option table after item 4; reported apart
    *[case("help", a) for a in [
        ["--help"], ["train", "--help"], ["evaluate", "--help"], ["predict", "--help"],
        ["gemm", "--help"], ["gemm", "-h"], ["program", "--help"],
        ["program", "check", "--help"], ["program", "run", "--help"], ["config", "--help"],
        ["config", "list", "--help"], ["config", "show", "--help"],
        ["config", "check", "--help"],
    ]],
]


def cases_from_inputs(inputs):
    """The cases that depend on the input files: one per topology CSV and per config file."""
    extra = []
    for csv in sorted(os.listdir(os.path.join(inputs, "topology"))):
        if csv.endswith(".csv"):
            path = "in/topology/" + csv
            extra.append(gemm("--topology " + csv, "--chip", "tpu-v2", "--topology", path))
            extra.append(gemm("--topology " + csv + " serial os tiny", "--chip", "tiny",
                              "--schedule", "serial", "--dataflow", "os", "--timing-only",
                              "--topology", path))
    extra.append(gemm("--topology text", "--chip", "tpu-v3", "--topology",
                      "in/topology/gemm_small.csv", json=False))
    configs = ["in/configs/" + f for f in sorted(os.listdir(os.path.join(inputs, "configs")))
               if f.endswith(".json")]
    configs += ["in/config/" + f for f in sorted(os.listdir(os.path.join(inputs, "config")))
                if f.endswith(".json")]
    # configs/ holds the presets, all valid; tests/data/config holds ok.json and files that
    # are each invalid in one way (their checks must fail with status 1)
    valid = [p for p in configs if p.startswith("in/configs/") or p == "in/config/ok.json"]
    for path in configs:
        extra.append(case("behaviour", ["config", "check", path],
                          expect=0 if path in valid else 1))
    extra.append(case("behaviour", ["config", "check"] + configs,
                      expect=0 if configs == valid else 1))
    for path in configs[:3]:
        extra.append(case("behaviour", ["config", "show", path, "--json"]))
    return extra


# ---------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------

def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def export(repo, rev, work):
    """Source tree of REV (exported with git archive; reused when already there)."""
    commit = git(repo, "rev-parse", "--verify", rev + "^{commit}")
    src = os.path.join(work, "src-" + commit[:12])
    if not os.path.isfile(os.path.join(src, "meson.build")):
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        archive = subprocess.Popen(["git", "-C", repo, "archive", "--format=tar", commit],
                                   stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", src], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            sys.exit(f"same_behaviour: git archive {commit} failed")
    return src, commit[:12]


def build(src, build_dir, label):
    """Configure (once) and build a release tree; return the build directory."""
    log = build_dir + ".log"
    with open(log, "w") as out:
        if not os.path.isfile(os.path.join(build_dir, "build.ninja")):
            r = subprocess.run(["meson", "setup", build_dir, src, "--buildtype=release",
                                "-Drtl=disabled"], stdout=out, stderr=subprocess.STDOUT)
            if r.returncode != 0:
                sys.exit(f"same_behaviour: meson setup of {label} failed; see {log}")
        r = subprocess.run(["ninja", "-C", build_dir], stdout=out, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.exit(f"same_behaviour: building {label} failed; see {log}")
    return build_dir


def find_tpusim(build_dir):
    for rel in ("cli/tpusim", "host/tpusim"):
        path = os.path.join(build_dir, rel)
        if os.access(path, os.X_OK):
            return path
    sys.exit(f"same_behaviour: no cli/tpusim or host/tpusim in {build_dir}")


def find_executable(build_dir, name):
    for root, dirs, files in os.walk(build_dir):
        dirs[:] = [d for d in dirs if not d.endswith(".p")]
        if name in files and os.access(os.path.join(root, name), os.X_OK):
            return os.path.join(root, name)
    return None


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------

def write_npy(path, descr, shape, values):
    """A version 1.0 .npy file: little-endian descr ('<f4' or '<i1'), C order."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }" % (descr, *shape)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    fmt = {"<f4": "<%df", "<i1": "<%db"}[descr] % len(values)
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(fmt, *values))


def make_inputs(base_src, inputs):
    """The one set of input files both builds read (copied into each case's working dir)."""
    shutil.copytree(os.path.join(base_src, "configs"), os.path.join(inputs, "configs"),
                    ignore=lambda d, names: [n for n in names if not n.endswith(".json")])
    for sub in ("config", "topology", "program"):
        shutil.copytree(os.path.join(base_src, "tests", "data", sub), os.path.join(inputs, sub))
    m, k, n = 37, 29, 23
    a = [((i * 7919) % 2001 - 1000) / 257.0 for i in range(m * k)]
    b = [((i * 104729) % 1999 - 999) / 311.0 for i in range(k * n)]
    write_npy(os.path.join(inputs, "a.npy"), "<f4", (m, k), a)
    write_npy(os.path.join(inputs, "b.npy"), "<f4", (k, n), b)
    write_npy(os.path.join(inputs, "a8.npy"), "<i1", (m, k), [(i * 31) % 255 - 127
                                                              for i in range(m * k)])
    write_npy(os.path.join(inputs, "b8.npy"), "<i1", (k, n), [(i * 17) % 255 - 127
                                                              for i in range(k * n)])


def write_fashion_subset(data_dir, dest):
    """in/fashion: the first FASHION_TRAIN training and FASHION_TEST test images of the
    Fashion-MNIST in data_dir with their labels, as the four uncompressed IDX files tpusim
    reads (as tests/cli_harness.py's write_fashion_subset does, without its made-up fallback:
    without the data the short jobs must fail, not train on noise). Return what is missing,
    or None; when something is, dest is not made."""
    import gzip
    parts = {}
    for prefix, n in (("train", FASHION_TRAIN), ("t10k", FASHION_TEST)):
        for kind, header, size in (("images-idx3", 16, 784), ("labels-idx1", 8, 1)):
            src = os.path.join(data_dir, f"{prefix}-{kind}-ubyte.gz")
            try:
                with gzip.open(src, "rb") as f:
                    data = f.read(header + n * size)[header:]
            except OSError as e:
                return f"{src}: {e.strerror or e}"
            if len(data) != n * size:
                return f"{src} holds fewer than {n} examples"
            parts[prefix, kind] = (n, data)
    os.makedirs(dest)
    for (prefix, kind), (n, data) in parts.items():
        head = (struct.pack(">IIII", 0x803, n, 28, 28) if kind == "images-idx3"
                else struct.pack(">II", 0x801, n))
        with open(os.path.join(dest, f"{prefix}-{kind}-ubyte"), "wb") as f:
            f.write(head + data)
    return None


# ---------------------------------------------------------------------------------------------
# Running and comparing
# ---------------------------------------------------------------------------------------------

def mask_json_keys(text, keys):
    for key in keys:
        text = re.sub(r'("%s":\s*)-?[0-9][0-9.eE+-]*' % re.escape(key), r"\1*", text)
    return text


def mask_text(text):
    for pattern, repl in TEXT_MASKS:
        text = re.sub(pattern, repl, text, flags=re.MULTILINE)
    return text


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def describe_file(path, name, masks):
    """Lines that stand for one output file: its sha256 (after masking) and, if text, its text."""
    with open(path, "rb") as f:
        data = f.read()
    mask = masks.get(os.path.basename(name))
    note = ""
    if mask:
        data = mask(data.decode()).encode()
        note = " (" + mask.__doc__.split(":")[0] + ")"
    lines = [f"file {name}: {len(data)} bytes, sha256 {sha256(data)}{note}"]
    try:
        text = data.decode()
        lines += ["  | " + line for line in readable(text).splitlines()]
    except UnicodeDecodeError:
        pass
    return lines


def readable(text):
    """Long JSON lines cut after each ', "' so that a diff points at the member that differs."""
    return "\n".join(line.replace(', "', ',\n "') if len(line) > 200 else line
                     for line in text.splitlines())


def expand(argv, params):
    """The case's argv with "{epochs}" replaced and a "{data}" item replaced by its items."""
    out = []
    for a in argv:
        out += params["data"] if a == "{data}" else [a.replace("{epochs}", params["epochs"])]
    return out


def status_ok(status, expect):
    return (expect == ANY or (expect == NONZERO and status != 0)
            or (isinstance(expect, int) and status == expect))


def run_case(tpusim, c, inputs, scratch, params):
    """Run one case's commands in one fresh directory, in turn; return (the lines that stand
    for what they did, the problems: a status other than expected, an output file missing)."""
    cwd = tempfile.mkdtemp(dir=scratch)
    shutil.copytree(inputs, os.path.join(cwd, "in"))
    rec, problems = [], []
    for argv, expect in c["runs"]:
        argv = expand(argv, params)
        r = subprocess.run([tpusim] + argv, cwd=cwd, capture_output=True)
        out = mask_text(mask_json_keys(r.stdout.decode(errors="replace"),
                                       c.get("json_mask", [])))
        err = mask_text(r.stderr.decode(errors="replace"))
        if len(c["runs"]) > 1:
            rec.append("$ tpusim " + " ".join(argv))
        rec += [f"exit status {r.returncode}", "--- stdout"] + readable(out).splitlines()
        rec += ["--- stderr"] + readable(err).splitlines()
        if not status_ok(r.returncode, expect):
            problems.append(f"exit status {r.returncode}, expected {expect}: tpusim "
                            + " ".join(argv))
            problems += ["  " + line for line in err.splitlines()[-3:]]
    masks = c.get("file_masks", {})
    for name in c.get("files", []):
        path = os.path.join(cwd, name)
        if os.path.isdir(path):
            if not os.listdir(path):
                problems.append(f"directory {name} is empty")
            for f in sorted(os.listdir(path)):
                rec += describe_file(os.path.join(path, f), name + "/" + f, masks)
        elif os.path.isfile(path):
            rec += describe_file(path, name, masks)
        else:
            rec.append(f"file {name}: missing")
            problems.append(f"file {name} missing")
    for name in c.get("requires", []):
        if not os.path.isfile(os.path.join(cwd, name)):
            problems.append(f"file {name} missing")
    shutil.rmtree(cwd)
    return rec, problems


def first_diff(base, head, max_lines=24):
    diff = list(difflib.unified_diff(base, head, "base", "head", n=1, lineterm=""))
    more = len(diff) - max_lines
    return diff[:max_lines] + ([f"... ({more} more diff lines)"] if more > 0 else [])


def compare_all(cases, builds, inputs, scratch, params):
    """Run every case with both builds; print one line per case; return counts per section:
    [same, different, failed]. A case FAILED when a command of it ended with another exit
    status than the case expects, or a file it must leave is missing, with either build:
    then the two builds agreeing shows nothing (e.g. both failed to find the data)."""
    counts = {}
    section = None
    for c in cases:
        if c["section"] != section:
            section = c["section"]
            print(f"\n== {section}")
        results = [run_case(b["tpusim"], c, inputs, scratch, params) for b in builds]
        recs = [rec for rec, _ in results]
        same = recs[0] == recs[1]
        failed = any(problems for _, problems in results)
        verdict = 2 if failed else 0 if same else 1
        counts.setdefault(section, [0, 0, 0])[verdict] += 1
        name = c["name"].replace("{epochs}", params["epochs"])
        word = "FAILED   " if failed else "same     " if same else "DIFFERENT"
        print(f"  {word}  {name}{' (and DIFFERENT)' if failed and not same else ''}",
              flush=True)
        for b, (_, problems) in zip(builds, results):
            for line in problems:
                print(f"      {b['label']}: {line}")
        if not same:
            for line in first_diff(recs[0], recs[1]):
                print("      " + line)
    return counts


# ---------------------------------------------------------------------------------------------
# Performance
# ---------------------------------------------------------------------------------------------

FIGURE = re.compile(r"(-?\d+(?:\.\d+)?)\s*(ms|us|GFLOP/s|GOP/s)\b|=\s*(-?\d+(?:\.\d+)?)")


def short(heading):
    """'shape M x K x N = 1024 x 784 x 1024 (tile_rows 128)' -> '1024x784x1024';
    'MLP 784-1024-1024-10, global batch 1024 on ...' -> 'MLP 784-1024-1024-10'."""
    heading = heading.split(",")[0].split(" (")[0].replace("shape M x K x N = ", "")
    return re.sub(r"(\d) x (\d)", r"\1x\2", re.sub(r"(\d) x (\d)", r"\1x\2", heading))


def figures(output):
    """{label: value}: on each indented line, its first figure with a unit (or after '=');
    the label is the last line at column 0 (the benchmark's heading) plus the text before
    the figure."""
    result, heading = {}, ""
    for line in output.splitlines():
        if not line.startswith(" "):
            heading = line.strip()
            continue
        m = FIGURE.search(line)
        if m:
            label = f"{short(heading)}: {line[:m.start()].strip()}"
            label += f" [{m.group(2) or '='}]"
            while label in result:          # the same words twice: a second kernel variant
                label += "'"
            result[label] = float(m.group(1) or m.group(3))
    return result


def benchmark(builds, rounds, scratch):
    """Alternate the benchmark executables of both builds; print the figures; return a summary."""
    runs = {}  # (bench, build index) -> list of {label: value}
    print(f"  load average before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
    for rnd in range(rounds):
        for bench in ("bench_step", "bench_gemm"):
            order = [0, 1] if rnd % 2 == 0 else [1, 0]     # neither build always goes first
            for i in order:
                b = builds[i]
                exe = b["bench"].get(bench)
                if not exe:
                    continue
                cwd = tempfile.mkdtemp(dir=scratch)
                r = subprocess.run([exe], cwd=cwd, capture_output=True, text=True)
                shutil.rmtree(cwd)
                if r.returncode != 0:
                    print(f"  {bench} of {b['label']} exited with {r.returncode}")
                runs.setdefault((bench, i), []).append(figures(r.stdout))
            print(f"  round {rnd + 1}: {bench} done, load average"
                  f" {os.getloadavg()[0]:.2f}", flush=True)
    ratios, outside = [], []
    for bench in ("bench_step", "bench_gemm"):
        if (bench, 0) not in runs or (bench, 1) not in runs:
            print(f"\n  {bench}: not built in both trees (needs OpenBLAS)")
            continue
        print(f"\n  {bench}: median of {rounds} rounds per build")
        print(f"  {'figure':<60} {'base':>10} {'head':>10} {'head/base':>9}"
              f" {'spread b':>8} {'spread h':>8}")
        labels = [k for k in runs[(bench, 0)][0]]
        for label in labels:
            vb = [r[label] for r in runs[(bench, 0)] if label in r]
            vh = [r[label] for r in runs[(bench, 1)] if label in r]
            if not vb or not vh:
                continue
            mb, mh = statistics.median(vb), statistics.median(vh)
            ratio = mh / mb if mb else float("nan")
            sb = (max(vb) - min(vb)) / mb if mb else 0.0
            sh = (max(vh) - min(vh)) / mh if mh else 0.0
            flag = ""
            if mb and abs(ratio - 1) > max(sb, sh):
                flag = "  <-- outside the spread"
                outside.append(f"{bench}: {label}")
            ratios.append(ratio)
            print(f"  {label[:60]:<60} {mb:>10.4g} {mh:>10.4g} {ratio:>9.3f}"
                  f" {sb:>7.0%} {sh:>7.0%}{flag}")
    if not ratios:
        return "not run"
    return (f"{len(ratios)} benchmark figures, median head/base {statistics.median(ratios):.3f},"
            f" {len(ratios) - len(outside)} within the rounds' spread, {len(outside)} outside")


# ---------------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="git revision before the change")
    p.add_argument("--head", help="git revision after it (default: the working tree)")
    p.add_argument("--keep", help="directory for sources and builds, reused by later runs")
    p.add_argument("--quick", action="store_true", help="main job for 1 epoch, not 15")
    p.add_argument("--rounds", type=int, default=3, help="benchmark rounds per build (3)")
    p.add_argument("--no-bench", action="store_true", help="skip the benchmarks")
    p.add_argument("--only", metavar="REGEX", help="run only the cases whose name matches")
    p.add_argument("--data-dir", help="Fashion-MNIST's .gz IDX files, for the main job (given"
                   " as its --data) and the subset of the short jobs (default: the Debian"
                   " package's " + FASHION_DIR + ", the main job's own default)")
    args = p.parse_args()
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: give at least 1 (3 or more to judge the noise)")

    repo = git(os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--show-toplevel")
    work = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="same-bhv-")
    os.makedirs(work, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="same-bhv-run-")
    try:
        builds = []
        for label, rev in (("base", args.base), ("head", args.head)):
            if rev is None:
                # one build per working tree: a kept build of another checkout is not this one
                key = "worktree-" + hashlib.sha1(repo.encode()).hexdigest()[:12]
                src, what = repo, f"the working tree of {repo}"
            else:
                src, key = export(repo, rev, work)
                what = f"{rev} ({key})"
            build_dir = os.path.join(work, "build-" + key)
            print(f"{label}: {what}, release build in {build_dir}", flush=True)
            build(src, build_dir, label)
            builds.append(dict(label=label, src=src, tpusim=find_tpusim(build_dir),
                               bench={n: find_executable(build_dir, n)
                                      for n in ("bench_step", "bench_gemm")}))
        for b in builds:
            print(f"  {b['label']}: {b['tpusim']}")

        inputs = os.path.join(scratch, "inputs")
        make_inputs(builds[0]["src"], inputs)
        data_dir = os.path.abspath(args.data_dir) if args.data_dir else FASHION_DIR
        missing = write_fashion_subset(data_dir, os.path.join(inputs, "fashion"))
        if missing:
            print(f"no Fashion-MNIST: {missing}; the cases that train will FAIL")
        cases = CASES + cases_from_inputs(inputs)
        cases.sort(key=lambda c: SECTIONS.index(c["section"]))   # stable: keeps the order
        if args.only:
            cases = [c for c in cases if re.search(args.only, c["name"])]
        params = dict(epochs=QUICK_EPOCHS if args.quick else MAIN_JOB_EPOCHS,
                      data=["--data", data_dir] if args.data_dir else [])
        print(f"\nmain job: tpusim {' '.join(expand(MAIN_JOB, params))} ...")
        print(f"short jobs: tpusim train {' '.join(SMALL)} ..., in/fashion: the first"
              f" {FASHION_TRAIN} training and {FASHION_TEST} test examples of {data_dir}")
        print("masked JSON keys (wall clock): train --json "
              + ", ".join(TRAIN_JSON_WALL_KEYS) + "; metrics.jsonl "
              + ", ".join(METRICS_WALL_KEYS) + "; gemm --json " + ", ".join(GEMM_JSON_WALL_KEYS))
        print("masked text (wall clock): " + "; ".join(p for p, _ in TEXT_MASKS))
        counts = compare_all(cases, builds, inputs, scratch, params)

        perf = "not run (--no-bench)"
        if not args.no_bench:
            print("\n== performance")
            perf = benchmark(builds, args.rounds, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    same, diff, failed = (sum(c[i] for c in counts.values()) for i in range(3))
    behaviour_diff = counts.get("behaviour", [0, 0, 0])[1]
    parts = ", ".join(f"{s} {c[1]} different" for s, c in counts.items() if s != "behaviour")
    parts = "; " + parts if parts else ""
    print(f"\nbehaviour: {same} same, {diff} different, {failed} FAILED"
          f" ({behaviour_diff} different in behaviour{parts}); performance: {perf}")
    return 1 if behaviour_diff or failed else 0


if __name__ == "__main__":
    sys.exit(main())
