#!/usr/bin/env python3
"""The runtime's reliability as a user meets it through `tpusim train/evaluate` (issue #9):
timing-only training, model parallelism that used to hang, the iterations_per_loop grammar,
batch sizes checked only for the modes that run, training skipped at max_steps, Ctrl-C (a
real SIGINT to the real binary), and configurations too large for the host's memory.

usage: test_cli_runtime.py PATH/TO/tpusim
Prints CMocka-style summary lines so the suite's totals count each case.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from cli_harness import TPUSIM, case, expect_error, main, run

SMALL = ['--chip', 'tiny', '--layers', '16', '--verbose', '0']


def metrics(model_dir):
    with open(os.path.join(model_dir, 'metrics.jsonl')) as f:
        return [json.loads(line) for line in f]


@case
def timing_only_training_runs_and_says_what_it_lacks():
    with tempfile.TemporaryDirectory() as d:
        p = run('train', *SMALL, '--steps', '3', '--timing-only', '--model-dir', d)
        assert 'global step        3' in p.stdout, p.stdout
        assert 'training loss      none (timing-only: no values computed)' in p.stdout, p.stdout
        assert 'timing-only: no checkpoints are written to' in p.stderr, p.stderr
        assert sorted(os.listdir(d)) == ['metrics.jsonl'], os.listdir(d)
        m = metrics(d)
        assert m[-1]['loss'] is None and m[-1]['device_seconds'] > 0, m
        p = run('train', *SMALL, '--steps', '2', '--timing-only', '--json')
        j = json.loads(p.stdout)
        assert j['loss'] is None and j['step_time_s'] > 0, j
        # a model_dir to be made with its parents (no checkpoint save makes it here)
        nested = os.path.join(d, 'a', 'b')
        p = run('train', *SMALL, '--steps', '2', '--timing-only', '--model-dir', nested,
                '--verbose', '2')
        assert metrics(nested)[-1]['global_step'] == 2, metrics(nested)
        assert 'loss nan' not in p.stderr and 'loss n/a' in p.stderr, p.stderr


@case
def model_parallel_training_and_evaluation_finish():
    # cores_per_replica 2 used to hang once the second core's outfeed queue (2 entries on tiny)
    # filled up: the runtime drained only the first core of each replica
    t0 = time.monotonic()
    p = run('train', *SMALL, '--cores-per-replica', '2', '--steps', '6')
    assert 'global step        6' in p.stdout, p.stdout
    assert 'test accuracy' in p.stdout and 'on 10000 examples' in p.stdout, p.stdout
    assert time.monotonic() - t0 < 120


@case
def iterations_per_loop_grammar():
    for bad in ['01', '001', '1e3', '0x10', ' 5', '1.5s', '1e308h', '0', '5ms']:
        expect_error(['train', '--iterations-per-loop', bad], 2,
                     f"iterations_per_loop '{bad}' must match ^[1-9][0-9]*[smh]?$",
                     'e.g. 100 or 30s')
    expect_error(['train', '--iterations-per-loop', '25h'], 2,
                 "iterations_per_loop '25h' is more than 24 hours of simulated time per launch",
                 'use a time from 1s to 24h (86400s)')
    expect_error(['train', '--iterations-per-loop', '1000000000001'], 2,
                 'is more than 1000000000000 steps per launch')


@case
def batch_sizes_are_checked_for_the_modes_that_run():
    # the evaluation batch does not matter with --no-eval
    p = run('train', *SMALL, '--eval-batch-size', '3', '--no-eval', '--steps', '1')
    assert 'global step        1' in p.stdout, p.stdout
    # without --no-eval it is refused before any training, with distinct nearest values
    t0 = time.monotonic()
    expect_error(['train', *SMALL, '--eval-batch-size', '3', '--steps', '100000'], 2,
                 'eval_batch_size 3 must be divisible by the number of replicas (num_shards) 2',
                 'use 2 or 4', '(or give --no-eval)')
    assert time.monotonic() - t0 < 30
    expect_error(['train', *SMALL, '--eval-batch-size', '1', '--steps', '1'], 2,
                 'use at least 2 (one example per replica)')
    # the case: 1024 replicas, a train batch that splits, the default eval batch
    # (512) that does not, and --no-eval (timing-only keeps the host memory small)
    p = run('train', '--chip', 'tpu-v4', '--chips', '512', '--train-batch-size', '65536',
            '--no-eval', '--timing-only', '--steps', '1', '--verbose', '0')
    assert '1024 replicas' in p.stdout and 'global step        1' in p.stdout, p.stdout


@case
def training_at_max_steps_says_it_was_skipped():
    with tempfile.TemporaryDirectory() as d:
        run('train', *SMALL, '--steps', '2', '--model-dir', d)
        p = run('train', *SMALL, '--max-steps', '2', '--model-dir', d)
        assert ('warning: training skipped: the checkpoint in %s is already at global step 2, '
                'at or past max_steps 2' % d) in p.stderr, p.stderr
        assert 'training loss      none (no step ran: training was skipped)' in p.stdout, p.stdout
        assert 'training loss      0.0000' not in p.stdout
        # no step, no figures: none invented
        assert 'simulated          nothing: no training step ran' in p.stdout, p.stdout
        assert 'utilized' not in p.stdout and 'step 0.0 us' not in p.stdout, p.stdout
        # every evaluation launch logs its real figures (the last one ends with the input)
        for m in metrics(d):
            assert m['device_seconds'] > 0 and m['examples_per_s'] > 0, m
        j = json.loads(run('train', *SMALL, '--max-steps', '2', '--model-dir', d,
                           '--json').stdout)
        assert j['loss'] is None, j
        for k in ('step_time_s', 'examples_per_s', 'mxu_utilization', 'infeed_stall_share',
                  'host_overhead_share'):
            assert j[k] is None, (k, j)


@case
def sigint_stops_at_a_step_boundary_with_a_checkpoint():
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.Popen([TPUSIM, 'train', *SMALL, '--steps', '1000000',
                              '--iterations-per-loop', '20', '--model-dir', d],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # wait for the first loop boundary (metrics.jsonl appears), then Ctrl-C
            deadline = time.monotonic() + 120
            while not os.path.exists(os.path.join(d, 'metrics.jsonl')):
                assert p.poll() is None, p.communicate()
                assert time.monotonic() < deadline, 'no loop boundary within 120 s'
                time.sleep(0.05)
            t0 = time.monotonic()
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
        assert time.monotonic() - t0 < 30, 'the stop was not prompt'
        assert p.returncode == 130, (p.returncode, err)
        assert 'stopping at the next step boundary' in err, err
        line = [l for l in err.splitlines() if 'training stopped on request' in l]
        assert line, err
        step = int(line[0].split('at global step ')[1].split()[0])
        assert 0 < step < 1000000, line
        assert 'checkpoint %s/' % d in line[0], line
        # the checkpoint holds exactly that step: evaluate reads it
        e = run('evaluate', '--chip', 'tiny', '--layers', '16', '--model-dir', d)
        assert 'global step %d:' % step in e.stdout, (e.stdout, line)


def double_sigint(model_dir):
    """Runs a training, sends SIGINT twice 50 ms apart after its first loop boundary, and
    returns (exit code, stderr)."""
    # the default model on tiny with a batch of 2048: a step takes far longer than the 50 ms
    # between the signals, so the first one's clean stop (at a step boundary) is still
    # under way when the second comes
    p = subprocess.Popen([TPUSIM, 'train', '--chip', 'tiny', '--verbose', '0',
                          '--steps', '1000000', '--iterations-per-loop', '1',
                          '--train-batch-size', '2048', '--model-dir', model_dir],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(model_dir, 'metrics.jsonl')):
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, 'no loop boundary within 120 s'
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        time.sleep(0.05)  # two signals sent at once would merge into one
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    return p.returncode, err


@case
def a_second_sigint_aborts_at_once():
    # a signal lands at a random point of a step; should the first stop ever finish within
    # the 50 ms, the run is tried again (at most 3 times): an abort that never comes fails
    tries = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as d:
            code, err = double_sigint(d)
            tries.append((code, err))
            if 'tpusim: aborted; the last checkpoint is intact' not in err:
                continue
            assert code == 130, (code, err)
            assert 'training stopped on request' not in err, err
            # the checkpoints written before are whole: evaluate reads the latest
            run('evaluate', '--chip', 'tiny', '--model-dir', d, '--eval-batch-size', '2048')
            return
    raise AssertionError(f'no abort on the second SIGINT in 3 tries: {tries}')


@case
def too_large_for_host_memory_is_refused_before_allocating():
    t0 = time.monotonic()
    expect_error(['train', '--chip', 'tpu-v4', '--chips', '4096', '--layers', '4096,4096',
                  '--train-batch-size', '65536', '--no-eval', '--steps', '1'], 1,
                 "the training program 'mlp_train' needs about",
                 'MiB of host memory (8192 cores x 307.0 MiB of buffers',
                 'MiB can be allocated (', 'use fewer chips or cores, a smaller model or batch')
    assert time.monotonic() - t0 < 60


if __name__ == '__main__':
    sys.exit(main())
