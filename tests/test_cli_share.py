#!/usr/bin/env python3
"""Replica sharing on the command line (issue #16, item 4): `--no-share-replicas` turns
tpu_device_settings.share_replicas off for train, evaluate and predict (every replica keeps
and computes its own values). Sharing changes only what the host holds: a short run gives
the same checkpoints byte for byte, the same evaluation and the same predictions either way,
and with many replicas the apart run holds more memory (which shows the option took effect).

A 256/64-example Fashion-MNIST-format set written here, the tiny chip: each run takes a
fraction of a second."""
import json
import os
import subprocess
import sys
import tempfile

import cli_harness
from cli_harness import case, expect_error, main, run, write_fashion_subset

CKPT_FILES = ('checkpoint.json', 'ckpt-0.safetensors', 'ckpt-6.safetensors')


def read(path):
    with open(path, 'rb') as f:
        return f.read()


def peak_rss_kb(args):
    """The peak memory of one tpusim run (its own process: os.wait4's rusage)."""
    p = subprocess.Popen([cli_harness.TPUSIM, *args], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read().decode()
    p.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, (args, err)
    return ru.ru_maxrss


@case
def checkpoints_evaluation_and_predictions_are_the_same_bytes():
    with tempfile.TemporaryDirectory() as d:
        data = write_fashion_subset(os.path.join(d, 'data'), 256, 64)
        # tiny: 2 cores a chip; --chips 2: 4 replicas of 8 rows, Adam (the default)
        common = ['--chip', 'tiny', '--chips', '2', '--layers', '16', '--data', data,
                  '--verbose', '0']
        dirs = {}
        for mode, extra in (('shared', []), ('apart', ['--no-share-replicas'])):
            md = os.path.join(d, mode)
            out = json.loads(run('train', *common, '--steps', '6', '--train-batch-size', '32',
                                 '--eval-batch-size', '32', '--model-dir', md, '--json',
                                 *extra).stdout)
            assert out['replicas'] == 4 and out['global_step'] == 6, (mode, out)
            dirs[mode] = (md, out)
        (shared, s_out), (apart, a_out) = dirs['shared'], dirs['apart']
        for name in CKPT_FILES:
            a, b = read(os.path.join(shared, name)), read(os.path.join(apart, name))
            assert len(a) > 0 and a == b, f'{name}: {len(a)} and {len(b)} bytes differ'
        for k in ('loss', 'test_loss', 'test_accuracy', 'test_examples'):
            assert s_out[k] == a_out[k], (k, s_out, a_out)

        # evaluate and predict the same checkpoint, each mode on the other's too
        evals, preds = [], []
        for md in (shared, apart):
            for extra in ([], ['--no-share-replicas']):
                ev = json.loads(run('evaluate', *common, '--model-dir', md, '--json',
                                    '--eval-batch-size', '32', *extra).stdout)
                assert ev['examples'] == 64 and ev['global_step'] == 6, ev
                evals.append(ev)
                out = os.path.join(d, f'p{len(preds)}.npy')
                run('predict', *common, '--model-dir', md, '--predict-batch-size', '32',
                    '--output', out, *extra)
                preds.append(read(out))
        assert all(e == evals[0] for e in evals), evals
        assert len(preds[0]) > 64 * 10 * 4 and all(p == preds[0] for p in preds), \
            [len(p) for p in preds]


@case
def apart_replicas_hold_more_memory():
    # 16 replicas (tiny, 8 chips) of a 784-512-10 MLP with Adam: apart, each replica holds
    # the 1.6 MB first-layer kernel and its two moments (about 4.8 MB a replica, 77 MB for
    # 16); shared, one copy of each per core index. The difference is far above the noise of
    # a process's peak memory (a few MB), so the test shows the option reaches the device.
    with tempfile.TemporaryDirectory() as d:
        data = write_fashion_subset(os.path.join(d, 'data'), 256, 64)
        args = ['train', '--chip', 'tiny', '--chips', '8', '--layers', '512', '--data', data,
                '--steps', '2', '--train-batch-size', '128', '--no-eval', '--verbose', '0']
        shared = peak_rss_kb(args)
        apart = peak_rss_kb(args + ['--no-share-replicas'])
        assert apart - shared > 40 * 1024, f'peak memory {apart} KB apart, {shared} KB shared'


@case
def the_option_takes_no_value():
    expect_error(['train', '--no-share-replicas=1'], 2, '--no-share-replicas')


if __name__ == '__main__':
    sys.exit(main())
