#!/usr/bin/env python3
"""The hosts of a pod slice as MPI ranks: `mpirun -np N tpusim train --hosts N ...` on
localhost (oversubscribed: more ranks than the machine's cores), against one process that
simulates the N hosts (`tpusim train --hosts N ...`).

- Same model, any split (issue 16, item 2): on 2 and 4 ranks, with PER_HOST_V1, PER_HOST_V2,
  BROADCAST and PER_SHARD_V1, a --config file with several options, --timing-only, model
  parallelism: the printed summary (losses, test accuracy, simulated step time, utilization,
  shares) and the per-loop loss lines are the same text, and every checkpoint file is the
  same bytes (params and optimizer state). Only the line that reports the simulator's own
  wall time may differ.
- Faults (item 3): a rank killed with SIGKILL mid-run, and a Ctrl-C to mpirun (every rank
  ends within 30 s; the last checkpoint loads; resuming on the same ranks continues bit for
  bit as an uninterrupted run); a NaN loss; an input that fails on one rank mid-run
  (tests/mpi_pod_prog.c, a program of the library's user); configurations that differ
  across ranks (the command line, and a --config file that differs by working directory)
  refused at start with the message.
- The options that cannot work on ranks are refused with their message; the others run.
  An error every rank has is printed once (rank 0's line) and ends every rank cleanly; an
  error of one rank keeps its rank and ends the job; ranks whose data differ are refused.
- evaluate on ranks prints what one process prints; predict on 2 and 4 ranks writes the
  --output file one process writes, byte for byte (rank 0 alone writes it), and prints the
  same summary; other launchers than mpirun are refused.
- The README's "Pod slices on MPI ranks" command lines run as written (on small data).

usage: test_mpi.py PATH/TO/tpusim PATH/TO/mpi_pod_prog PATH/TO/mpirun
(tests/meson.build sets OMPI_ALLOW_RUN_AS_ROOT*, and under ASan LSAN_OPTIONS with
tests/lsan_mpi.supp: Open MPI's own start-up allocations are never freed.)"""
import glob
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from cli_harness import Skip, case, main, write_fashion_subset, write_npy

EXE = os.path.abspath(sys.argv[1])
PROG = os.path.abspath(sys.argv[2])
MPIRUN = sys.argv[3] if len(sys.argv) > 3 else 'mpirun'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TMP = tempfile.mkdtemp(prefix='tpusim-mpi-')
DATA = write_fashion_subset(os.path.join(TMP, 'data'), 512, 64)
# every rank must end within this after one failed (issue 16: bounded time, never a hang)
BOUND_S = 30


def mpirun(n, *args, prog=None, expect=0, timeout=300, mpi_args=(), cwd=None):
    """`mpirun --oversubscribe -np n tpusim args...`; the CompletedProcess (exit checked)."""
    cmd = [MPIRUN, '--oversubscribe', *mpi_args, '-np', str(n), prog or EXE, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or TMP)
    if expect is not None and (p.returncode == 0) != (expect == 0):
        raise AssertionError(f'{shlex.join(cmd)}: exit {p.returncode}, expected {expect}\n'
                             f'stdout: {p.stdout}\nstderr: {p.stderr}')
    return p


def one(*args, expect=0, timeout=300):
    """The same job in one process."""
    p = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=timeout, cwd=TMP)
    assert p.returncode == expect, f'tpusim {shlex.join(args)}: exit {p.returncode}\n' \
                                   f'stdout: {p.stdout}\nstderr: {p.stderr}'
    return p


def base(model_dir, *extra):
    return ['train', '--chip', 'tiny', '--layers', '16', '--train-batch-size', '16',
            '--eval-batch-size', '16', '--data', DATA, '--threads', '1',
            '--model-dir', os.path.join(TMP, model_dir), *extra]


def summary(stdout):
    """The summary's lines but the simulator's own wall time."""
    return [l for l in stdout.splitlines()
            if not l.lstrip().startswith('simulation ')]


def loss_lines(stderr):
    """--verbose 2's per-loop lines (TPUEstimator's step counter): loss and simulated rate."""
    return [l for l in stderr.splitlines() if l.startswith('global step ')]


def ckpts(model_dir):
    """{file name: bytes} of a model dir's checkpoints."""
    out = {}
    for p in sorted(glob.glob(os.path.join(TMP, model_dir, 'ckpt-*.safetensors'))):
        with open(p, 'rb') as f:
            out[os.path.basename(p)] = f.read()
    return out


def assert_same_ckpts(a, b):
    ca, cb = ckpts(a), ckpts(b)
    assert ca, f'{a}: no checkpoint'
    assert sorted(ca) == sorted(cb), (sorted(ca), sorted(cb))
    for name in ca:
        assert ca[name] == cb[name], f'{name}: {a} and {b} differ (not the same bytes)'


