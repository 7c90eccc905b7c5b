#!/usr/bin/env python3
"""`tpusim evaluate/predict --int8`, driven as a user drives it: a model trained in bf16 on the
tiny chip is quantized from its checkpoint and evaluated with int8 matmuls on chips with int8
matrix units (tiny, tpu-v1, tpu-v4), on the native backend and on the Verilated RTL array.

- The int8 accuracy is within 1 point of the fp32 accuracy of the same checkpoint, which the
  summary shows beside it. Why 1 point: quantization moves each weight and activation by at
  most half a step (1/254 of its column's or layer's range); the logit errors this makes
  are a fraction of a percent of the logits, so only the few test examples whose two best
  classes are that close can change their answer (the measured change is about 0.1 point).
- The int8 logits do not depend on the chip or the backend: int32 accumulation is exact and
  every fp32 step is per element, so tiny, tpu-v1 and tpu-v4 (different MXU sizes and
  replica counts) and the RTL array write byte-identical .npy files.
- Misuse gets its one-line message.

usage: test_cli_int8.py PATH/TO/tpusim
"""
import json
import os
import subprocess
import sys
import tempfile

from cli_harness import Skip, TPUSIM, case, expect_error, main, read_npy, run

FASHION = '/usr/share/datasets/fashion-mnist'
MODEL = ['--layers', '32']


def need_data():
    if not os.path.isdir(FASHION):
        raise Skip('Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)')


def train(d):
    md = os.path.join(d, 'model')
    run('train', '--chip', 'tiny', *MODEL, '--train-batch-size', '64', '--steps', '300',
        '--iterations-per-loop', '100', '--no-eval', '--verbose', '0', '--model-dir', md)
    return md


@case
def int8_evaluate_and_predict():
    need_data()
    with tempfile.TemporaryDirectory() as d:
        md = train(d)
        # the summary says int8 and shows the fp32 accuracy beside it
        p = run('evaluate', '--chip', 'tiny', *MODEL, '--model-dir', md, '--int8')
        assert p.stdout.startswith('tpusim evaluate: global step 300: accuracy '), \
            p.stdout
        assert 'over 10000 examples, int8 on tiny (fp32 on the host: ' in p.stdout, p.stdout
        assert 'points in int8)' in p.stdout, p.stdout
        ev = {}
        for chip in ('tiny', 'tpu-v1', 'tpu-v4'):
            ev[chip] = json.loads(run('evaluate', '--chip', chip, *MODEL, '--model-dir', md,
                                      '--int8', '--json').stdout)
        e = ev['tiny']
        assert e['int8'] is True and e['global_step'] == 300 and e['examples'] == 10000, e
        assert e['accuracy'] > 0.7, e  # trained, not chance (0.1)
        assert abs(e['accuracy'] - e['fp32_accuracy']) <= 0.01, e
        # the same int8 model on every chip: the same answers
        for chip in ('tpu-v1', 'tpu-v4'):
            assert ev[chip]['accuracy'] == e['accuracy'], (chip, ev[chip], e)
            assert ev[chip]['loss'] == e['loss'], (chip, ev[chip], e)
            assert ev[chip]['fp32_accuracy'] == e['fp32_accuracy'], (chip, ev[chip], e)
        # --steps: both accuracies over the same examples (the first 16 of the test set)
        few = json.loads(run('evaluate', '--chip', 'tiny', *MODEL, '--model-dir', md, '--int8',
                             '--steps', '1', '--eval-batch-size', '16', '--json').stdout)
        assert few['examples'] == 16, few
        for k in ('accuracy', 'fp32_accuracy'):
            assert abs(few[k] * 16 - round(few[k] * 16)) < 1e-6, (k, few)
        # the plain (bf16) evaluation of the same checkpoint is its own figure
        bf = json.loads(run('evaluate', '--chip', 'tiny', *MODEL, '--model-dir', md,
                            '--json').stdout)
        assert 'int8' not in bf and abs(bf['accuracy'] - e['accuracy']) <= 0.01, (bf, e)

        # predict: logits byte-identical across chips, accuracy as printed
        files = {}
        for chip in ('tiny', 'tpu-v1'):
            files[chip] = os.path.join(d, f'logits-{chip}.npy')
            p = run('predict', '--chip', chip, *MODEL, '--model-dir', md, '--int8', '--limit',
                    '300', '--predict-batch-size', '128', '--output', files[chip])
            assert p.stdout.startswith(f'tpusim predict: 300 int8 predictions on {chip} (one '
                                       'per example; accuracy '), p.stdout
            assert 'fp32 on the host ' in p.stdout, p.stdout
        with open(files['tiny'], 'rb') as a, open(files['tpu-v1'], 'rb') as b:
            assert a.read() == b.read()
        descr, rows = read_npy(files['tiny'])
        assert descr == '<f4' and len(rows) == 300 and len(rows[0]) == 10
        pj = json.loads(run('predict', '--chip', 'tiny', *MODEL, '--model-dir', md, '--int8',
                            '--limit', '300', '--json').stdout)
        assert pj['predictions'] == 300 and pj['int8'] is True, pj
        assert abs(pj['accuracy'] - pj['fp32_accuracy']) <= 0.02, pj

        # the RTL array multiplies the same int8 values into the same logits
        rtl = os.path.join(d, 'logits-rtl.npy')
        p = subprocess.run([TPUSIM, 'predict', '--chip', 'tiny', *MODEL, '--model-dir', md,
                            '--int8', '--limit', '40', '--predict-batch-size', '24', '--backend',
                            'rtl', '--output', rtl], capture_output=True, text=True, timeout=240)
        if 'built without the RTL' in p.stderr:  # a build without it refuses, as documented
            assert p.returncode == 2, (p.returncode, p.stderr)
            return
        assert p.returncode == 0, p.stderr
        _, rtl_rows = read_npy(rtl)
        assert rtl_rows == rows[:40], 'the RTL int8 logits differ from the native ones'


@case
def int8_errors():
    expect_error(['train', '--int8'], 2, "--int8 belongs to 'tpusim evaluate' and 'tpusim "
                 "predict', not to 'tpusim train' (it quantizes a trained checkpoint")
    need_data()
    with tempfile.TemporaryDirectory() as d:
        expect_error(['evaluate', '--chip', 'tpu-v3', '--int8', '--model-dir', d], 2,
                     "--int8: chip 'tpu-v3' has no int8 matrix units (its mxu.dtypes are bf16 "
                     "only)", '--chip tpu-v1, tpu-v4 or tiny')
        expect_error(['evaluate', '--chip', 'tpu-v1', '--int8', '--model-dir', d], 1,
                     f"could not find a trained model in model_dir '{d}' (no checkpoint in it)")
        md = train(d)
        for cmd in ('evaluate', 'predict'):
            expect_error([cmd, '--chip', 'tpu-v1', *MODEL, '--model-dir', md], 2,
                         "chip 'tpu-v1' multiplies int8 only (its mxu.dtypes); run the "
                         'checkpoint in int8 with --int8')
        expect_error(['predict', '--chip', 'tpu-v1', '--int8', '--layers', '16', '--model-dir',
                      md], 1, "tensor 'w0' is f32[784, 32] but the MLP of these layer widths "
                      'needs f32[784, 16]; give the --layers it was trained with')


if __name__ == '__main__':
    sys.exit(main())