def same_run(n, tag, *extra, json_out=False):
    """Trains the same job in one process (--hosts n) and on n ranks; checks that they print
    the same and write the same checkpoints. Returns the ranks' CompletedProcess."""
    args1 = base(f'{tag}-one', '--hosts', str(n), *extra)
    argsn = base(f'{tag}-ranks', '--hosts', str(n), *extra)
    p1 = one(*args1)
    pn = mpirun(n, *argsn)
    if json_out:
        j1, jn = json.loads(p1.stdout), json.loads(pn.stdout)
        j1.pop('wall_seconds')
        jn.pop('wall_seconds')
        assert j1 == jn, (j1, jn)
    else:
        assert summary(p1.stdout) == summary(pn.stdout), (p1.stdout, pn.stdout)
        assert 'test accuracy' in pn.stdout or '--no-eval' in extra or \
            '--timing-only' in extra, pn.stdout
    assert loss_lines(p1.stderr) == loss_lines(pn.stderr), (p1.stderr, pn.stderr)
    if '--timing-only' not in extra:  # timing-only has no values to checkpoint
        assert_same_ckpts(f'{tag}-one', f'{tag}-ranks')
    return pn


LOSSES = ('--steps', '8', '--iterations-per-loop', '2', '--save-checkpoints-steps', '4',
          '--verbose', '2', '--log-step-count-steps', '1')


# ---- same model, any split ------------------------------------------------------------------
@case
def two_ranks_per_host_v2_as_one_process():
    p = same_run(2, 'v2-2', *LOSSES)
    assert 'on tiny, 4 replicas (2 hosts)' in p.stdout, p.stdout
    assert loss_lines(p.stderr), p.stderr
    assert 'rank ' not in p.stderr, p.stderr  # no rank printed an error


@case
def four_ranks_per_host_v1_as_one_process():
    p = same_run(4, 'v1-4', *LOSSES, '--per-host-input-for-training', 'PER_HOST_V1',
                 '--eval-training-input-configuration', 'SLICED', '--train-batch-size', '32')
    assert 'on tiny, 8 replicas (4 hosts)' in p.stdout, p.stdout


@case
def four_ranks_per_host_v2_as_one_process():
    same_run(4, 'v2-4', *LOSSES, '--train-batch-size', '32')


@case
def broadcast_and_per_shard_on_ranks():
    same_run(2, 'bc-2', *LOSSES, '--per-host-input-for-training', 'BROADCAST',
             '--eval-training-input-configuration', 'SLICED', '--train-batch-size', '12')
    same_run(2, 'ps-2', *LOSSES, '--per-host-input-for-training', 'PER_SHARD_V1',
             '--eval-training-input-configuration', 'SLICED')


@case
def config_file_and_options_on_ranks():
    """A --config file (sgd with momentum, a seed, loop size auto) with flags after it:
    several chips per host, --no-share-replicas, --step-shares, --json, --keep-checkpoint-max,
    --host-call-every-n-steps, --initial-infeed-sleep-secs."""
    cfg = os.path.join(TMP, 'run.json')
    with open(cfg, 'w') as f:
        json.dump({'optimizer': 'sgd', 'momentum': 0.8, 'learning_rate': 0.05, 'seed': 7,
                   'iterations_per_loop': 'auto', 'steps': 12, 'save_checkpoints_steps': 3,
                   'keep_checkpoint_max': 2, 'layers': '24,12',
                   'host_call_every_n_steps': 2, 'initial_infeed_sleep_secs': 0.001}, f)
    p = same_run(2, 'cfg-2', '--config', cfg, '--chips', '2', '--no-share-replicas',
                 '--step-shares', '--json', '--train-batch-size', '32', json_out=True)
    out = json.loads(p.stdout)
    assert out['replicas'] == 8 and out['hosts'] == 2, out
    assert out['global_step'] == 12 and out['all_reduce_share'] > 0, out
    assert len(ckpts('cfg-2-ranks')) == 2, sorted(ckpts('cfg-2-ranks'))


# a small CNN (as tests/test_cli_shard_train.py's) on 6x6 images of 3 classes
SMALL_CNN = {'name': 'small', 'input': [6, 6, 1],
             'layers': [{'type': 'conv2d', 'filters': 4, 'kernel_size': 3,
                         'activation': 'relu'},
                        {'type': 'flatten'},
                        {'type': 'dense', 'units': 3}],
             'loss': 'softmax_cross_entropy'}


def write_images(d):
    """x_train/x_test (uint8, N x 6 x 6) and y (int32) of 3 classes, the hot band per class."""
    os.makedirs(d, exist_ok=True)
    rnd = random.Random(5)
    for name, n in (('train', 384), ('test', 96)):
        labels = [i % 3 for i in range(n)]
        rnd.shuffle(labels)
        rows = [[rnd.randrange(160, 256) if y * 12 <= j < (y + 1) * 12 else rnd.randrange(0, 96)
                 for j in range(36)] for y in labels]
        write_npy(os.path.join(d, f'x_{name}.npy'), rows, '|u1', 'B')
        write_npy(os.path.join(d, f'y_{name}.npy'), [[y] for y in labels], '<i4', 'i')
    return d


@case
def model_file_with_its_options_on_ranks():
    """--model (a CNN) with AdamW, a cosine schedule with warm-up, --passes 3, --epochs,
    --strict-input, --iterations-per-loop auto with the Keras tuner, spatial partitioning
    over 2 cores a replica (--input-partition-dims), evaluation per replica (PER_HOST_V2)."""
    model = os.path.join(TMP, 'small.json')
    with open(model, 'w') as f:
        json.dump(SMALL_CNN, f)
    data = write_images(os.path.join(TMP, 'images'))
    extra = ['--model', model, '--optimizer', 'adamw', '--weight-decay', '0.01',
             '--lr-schedule', 'cosine', '--warmup-steps', '2', '--decay-steps', '8',
             '--passes', '3', '--epochs', '1', '--strict-input', '--iterations-per-loop',
             'auto', '--tuner', 'keras', '--cores-per-replica', '2', '--chips', '2',
             '--input-partition-dims', '[[1, 2, 1, 1], None]', '--train-batch-size', '32',
             '--eval-batch-size', '32', '--save-checkpoints-steps', '4']
    def cnn_args(model_dir):
        a = base(model_dir, '--hosts', '2', *extra)
        a[a.index('--data') + 1] = data
        i = a.index('--layers')  # the model file instead of the MLP
        return a[:i] + a[i + 2:]
    args1, argsn = cnn_args('cnn-one'), cnn_args('cnn-ranks')
    p1, pn = one(*args1, '--json'), mpirun(2, *argsn, '--json')
    j1, jn = json.loads(p1.stdout), json.loads(pn.stdout)
    for j in (j1, jn):
        j.pop('wall_seconds')
    assert j1 == jn, (j1, jn)
    assert jn['global_step'] == 12 and jn['test_examples'] == 96, jn
    assert_same_ckpts('cnn-one', 'cnn-ranks')


@case
def mlp_optimizer_options_on_ranks():
    """The MLP with Adam's betas and epsilon, --l2, --passes 6, --max-steps, on 4 ranks of 2
    chips."""
    same_run(4, 'opt-4', *LOSSES, '--beta1', '0.8', '--beta2', '0.99', '--epsilon', '1e-6',
             '--l2', '0.001', '--passes', '6', '--chips', '2', '--train-batch-size', '32')


@case
def model_parallel_on_ranks():
    """--cores-per-replica 2 (the dense pairs split over a replica's cores) on 2 ranks."""
    same_run(2, 'mp-2', *LOSSES, '--cores-per-replica', '2', '--layers', '32,16', '--chips',
             '2')


@case
def timing_only_cycles_equal():
    """--timing-only: no values, the same simulated step time, utilization and shares."""
    p = same_run(4, 'to-4', '--timing-only', '--steps', '6', '--iterations-per-loop', '2',
                 '--step-shares', '--train-batch-size', '64')
    assert 'training loss      none (timing-only' in p.stdout, p.stdout
    assert 'step shares' in p.stdout and 'all-reduce' in p.stdout, p.stdout


@case
def trace_and_reference_on_ranks():
    """--trace: rank 0 writes FILE (its cores), rank h FILE.rank<h>; --reference: rank 0
    trains the host reference and prints it; the others print nothing."""
    trace = os.path.join(TMP, 'pod-trace.json')
    p = mpirun(2, *base('tr-2', '--hosts', '2', '--steps', '4', '--trace', trace,
                        '--reference', '--verbose', '0'))
    for path in (trace, trace + '.rank1'):
        with open(path) as f:
            t = json.load(f)
        events = t['traceEvents'] if isinstance(t, dict) else t
        assert events and all('ph' in e for e in events), path
    assert not os.path.exists(trace + '.rank0')
    assert p.stdout.count('tpusim train:') == 1, p.stdout  # one summary: rank 0's
    assert 'fp32 host reference' in p.stdout, p.stdout
    assert p.stderr == '', p.stderr


@case
def rtl_backend_on_ranks():
    """--backend rtl: every matmul on a rank's Verilated arrays; the same values, cycles and
    array totals (summed over the ranks) as one process; --vcd is rank 0's core 0."""
    if os.environ.get('TPUSIM_HAVE_RTL') != '1':
        raise Skip('built without the RTL matrix unit (-Drtl=enabled)')
    vcd = os.path.join(TMP, 'mxu.vcd')
    p = same_run(2, 'rtl-2', '--backend', 'rtl', '--layers', '8', '--train-batch-size', '8',
                 '--eval-batch-size', '8', '--steps', '2', '--iterations-per-loop', '1',
                 '--no-eval', '--vcd', vcd)
    assert 'RTL backend        4 Verilated 8x8 arrays' in p.stdout, p.stdout
    assert os.path.getsize(vcd) > 0 and not os.path.exists(vcd + '.rank1')


# ---- refusals --------------------------------------------------------------------------------
def expect_refusal(n, args, *needles, mpi_args=(), cwd=None):
    """A refusal every rank shares: printed once (rank 0's line), every rank ends cleanly
    (no MPI_Abort), exit 2. Returns the error line."""
    p = mpirun(n, *args, expect=2, mpi_args=mpi_args, cwd=cwd)
    errs = [l for l in p.stderr.splitlines() if re.match(r'rank \d+: tpusim', l)]
    assert len(errs) == 1 and errs[0].startswith('rank 0: tpusim '), p.stderr
    for needle in needles:
        assert needle in errs[0], f'{needle!r} not in {errs[0]!r}'
    assert 'MPI_ABORT' not in p.stderr and 'ORTE_ERROR_LOG' not in p.stderr, p.stderr
    assert p.stdout == '', p.stdout
    return errs[0]


@case
def hosts_must_equal_the_ranks():
    expect_refusal(2, base('r', '--hosts', '3'), '--hosts 3 under mpirun with 2 ranks',
                   'give --hosts 2, or start 3 ranks (mpirun -np 3)')
    expect_refusal(2, base('r'), '--hosts 1 under mpirun with 2 ranks')


@case
def options_that_cannot_work_on_ranks():
    expect_refusal(2, base('r', '--hosts', '2', '--check-equivalence', '2'),
                   '--check-equivalence compares the sharded run with one core inside one '
                   'process', 'run it without mpirun (with --hosts 2')
    expect_refusal(2, base('r', '--hosts', '2', '--host-time', 'measured'),
                   '--host-time measured: each rank would measure its own host phases',
                   'use --host-time modeled')
    expect_refusal(2, base('r', '--hosts', '2', '--backend', 'systemc'), '--backend systemc')


@case
def replica_across_hosts_refused_on_ranks():
    """A replica of 4 cores on hosts of 1 tiny chip (2 cores) runs in one process (it spans
    both hosts there) but not on ranks, whose link carries only the all-reduce over replicas:
    refused before the device opens, with the rule and the fixes."""
    args = base('span', '--hosts', '2', '--chips', '1', '--cores-per-replica', '4',
                '--steps', '2', '--no-eval')
    one(*args)
    expect_refusal(2, args, "--cores-per-replica 4 is more than a host's 2 cores (1 chips x "
                   "2 cores of 'tiny')", "on ranks a replica's cores must be on one host",
                   'the pod link between the ranks carries only the all-reduce over the '
                   'replicas', 'give --chips 2 or more, or a smaller --cores-per-replica, or '
                   'run without mpirun (one process with --hosts 2)')
    # the same replica on hosts of 2 chips runs on ranks as in one process
    same_run(2, 'span-ok', '--chips', '2', '--cores-per-replica', '4', '--steps', '2',
             '--no-eval')


@case
def errors_every_rank_has_are_printed_once():
    """Errors of the setup (the plan, the data, the estimator) that every rank hits alike:
    one line, rank 0's, and no MPI_Abort, on 4 ranks."""
    expect_refusal(4, base('e1', '--hosts', '4', '--eval-batch-size', '100', '--steps', '2'),
                   'eval_batch_size 100 must be divisible by the number of replicas '
                   '(num_shards) 8')
    expect_refusal(4, base('e2', '--hosts', '4', '--per-host-input-for-training',
                           'PER_HOST_V1', '--steps', '2', '--train-batch-size', '32'),
                   'evaluation on 4 hosts is only supported with', '(or give --no-eval)')
    args = base('e3', '--hosts', '4', '--steps', '2')
    args[args.index('--data') + 1] = os.path.join(TMP, 'no-such-data')
    expect_refusal(4, args, "--data '", "no-such-data': No such file or directory")


@case
def an_error_of_one_rank_keeps_its_rank_and_ends_the_job():
    """--trace FILE where rank 1's FILE.rank1 is a directory: only rank 1 fails (its setup),
    says so with its rank, and the job ends (MPI_Abort) on every rank."""
    trace = os.path.join(TMP, 'one-rank-trace.json')
    os.makedirs(trace + '.rank1', exist_ok=True)
    t0 = time.monotonic()
    p = mpirun(2, *base('onerank', '--hosts', '2', '--steps', '2', '--trace', trace),
               expect=None)
    assert time.monotonic() - t0 < BOUND_S + 30
    errs = [l for l in p.stderr.splitlines() if re.match(r'rank \d+: tpusim', l)]
    assert p.returncode != 0 and len(errs) == 1, p.stderr
    assert errs[0].startswith('rank 1: tpusim train: error: --trace'), errs
    assert 'one-rank-trace.json.rank1' in errs[0], errs
    assert p.stdout == '', p.stdout


def inverted_copy(src, dst, rows=None):
    """A copy of an IDX set whose first training image is inverted (255 - pixel), or whose
    training set keeps its first `rows` rows."""
    shutil.copytree(src, dst)
    path = os.path.join(dst, 'train-images-idx3-ubyte')
    with open(path, 'rb') as f:
        b = bytearray(f.read())
    assert b[2] == 8 and b[3] == 3, 'an IDX set of unsigned bytes, 3 dimensions'
    per = int.from_bytes(b[8:12], 'big') * int.from_bytes(b[12:16], 'big')
    if rows is None:
        for i in range(16, 16 + per):
            b[i] = 255 - b[i]
    else:
        b[4:8] = rows.to_bytes(4, 'big')
        del b[16 + rows * per:]
        lpath = os.path.join(dst, 'train-labels-idx1-ubyte')
        with open(lpath, 'rb') as f:
            lb = bytearray(f.read())
        lb[4:8] = rows.to_bytes(4, 'big')
        del lb[8 + rows:]
        with open(lpath, 'wb') as f:
            f.write(lb)
    with open(path, 'wb') as f:
        f.write(b)


@case
def ranks_with_different_data_are_refused():
    """The same command line, --data resolving to other files on rank 1 (-wdir, as on
    another machine): one image inverted, or fewer rows; refused before any step, naming the
    rank, what differs and the fix."""
    if not os.listdir(DATA)[0].endswith('ubyte'):
        raise Skip('the small set is not an IDX set')
    for tag, rows, needle in (('inv', None, "rank 1's training set differs from rank 0's in "
                               "its contents (512 rows of the same shape, hash "),
                              ('few', 448, "rank 1's training set has 448 rows of 784 values "
                               "where rank 0's has 512 rows of 784")):
        dirs = [os.path.join(TMP, f'dd-{tag}{i}') for i in (0, 1)]
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        os.symlink(DATA, os.path.join(dirs[0], 'd'))
        inverted_copy(DATA, os.path.join(dirs[1], 'd'), rows)
        args = base(f'dd-{tag}', '--hosts', '2', '--steps', '2')
        args[args.index('--data') + 1] = 'd'
        p = subprocess.run([MPIRUN, '--oversubscribe', '-np', '1', '-wdir', dirs[0], EXE,
                            *args, ':', '-np', '1', '-wdir', dirs[1], EXE, *args],
                           capture_output=True, text=True, timeout=120)
        errs = [l for l in p.stderr.splitlines() if re.match(r'rank \d+: tpusim', l)]
        assert p.returncode == 2 and len(errs) == 1, (p.returncode, p.stderr)
        assert errs[0].startswith('rank 0: tpusim train: error: ' + needle), errs
        assert 'give every rank the same --data' in errs[0], errs
        assert 'MPI_ABORT' not in p.stderr and p.stdout == '', p.stderr
        assert not ckpts(f'dd-{tag}'), 'no step ran'


@case
def evaluate_on_ranks_as_one_process():
    """`tpusim evaluate --hosts 2` on 2 ranks prints what one process prints (SLICED and
    PER_HOST_V2 evaluation), with --steps and --json too."""
    mpirun(2, *base('ev', '--hosts', '2', '--steps', '4', '--no-eval'))
    for extra in ((), ('--eval-training-input-configuration', 'SLICED'),
                  ('--steps', '2', '--json')):
        args = ['evaluate', *base('ev', '--hosts', '2', *extra)[1:]]
        p1, pn = one(*args), mpirun(2, *args)
        assert pn.stdout == p1.stdout and pn.stdout, (p1.stdout, pn.stdout)
        assert pn.stdout.startswith('tpusim evaluate: global step 4:') or \
            json.loads(pn.stdout)['global_step'] == 4, pn.stdout
        assert 'rank ' not in pn.stderr, pn.stderr


def trained(tag, n):
    """A model dir trained on n ranks (4 steps of the small set), made once."""
    if not ckpts(tag):
        mpirun(n, *base(tag, '--hosts', str(n), '--steps', '4', '--no-eval'))
    return tag


def predict_args(tag, n, out, *extra):
    return ['predict', *base(tag, '--hosts', str(n), '--predict-batch-size', '16',
                             '--output', out, *extra)[1:]]


def read_bytes(path):
    with open(path, 'rb') as f:
        data = f.read()
    os.remove(path)
    return data


def same_predictions(n, tag, *extra):
    """`tpusim predict --hosts n --output F` in one process, then on n ranks: the same file,
    byte for byte (every example's logits, in input order), and the same summary."""
    out = os.path.join(TMP, f'{tag}-logits.npy')
    args = predict_args(tag, n, out, *extra)
    p1 = one(*args)
    b1 = read_bytes(out)
    pn = mpirun(n, *args)
    bn = read_bytes(out)
    assert bn == b1, f'{shlex.join(args)}: the ranks wrote other logits than one process'
    assert pn.stdout == p1.stdout and pn.stdout, (p1.stdout, pn.stdout)
    assert 'rank ' not in pn.stderr, pn.stderr
    return pn


@case
def predict_on_ranks_as_one_process():
    """`tpusim predict --hosts 2` on 2 ranks writes the --output file one process writes,
    byte for byte, and prints the same summary (the accuracy): SLICED and BROADCAST
    prediction, a final partial batch (--limit 45: batches of 16, 16 and 13), loops of 2
    that do not divide its 3 steps, the whole test set, --json."""
    tag = trained('pr2', 2)
    for extra in (('--eval-training-input-configuration', 'SLICED', '--limit', '45',
                   '--iterations-per-loop', '2'),
                  ('--per-host-input-for-training', 'BROADCAST', '--limit', '45'),
                  ('--eval-training-input-configuration', 'SLICED', '--json')):
        p = same_predictions(2, tag, *extra)
        if '--json' in extra:
            assert json.loads(p.stdout)['predictions'] == 64, p.stdout
        else:
            assert p.stdout.startswith('tpusim predict: 45 predictions (one per example; '
                                       'accuracy '), p.stdout


@case
def predict_on_four_ranks_as_one_process():
    """4 ranks of 2 replicas: batches of 16 give each replica 2 rows, and the last batch of
    --limit 45 ends inside replica 6 (rank 3's)."""
    tag = trained('pr4', 4)
    for extra in (('--eval-training-input-configuration', 'SLICED', '--limit', '45',
                   '--iterations-per-loop', '2'),
                  ('--per-host-input-for-training', 'BROADCAST', '--limit', '45')):
        p = same_predictions(4, tag, *extra)
        assert p.stdout.startswith('tpusim predict: 45 predictions'), p.stdout


@case
def predict_output_is_written_by_rank_0_only():
    """--output with a relative path, each rank in a directory of its own (-wdir): rank 0's
    holds the file, rank 1's none; a prediction the input modes do not allow on several hosts
    is refused once, as in one process."""
    tag = trained('pr2', 2)
    dirs = [os.path.join(TMP, f'po{i}') for i in (0, 1)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    args = predict_args(tag, 2, 'logits.npy', '--eval-training-input-configuration', 'SLICED')
    p = subprocess.run([MPIRUN, '--oversubscribe', '-np', '1', '-wdir', dirs[0], EXE, *args,
                        ':', '-np', '1', '-wdir', dirs[1], EXE, *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert os.path.getsize(os.path.join(dirs[0], 'logits.npy')) > 0
    assert not os.path.exists(os.path.join(dirs[1], 'logits.npy')), 'rank 1 wrote --output'
    expect_refusal(2, predict_args(tag, 2, os.path.join(TMP, 'refused.npy')),
                   'prediction on 2 hosts is only supported with per_host_input_for_training '
                   'BROADCAST, eval_training_input_configuration SLICED')


@case
def only_train_evaluate_and_predict_run_on_ranks():
    for cmd in ('gemm', 'fit'):
        p = mpirun(2, cmd, '--model-dir', TMP, expect=2)
        errs = [l for l in p.stderr.splitlines() if re.match(r'rank \d+: tpusim', l)]
        assert len(errs) == 1 and errs[0].startswith('rank 0: '), p.stderr
        assert f"'tpusim {cmd}' on 2 MPI ranks: only 'tpusim train', 'tpusim evaluate' and " \
               "'tpusim predict' run" in errs[0], errs


@case
def other_launchers_are_refused():
    """A process another parallel launcher started as one of several (srun, MPICH's hydra, a
    PMIx launcher) would run the whole job alone: refused, whatever the command; a Slurm
    batch script's own environment (SLURM_NTASKS without a step) runs as usual."""
    for var, val in (('PMI_SIZE', '4'), ('SLURM_STEP_NUM_TASKS', '2'), ('PMIX_RANK', '1')):
        env = {k: v for k, v in os.environ.items() if not k.startswith('OMPI_')}
        env[var] = val
        p = subprocess.run([EXE, 'train', '--chip', 'tiny', '--hosts', '2'], env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and p.stdout == '', (p.returncode, p.stdout, p.stderr)
        assert p.stderr.startswith('tpusim train: error: this process was started by a '
                                   f"parallel launcher that is not Open MPI's mpirun ({var}="
                                   f'{val} in its environment)'), p.stderr
        assert 'mpirun -np N tpusim train --hosts N' in p.stderr, p.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith('OMPI_')}
    env['SLURM_NTASKS'] = '4'
    p = subprocess.run([EXE, 'config', 'show', 'tiny'], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout, p.stderr
    env['SLURM_STEP_ID'] = '0'
    p = subprocess.run([EXE, 'config', 'show', 'tiny'], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and 'SLURM_NTASKS=4' in p.stderr, p.stderr


@case
def threads_default_shares_the_cpus_among_ranks():
    out = one('train', '--help').stdout
    assert 'on MPI ranks, the CPUs over the ranks on the machine' in out, out
    assert 'OMPI_COMM_WORLD_LOCAL_SIZE' in out, out


@case
def command_lines_must_match():
    """MPMD: rank 1 started with another global batch: refused before any work, naming the
    first argument that differs."""
    args = base('mm', '--hosts', '2', '--steps', '2')
    p = subprocess.run([MPIRUN, '--oversubscribe', '-np', '1', EXE, *args, ':', '-np', '1',
                        EXE, *args, '--train-batch-size', '64'], capture_output=True,
                       text=True, timeout=120, cwd=TMP)
    assert p.returncode != 0 and p.stdout == '', (p.returncode, p.stdout)
    assert "rank 0: tpusim train: error: rank 1's command line differs from rank 0's at " \
           f"argument {len(args) + 1}: '--train-batch-size' where rank 0 has nothing" \
           in p.stderr, \
        p.stderr
    assert 'run every rank with the same command line' in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(TMP, 'mm')), 'no work before the refusal'


@case
def configs_that_differ_are_refused_at_start():
    """The same command line whose --config file differs by working directory (as on two
    machines): the hosts' check at the pass's start names the field and both values."""
    dirs = []
    for i, batch in enumerate((16, 32)):
        d = os.path.join(TMP, f'wd{i}')
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, 'c.json'), 'w') as f:
            json.dump({'train_batch_size': batch}, f)
        dirs.append(d)
    args = base('cd', '--hosts', '2', '--steps', '2', '--config', 'c.json')
    t0 = time.monotonic()
    p = subprocess.run([MPIRUN, '--oversubscribe', '-np', '1', '-wdir', dirs[0], EXE, *args,
                        ':', '-np', '1', '-wdir', dirs[1], EXE, *args], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0, p
    assert time.monotonic() - t0 < BOUND_S + 30
    assert re.search(r"rank \d: tpusim train: error: .*host 1's global batch 32 differs from "
                     r"host 0's 16", p.stderr), p.stderr
    assert not ckpts('cd'), 'no step ran'


# ---- faults ----------------------------------------------------------------------------------
def rank_pids(mpirun_pid):
    """{rank: pid} of mpirun's children (the ranks, on localhost)."""
    out = {}
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            with open(f'/proc/{d}/stat') as f:
                ppid = int(f.read().rsplit(')', 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            with open(f'/proc/{d}/environ', 'rb') as f:
                env = dict(kv.split(b'=', 1) for kv in f.read().split(b'\0') if b'=' in kv)
            if b'OMPI_COMM_WORLD_RANK' in env:
                out[int(env[b'OMPI_COMM_WORLD_RANK'])] = int(d)
        except (OSError, ValueError, IndexError):
            continue
    return out


def ckpt_steps(model_dir):
    return sorted(int(re.search(r'ckpt-(\d+)\.safetensors$', p).group(1))
                  for p in glob.glob(os.path.join(TMP, model_dir, 'ckpt-*.safetensors')))


def assert_latest_loads(model_dir):
    """The model dir's latest checkpoint loads: evaluate (one process simulating both hosts)
    reads the one its index names. A kill during a save can leave the newest file renamed
    into place before the index names it (the save's last step), so the index's may be the
    one before the newest file. Returns the step evaluated."""
    ev = one('evaluate', *base(model_dir, '--hosts', '2', '--eval-training-input-configuration',
                               'SLICED', '--verbose', '0')[1:])
    m = re.search(r'global step (\d+):', ev.stdout)
    assert m, ev.stdout
    steps = ckpt_steps(model_dir)
    assert int(m.group(1)) in steps[-2:], (ev.stdout, steps)
    return int(m.group(1))


@case
def killed_rank_ends_every_rank_and_resume_is_exact():
    args = base('kill', '--hosts', '2', '--max-steps', '100000', '--iterations-per-loop', '2',
                '--save-checkpoints-steps', '4', '--keep-checkpoint-max', '0', '--verbose',
                '0', '--no-eval')
    p = subprocess.Popen([MPIRUN, '--oversubscribe', '-np', '2', EXE, *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=TMP)
    try:
        deadline = time.monotonic() + 240
        while (not ckpt_steps('kill') or ckpt_steps('kill')[-1] < 12) and \
                time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        pids = rank_pids(p.pid)
        assert 1 in pids and p.poll() is None, (pids, p.poll())
        os.kill(pids[1], signal.SIGKILL)
        t0 = time.monotonic()
        out, err = p.communicate(timeout=BOUND_S)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode != 0, (out, err)
    assert took < BOUND_S, took
    assert not rank_pids(p.pid), 'a rank outlived mpirun'
    last = assert_latest_loads('kill')
    # resuming on the same ranks continues as an uninterrupted run does, bit for bit
    target = last + 6
    mpirun(2, *base('kill', '--hosts', '2', '--max-steps', str(target),
                    '--iterations-per-loop', '2', '--save-checkpoints-steps', '4',
                    '--keep-checkpoint-max', '0', '--verbose', '0', '--no-eval'))
    one(*base('whole', '--hosts', '2', '--max-steps', str(target), '--iterations-per-loop',
              '2', '--save-checkpoints-steps', '4', '--keep-checkpoint-max', '0', '--verbose',
              '0', '--no-eval'))
    resumed, whole = ckpts('kill'), ckpts('whole')
    name = f'ckpt-{target}.safetensors'
    assert name in resumed and name in whole, (sorted(resumed), sorted(whole))
    assert resumed[name] == whole[name], f'{name}: resumed and uninterrupted runs differ'


@case
def ctrl_c_ends_every_rank_and_the_checkpoint_stays():
    """SIGINT to mpirun (a Ctrl-C): mpirun passes it to every rank, which ends at once (on
    ranks there is no stopping at a step boundary of one's own); the last checkpoint loads."""
    args = base('int', '--hosts', '2', '--max-steps', '100000', '--iterations-per-loop', '2',
                '--save-checkpoints-steps', '4', '--verbose', '0', '--no-eval')
    p = subprocess.Popen([MPIRUN, '--oversubscribe', '-np', '2', EXE, *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=TMP)
    try:
        deadline = time.monotonic() + 240
        while (not ckpt_steps('int') or ckpt_steps('int')[-1] < 8) and \
                time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        p.communicate(timeout=BOUND_S)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode != 0 and took < BOUND_S, (p.returncode, took)
    assert not rank_pids(p.pid), 'a rank outlived mpirun'
    assert_latest_loads('int')


@case
def nan_on_ranks_stops_every_rank():
    """A NumPy training set (float32, taken as it is) whose example 300 holds +-3e38 (finite,
    so the loader takes it): the step that reads it overflows, the all-reduce carries the
    overflow to every replica, and the check of replica 0's loss (on rank 0) stops the job on
    every rank."""
    d = os.path.join(TMP, 'nan-data')
    os.makedirs(d, exist_ok=True)
    rows = [[((i * 37 + j * 11) % 256) / 255.0 for j in range(16)] for i in range(512)]
    rows[300] = [3e38, -3e38] * 8
    write_npy(os.path.join(d, 'x_train.npy'), rows, '<f4', 'f')
    write_npy(os.path.join(d, 'x_test.npy'), rows[:64], '<f4', 'f')
    write_npy(os.path.join(d, 'y_train.npy'), [[i % 10] for i in range(512)], '<i4', 'i')
    write_npy(os.path.join(d, 'y_test.npy'), [[i % 10] for i in range(64)], '<i4', 'i')
    args = base('nan', '--hosts', '2', '--steps', '64', '--iterations-per-loop', '1',
                '--verbose', '0')
    args[args.index('--data') + 1] = d
    t0 = time.monotonic()
    p = mpirun(2, *args, expect=1)
    assert time.monotonic() - t0 < BOUND_S + 30
    m = re.search(r'rank 0: tpusim train: error: the training loss is (NaN|infinite) at '
                  r'global step (\d+); training stopped', p.stderr)
    assert m, p.stderr
    # one process stops at the same step with the same message
    p1 = one(*args[:args.index('--model-dir')], '--model-dir', os.path.join(TMP, 'nan-one'),
             *args[args.index('--model-dir') + 2:], expect=1)
    assert f'the training loss is {m.group(1)} at global step {m.group(2)};' in p1.stderr, \
        p1.stderr
    assert ckpt_steps('nan') == [0], ckpt_steps('nan')  # the start's checkpoint stays


@case
def input_failing_on_one_rank_stops_every_rank():
    """mpi_pod_prog: rank 1's input fails at its 5th call; both ranks end promptly with that
    error (the runtime aborts the job through the host group)."""
    for n in (2, 4):
        t0 = time.monotonic()
        p = mpirun(n, '1', '5', '40', prog=PROG, expect=1, timeout=120)
        assert time.monotonic() - t0 < BOUND_S + 30
        assert re.search(r"rank 1: pod run failed \(TPU_EIO\): .*host 1's input failed at its "
                         r'call 5', p.stderr), p.stderr
        assert 'trained' not in p.stdout, p.stdout
    # and the same program without a failure trains on every rank
    p = mpirun(2, '1', '0', '6', prog=PROG, timeout=120)
    assert sorted(p.stdout.splitlines()) == ['rank 0: trained 6 steps',
                                             'rank 1: trained 6 steps'], p.stdout


@case
def help_says_how_to_run_on_ranks():
    out = one('train', '--help').stdout
    assert 'mpirun -np N tpusim train --hosts N' in out, out


# ---- the README ------------------------------------------------------------------------------
def readme_mpirun_lines():
    """The `mpirun ...` lines of the README's ```sh blocks (continuations joined)."""
    with open(os.path.join(ROOT, 'README.md')) as f:
        text = f.read()
    lines, in_sh = [], False
    for line in text.splitlines():
        if line.strip() == '```sh':
            in_sh = True
        elif line.strip() == '```':
            in_sh = False
        elif in_sh and lines and lines[-1].endswith('\\'):
            lines[-1] = lines[-1][:-1] + ' ' + line.strip()
        elif in_sh:
            lines.append(line.rstrip())
    return [shlex.split(l, comments=True) for l in lines if l.lstrip().startswith('mpirun ')]


@case
def readme_mpirun_lines_run():
    """Each `mpirun -np N tpusim train|predict ...` line of the README as written, in order
    (predict reads the model dir the first line trains), with --data on the small set (and
    --oversubscribe: this machine has fewer cores than ranks)."""
    argvs = readme_mpirun_lines()
    assert len(argvs) >= 2, argvs
    work = os.path.join(TMP, 'readme')
    os.makedirs(work, exist_ok=True)
    for argv in argvs:
        assert argv[0] == 'mpirun' and 'tpusim' in argv, argv
        i = argv.index('tpusim')
        cmd = [MPIRUN, '--oversubscribe', *argv[1:i], EXE, *argv[i + 1:], '--data', DATA]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=work)
        assert p.returncode == 0, (argv, p.stdout, p.stderr)
        assert p.stdout.startswith('tpusim train: ') or p.stdout.startswith('{') or \
            p.stdout.startswith('tpusim predict: ') and 'logits in logits.npy' in p.stdout, \
            p.stdout
    assert os.path.getsize(os.path.join(work, 'logits.npy')) > 0


if __name__ == '__main__':
    if not shutil.which(MPIRUN) and not os.path.exists(MPIRUN):
        print(f'no mpirun at {MPIRUN}')
        sys.exit(77)
    try:
        rc = main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
