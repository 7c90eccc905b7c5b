#!/usr/bin/env python3
"""Layer graphs on the command line: `tpusim model show` (the layer table and its one-step
profile, checked against counts computed here) and `tpusim train|evaluate|predict --model
FILE` (a model file in place of the --layers MLP) with every option the MLP path has and the
new ones (--optimizer adamw, --weight-decay, --lr-schedule, --warmup-steps, --decay-steps,
--decay-rate), their errors, and the data checked against the model before any work.

The models here are small (a 6x6x1 CNN, a 4 -> 2 regression) on generated NumPy sets, on the
tiny chip, so each run takes a fraction of a second; cnn.json and resnet_small.json are
profiled (timing-only, no values) at small batches."""
import json
import math
import os
import random
import re
import struct
import tempfile

from cli_harness import case, expect_error, main, read_npy, run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, 'configs', 'models')
CNN = os.path.join(MODELS, 'cnn.json')
RESNET_SMALL = os.path.join(MODELS, 'resnet_small.json')

NPY_FMT = {'|u1': 'B', '<i8': 'q', '<f4': 'f'}

SMALL = {'name': 'small', 'input': [6, 6, 1],
         'layers': [{'type': 'conv2d', 'filters': 4, 'kernel_size': 3, 'activation': 'relu'},
                    {'type': 'max_pool2d', 'pool_size': 2},
                    {'type': 'flatten'},
                    {'type': 'dropout', 'rate': 0.25},
                    {'type': 'dense', 'units': 3}],
         'loss': 'softmax_cross_entropy'}
REG = {'name': 'reg', 'input': [4], 'layers': [{'type': 'dense', 'units': 2}],
       'loss': 'mean_squared_error'}

TINY = ['--chip', 'tiny', '--train-batch-size', '32', '--eval-batch-size', '32',
        '--predict-batch-size', '32', '--verbose', '0']


def write_array(path, shape, descr, values):
    """A C-order .npy file (format 1.0) of `shape` holding `values` (flat)."""
    dims = ', '.join(str(s) for s in shape) + (',' if len(shape) == 1 else '')
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    header += ' ' * ((64 - (10 + len(header) + 1) % 64) % 64) + '\n'
    with open(path, 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header)) + header.encode())
        f.write(struct.pack('<%d%s' % (len(values), NPY_FMT[descr]), *values))


def image_set(d, classes=3, n_train=384, n_test=96):
    """6x6 uint8 images whose class is a bright band of rows (a CNN learns it in a few
    epochs), labels int64."""
    for name, n, seed in (('train', n_train, 1), ('test', n_test, 2)):
        rnd = random.Random(seed)
        labels = [i % classes for i in range(n)]
        rnd.shuffle(labels)
        x = []
        for y in labels:
            for j in range(36):
                hot = y * (36 // classes) <= j < (y + 1) * (36 // classes)
                x.append(rnd.randrange(160, 256) if hot else rnd.randrange(0, 96))
        write_array(os.path.join(d, f'x_{name}.npy'), (n, 6, 6), '|u1', x)
        write_array(os.path.join(d, f'y_{name}.npy'), (n,), '<i8', labels)


def regression_set(d, n_train=256, n_test=64):
    """x of 4 values in [-1, 1], targets (x0 + x1 / 2, x2 - x3): a dense layer fits them."""
    rnd = random.Random(3)
    for name, n in (('train', n_train), ('test', n_test)):
        x = [rnd.uniform(-1, 1) for _ in range(n * 4)]
        t = []
        for i in range(n):
            a = x[4 * i:4 * i + 4]
            t += [a[0] + 0.5 * a[1], a[2] - a[3]]
        write_array(os.path.join(d, f'x_{name}.npy'), (n, 4), '<f4', x)
        write_array(os.path.join(d, f'y_{name}.npy'), (n, 2), '<f4', t)


class Work:
    """A scratch directory with the two model files and both data sets."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.small = self.path('small.json')
        self.reg = self.path('reg.json')
        for p, m in ((self.small, SMALL), (self.reg, REG)):
            with open(p, 'w') as f:
                json.dump(m, f, indent=1)
        self.images = self.path('images')
        self.targets = self.path('targets')
        os.mkdir(self.images)
        os.mkdir(self.targets)
        image_set(self.images)
        regression_set(self.targets)

    def path(self, name):
        return os.path.join(self.dir, name)

    def close(self):
        self.tmp.cleanup()


def run_json(*args):
    return json.loads(run(*args, '--json').stdout)


# ---- tpusim model show ----------------------------------------------------------------------
def conv_out(n, k, s, same):
    return -(-n // s) if same else (n - k) // s + 1


def keras_counts(model):
    """Output shapes, params and forward FLOPs (a multiply-add is 2, a bias add 1, pooling one
    op per window element) of a list-of-layers model, as Keras's summary and the usual FLOP
    count give them."""
    h, w, c = model['input'] if len(model['input']) == 3 else [1, 1] + model['input']
    rows = []
    for layer in model['layers']:
        t = layer['type']
        params = flops = 0
        if t == 'conv2d':
            k = layer['kernel_size']
            s = layer.get('strides', 1)
            same = layer.get('padding', 'valid') == 'same'
            f = layer['filters']
            h, w = conv_out(h, k, s, same), conv_out(w, k, s, same)
            params = k * k * c * f + f
            flops = 2 * h * w * k * k * c * f + h * w * f
            c = f
        elif t == 'max_pool2d':
            p = layer.get('pool_size', 2)
            h, w = h // p, w // p
            flops = h * w * c * p * p
        elif t == 'flatten':
            h, w, c = 1, 1, h * w * c
        elif t == 'dense':
            u = layer['units']
            params = c * u + u
            flops = 2 * h * w * c * u + h * w * u
            c = u
        elif t == 'dropout':
            flops = h * w * c
        rows.append(((h, w, c), params, flops))
    return rows


def check_profile(out, batch, cores):
    """What holds for any profile: the rows' cycles add up exactly to the step's, their shares
    to 1, and the totals follow from the rows."""
    rows = out['layers']
    assert out['global_batch'] == batch and out['cores'] == cores, out
    assert out['batch_per_replica'] == batch // cores, out
    assert [r['name'] for r in rows[-2:]] == ['(loss)', '(step)'], [r['name'] for r in rows]
    assert sum(r['cycles'] for r in rows) == out['step_cycles'] > 0, out
    # each share is printed to 9 significant digits: their sum is 1 to within 1e-8 per row
    assert abs(sum(r['share'] for r in rows) - 1) <= 1e-8 * len(rows), out
    for r in rows:
        assert 0 <= r['mxu_utilization'] <= 1, r
        assert r['bound'] in ('MXU', 'VPU', 'HBM', None), r
        busy = r['busy_cycles']
        if r['bound']:
            unit = {'MXU': 'mxu', 'VPU': 'vpu', 'HBM': 'hbm'}[r['bound']]
            assert busy[unit] == max(busy.values()) > 0, r
        else:
            assert max(busy.values()) == 0, r
    step_s = out['step_cycles'] / (out['clock_mhz'] * 1e6)
    assert math.isclose(out['step_time_s'], step_s, rel_tol=1e-8), out
    assert math.isclose(out['images_per_s'], batch / step_s, rel_tol=1e-8), out


@case
def model_show_cnn_json_counts_as_keras():
    with open(CNN) as f:
        model = json.load(f)
    want = keras_counts(model)
    out = run_json('model', 'show', CNN, '--chip', 'tpu-v3', '--batch', '64')
    check_profile(out, 64, 2)
    layers = out['layers'][1:-2]
    assert [l['type'] for l in layers] == [l['type'] for l in model['layers']], layers
    for got, (shape, params, flops) in zip(layers, want):
        assert tuple(got['output_shape']) == shape, (got, shape)
        assert got['params'] == params and got['flops_per_example'] == flops, (got, params, flops)
    # Keras's summary of its MNIST CNN: 1,199,882 trainable parameters, none non-trainable
    assert out['trainable_params'] == 1199882 == sum(p for _, p, _ in want), out
    assert out['non_trainable_params'] == 0 and out['total_params'] == 1199882, out
    assert out['flops_per_example'] == sum(f for _, _, f in want), out
    # the matrix unit does the convolutions' and dense layers' MACs, nothing else
    for l in layers:
        assert (l['macs'] > 0) == (l['type'] in ('conv2d', 'dense')), l
    # simulated, so deterministic: the same command gives the same profile
    assert run_json('model', 'show', CNN, '--chip', 'tpu-v3', '--batch', '64') == out


@case
def model_show_text_is_the_json_table():
    out = run_json('model', 'show', CNN, '--chip', 'tiny', '--batch', '8')
    check_profile(out, 8, 2)
    text = run('model', 'show', CNN, '--chip', 'tiny', '--batch', '8').stdout
    lines = text.splitlines()
    assert lines[0] == (f"model 'cnn' ({CNN}): one training step at global batch 8 on tiny "
                        "(2 cores, 4 per replica), Adam, bf16 matmul inputs"), lines[0]
    assert lines[1].split() == ['layer', 'type', 'output', 'params', 'FLOPs/example', 'time',
                                '(us)', 'share', 'MXU', 'util', 'bound'], lines[1]
    table = lines[2:2 + len(out['layers'])]
    shares = 0.0
    for line, row in zip(table, out['layers']):
        m = re.match(r'(\S+) .* ([\d.]+) +([\d.]+)% +([\d.]+)%  (MXU|VPU|HBM|-)$', line)
        assert m and m.group(1) == row['name'], (line, row)
        assert abs(float(m.group(2)) - row['time_s'] * 1e6) <= 0.05 + 1e-9, (line, row)
        assert abs(float(m.group(3)) - 100 * row['share']) <= 0.05 + 1e-9, (line, row)
        assert m.group(5) == (row['bound'] or '-'), (line, row)
        shares += float(m.group(3))
        if 'output_shape' in row:
            h, w, c = row['output_shape']
            shape = str(c) if h == w == 1 else f'{h}x{w}x{c}'
            assert line.split()[2] == shape and f"{row['params']:,}" in line, (line, row)
    # printed to 0.1 %: the printed shares sum to 100 % within half a unit per row
    assert abs(shares - 100) <= 0.05 * len(table), shares
    assert 'total params: 1,199,882 (trainable 1,199,882, non-trainable 0)' in text, text
    assert f"forward FLOPs per example: {out['flops_per_example']:,}" in text, text
    m = re.search(r'^training step: ([\d.]+) us simulated, (\d+) images/s per chip', text, re.M)
    assert m and abs(float(m.group(1)) - out['step_time_s'] * 1e6) <= 0.05, text
    assert abs(int(m.group(2)) - out['images_per_s']) <= 0.5, text


@case
def model_show_resnet_small_non_trainable_and_default_batch():
    # the default chip and batch: tpu-v3, 64 per core (2 cores)
    out = run_json('model', 'show', RESNET_SMALL)
    assert out['chip'] == 'tpu-v3', out
    check_profile(out, 128, 2)
    # configs/models/README.md: 174,970 trainable, 1,120 non-trainable (the moving statistics)
    assert (out['trainable_params'], out['non_trainable_params']) == (174970, 1120), out
    bn = [r for r in out['layers'] if r['type'] == 'batch_norm']
    assert bn and all(r['non_trainable_params'] == r['params'] == 2 * r['output_shape'][2]
                      for r in bn), bn


@case
def model_show_step_is_the_trained_step():
    """The profile's step is a timing-only training step: train --timing-only of the same
    model at the same batch on one chip of the same kind reports the same simulated step
    time, to within 0.5 %: train's figure is the mean over its steps, the first of which
    also waits for the first infeed, while the profile is a later step. (On Fashion-MNIST's
    28x28 images, whose input keeps up with the CNN's step; a model whose step is shorter
    than the modeled host input time per batch would be infeed-bound in train.)"""
    out = run_json('model', 'show', CNN, '--batch', '64')
    check_profile(out, 64, 2)
    tr = run_json('train', '--model', CNN, '--timing-only', '--chip', 'tpu-v3', '--chips', '1',
                  '--train-batch-size', '64', '--steps', '20', '--verbose', '0')
    assert tr['replicas'] == 2 and tr['infeed_stall_share'] < 0.005, tr
    assert math.isclose(tr['step_time_s'], out['step_time_s'], rel_tol=0.005), (tr, out)


@case
def model_show_errors():
    w = Work()
    try:
        expect_error(['model', 'show'], 2, 'give a model file: tpusim model show FILE.json')
        expect_error(['model', 'show', w.path('none.json')], 1,
                     f"cannot open model file '{w.path('none.json')}'")
        bad = w.path('bad.json')
        with open(bad, 'w') as f:
            f.write('{"name": "bad", "input": [4],\n "layers": [{"type": "dense", "units": 0}],\n'
                    ' "loss": "softmax_cross_entropy"}\n')
        expect_error(['model', 'show', bad], 1, f'{bad}:2:', 'layer 1 (dense): "units" must be '
                     'a whole number from 1 to 1048576; got 0')
        expect_error(['model', 'show', w.small, '--chip', 'tiny', '--batch', '33'], 2,
                     '--batch 33 does not split over the 2 cores of tiny', 'give a multiple of '
                     '2, e.g. --batch 34')
        expect_error(['model', 'show', w.small, '--chip', 'tpu-v1'], 2, "chip 'tpu-v1' cannot "
                     'train', 'tpu-v2 and later, or tiny')
        expect_error(['model', 'show', w.small, w.reg], 2, 'give one model file')
        expect_error(['model', 'show', w.small, '--batch', '0'], 2, "--batch '0' is not a "
                     'whole number from 1 to 16777216')
        expect_error(['model', 'show', w.small, '--bogus'], 2, "unknown option '--bogus'; run "
                     "'tpusim model show --help' for the list")
        expect_error(['model', 'frob'], 2, "'frob' is not a command of tpusim model")
        expect_error(['model', 'show', w.small, '--chip', 'nochip'], 1, 'nochip')
        # a step that does not fit the core's HBM names the batch and the fix
        expect_error(['model', 'show', RESNET_SMALL, '--chip', 'tiny', '--batch', '256'], 1,
                     '--batch 256 on tiny: ', 'of HBM', 'smaller batch')
        assert '--batch N' in run('model', 'show', '--help').stdout
    finally:
        w.close()


# ---- train, evaluate, predict --model ---------------------------------------------------------
@case
def model_file_trains_evaluates_predicts_and_resumes():
    w = Work()
    try:
        md = w.path('md')
        out = run_json('train', '--model', w.small, '--data', w.images, '--epochs', '4',
                       '--learning-rate', '0.01', '--model-dir', md, *TINY)
        assert out['model'] == 'small' and out['model_file'] == w.small, out
        assert 'layers' not in out, out
        assert out['global_step'] == 4 * 384 // 32 and out['test_examples'] == 96, out
        # the classes are bright bands of rows: far above chance (1/3) after 48 steps
        assert out['test_accuracy'] >= 0.9, out
        ev = run_json('evaluate', '--model', w.small, '--data', w.images, '--model-dir', md,
                      *TINY)
        assert ev['global_step'] == 48 and ev['examples'] == 96, ev
        assert abs(ev['accuracy'] - out['test_accuracy']) <= 1e-6, (ev, out)
        pred = w.path('p.npy')
        p = run('predict', '--model', w.small, '--data', w.images, '--model-dir', md,
                '--limit', '10', '--output', pred, *TINY).stdout
        assert re.match(r'tpusim predict: 10 predictions \(one per example; accuracy [\d.]+ %\), '
                        r'logits in ', p), p
        descr, rows = read_npy(pred)
        assert descr == '<f4' and len(rows) == 10 and len(rows[0]) == 3, (descr, rows)
        # resume: from the checkpoint at 48 to global step 60
        text = run('train', '--model', w.small, '--data', w.images, '--max-steps', '60',
                   '--learning-rate', '0.01', '--model-dir', md, *TINY).stdout
        assert text.startswith("tpusim train: model 'small' (small.json: 5 layers, 91 params) "
                               'on tiny, 2 replicas, bf16 matmul inputs, Adam\n'), text
        assert re.search(r'^  global step        60 \(global batch 32\)', text, re.M), text
        assert 'ckpt-60.safetensors' in os.listdir(md), os.listdir(md)
        # the checkpoint belongs to its model: another net's params do not restore
        other = w.path('other.json')
        with open(other, 'w') as f:
            json.dump(dict(SMALL, layers=SMALL['layers'][:3] + [{'type': 'dense', 'units': 3,
                                                                  'name': 'head'}]), f)
        p = run('evaluate', '--model', other, '--data', w.images, '--model-dir', md, *TINY,
                expect=1)
        assert 'head' in p.stderr or 'dense' in p.stderr, p.stderr
        assert ('it was saved from a different model; use an empty model_dir, or the model '
                'and optimizer it was saved with') in p.stderr, p.stderr
    finally:
        w.close()


@case
def an_ended_schedule_warns_that_nothing_trains():
    w = Work()
    try:
        md = w.path('md')
        run('train', '--model', w.small, '--data', w.images, '--steps', '12', '--no-eval',
            '--model-dir', md, *TINY)
        sched = ['--optimizer', 'adamw', '--lr-schedule', 'cosine', '--decay-steps', '5']
        p = run('train', '--model', w.small, '--data', w.images, '--steps', '2', '--no-eval',
                '--model-dir', md, *sched, '--decay-rate', '0', *TINY)
        assert ('tpusim train: warning: global step 12 is past the end of the cosine schedule '
                '(warm-up 0 + 5 decay steps) with --decay-rate 0: the learning rate is 0 for '
                'the steps of this run; give a larger --decay-steps or a --decay-rate above 0\n'
                ) in p.stderr, p.stderr
        # a rate above 0 at the end, or a schedule that has not ended: no warning
        p = run('train', '--model', w.small, '--data', w.images, '--steps', '2', '--no-eval',
                '--model-dir', md, *sched, '--decay-rate', '0.1', *TINY)
        assert 'warning' not in p.stderr, p.stderr
        p = run('train', '--model', w.small, '--data', w.images, '--steps', '2', '--no-eval',
                '--model-dir', w.path('fresh'), *sched, '--decay-rate', '0', *TINY)
        assert 'warning' not in p.stderr, p.stderr
        assert 'tpusim (not TPUEstimator) warns when every step of\n' in \
            run('train', '--help').stdout
    finally:
        w.close()


@case
def regression_model_reports_no_accuracy():
    w = Work()
    try:
        md = w.path('md')
        args = ['--model', w.reg, '--data', w.targets, '--model-dir', md, *TINY]
        text = run('train', '--epochs', '20', '--learning-rate', '0.05', *args).stdout
        assert 'nan' not in text.lower(), text
        m = re.search(r'^  test loss          ([\d.]+) on 64 examples \(no accuracy: '
                      r'regression\)$', text, re.M)
        # a linear map fitted by a dense layer: the loss (the mean squared error) is small
        assert m and float(m.group(1)) < 0.01, text
        ev = run_json('evaluate', *args)
        assert ev['accuracy'] is None and ev['examples'] == 64 and ev['loss'] < 0.01, ev
        text = run('evaluate', *args).stdout
        assert 'no accuracy: regression' in text and 'nan' not in text.lower(), text
        out = run_json('train', '--steps', '2', *args)
        assert out['test_accuracy'] is None and out['test_examples'] == 64, out
        pred = w.path('t.npy')
        p = run_json('predict', '--output', pred, *args)
        assert p['predictions'] == 64 and p['accuracy'] is None, p
        descr, rows = read_npy(pred)
        assert descr == '<f4' and len(rows) == 64 and len(rows[0]) == 2, (descr, len(rows))
        # the mean squared error over the predictions is the evaluation's loss
        assert abs(p['mean_squared_error'] - ev['loss']) <= 1e-4 + 1e-3 * ev['loss'], (p, ev)
    finally:
        w.close()


@case
def model_with_config_trace_timing_only_and_input_modes():
    w = Work()
    try:
        cfg = w.path('run.json')
        with open(cfg, 'w') as f:
            json.dump({'model': w.small, 'data': w.images, 'optimizer': 'adamw',
                       'weight_decay': 0.01, 'lr_schedule': 'cosine', 'warmup_steps': 2,
                       'decay_steps': 10, 'decay_rate': 0.1, 'learning_rate': 0.01,
                       'steps': 12, 'chip': 'tiny', 'train_batch_size': 32,
                       'eval_batch_size': 32}, f)
        trace = w.path('t.json')
        text = run('train', '--config', cfg, '--verbose', '0', '--trace', trace).stdout
        assert text.startswith("tpusim train: model 'small' (small.json: 5 layers, 91 params) "
                               'on tiny, 2 replicas, bf16 matmul inputs, AdamW, cosine schedule '
                               '(warm-up 2 steps, then 10 steps down to x 0.1)\n'), text
        assert re.search(r'^  test accuracy      [\d.]+ % on 96 examples', text, re.M), text
        with open(trace) as f:
            events = json.load(f)
        events = events['traceEvents'] if isinstance(events, dict) else events
        assert events and all('ph' in e for e in events)
        # the trace holds training and the evaluation after it
        names = {e.get('name', '') for e in events}
        assert any('eval' in n for n in names) and any('train' in n for n in names), names
        # flags after --config override it
        text = run('train', '--config', cfg, '--verbose', '0', '--lr-schedule', 'step',
                   '--warmup-steps', '0', '--decay-rate', '0.5').stdout
        assert 'AdamW, step schedule (x 0.5 every 10 steps)' in text, text
        out = run_json('train', '--config', cfg, '--verbose', '0', '--timing-only')
        assert out['loss'] is None and 'test_accuracy' not in out, out
        for mode in ('PER_SHARD_V1', 'PER_HOST_V1', 'PER_HOST_V2', 'BROADCAST'):
            for chips in ('1', '2'):
                out = run_json('train', '--config', cfg, '--verbose', '0', '--chips', chips,
                               '--steps', '3', '--per-host-input-for-training', mode)
                assert out['replicas'] == 2 * int(chips) and out['global_step'] == 3, out
                assert out['test_examples'] == 96, out
        bad = w.path('bad.json')
        with open(bad, 'w') as f:
            json.dump({'model': w.small, 'lr_schedule': 'linear'}, f)
        expect_error(['train', '--config', bad], 2, "--lr-schedule 'linear' is not one of "
                     'constant, step, cosine')
    finally:
        w.close()


@case
def training_options_reach_the_model():
    """Each new option changes what training computes (the same run with it and without it
    differs), and what should change nothing does not: a step schedule of rate 1 is the
    constant rate, bit for bit."""
    w = Work()
    try:
        base = ['--model', w.small, '--data', w.images, '--steps', '6', '--no-eval',
                '--learning-rate', '0.01', *TINY]

        def loss(*extra):
            return run_json('train', *base, *extra)['loss']

        constant = loss()
        assert loss('--lr-schedule', 'step', '--decay-steps', '2', '--decay-rate', '1') == constant
        assert loss('--lr-schedule', 'step', '--decay-steps', '2', '--decay-rate', '0.5') != constant
        assert loss('--lr-schedule', 'cosine', '--decay-steps', '6') != constant
        assert (loss('--lr-schedule', 'cosine', '--decay-steps', '6', '--warmup-steps', '3') !=
                loss('--lr-schedule', 'cosine', '--decay-steps', '6'))
        adamw = loss('--optimizer', 'adamw', '--weight-decay', '0')
        assert loss('--optimizer', 'adamw', '--weight-decay', '0.5') != adamw
        assert loss('--optimizer', 'sgd') != constant
        # the dropout masks follow --seed (so does the initialisation); one seed is one run
        assert loss('--seed', '7') == loss('--seed', '7') != constant
    finally:
        w.close()


@case
def model_option_errors():
    w = Work()
    try:
        m = ['--model', w.small]
        expect_error(['train', *m, '--layers', '16'], 2, 'give one of --model and --layers')
        expect_error(['train', '--layers', '16', *m], 2, 'give one of --model and --layers')
        expect_error(['train', *m, '--weight-decay', '0.1'], 2, "--weight-decay is AdamW's "
                     'decoupled weight decay: give --optimizer adamw with it')
        expect_error(['train', *m, '--optimizer', 'adamw', '--l2', '0.1'], 2,
                     'give --weight-decay instead of --l2')
        for opt, v in (('--decay-steps', '3'), ('--warmup-steps', '2'), ('--decay-rate', '0.5')):
            expect_error(['train', *m, opt, v], 2, f'{opt} shapes a learning-rate schedule, and '
                         'no --lr-schedule was given: give --lr-schedule step or cosine')
            expect_error(['train', *m, '--lr-schedule', 'constant', opt, v], 2,
                         f'{opt} shapes a learning-rate schedule, and the schedule is constant')
        expect_error(['train', *m, '--lr-schedule', 'step', '--decay-steps', '3',
                      '--decay-rate', '0.5', '--warmup-steps', '2'], 2, "--warmup-steps is the "
                     "cosine schedule's linear warm-up")
        expect_error(['train', *m, '--lr-schedule', 'cosine'], 2, '--lr-schedule cosine needs '
                     '--decay-steps N')
        expect_error(['train', *m, '--lr-schedule', 'step', '--decay-steps', '3'], 2,
                     '--lr-schedule step needs --decay-rate X above 0')
        expect_error(['train', *m, '--lr-schedule', 'step', '--decay-steps', '3',
                      '--decay-rate', '0'], 2, '--lr-schedule step needs --decay-rate', 'got 0')
        expect_error(['train', '--optimizer', 'adamw'], 2, '--optimizer adamw trains a model of '
                     '--model FILE; the --layers MLP takes adam or sgd')
        expect_error(['train', '--lr-schedule', 'cosine', '--decay-steps', '4'], 2,
                     '--lr-schedule trains a model of --model FILE')
        expect_error(['evaluate', *m, '--int8', '--model-dir', w.dir], 2, "--int8 quantizes the "
                     "--layers MLP's checkpoint")
        expect_error(['train', *m, '--reference'], 2, "--reference trains the --layers MLP")
        expect_error(['train', *m, '--lr-schedule', 'linear'], 2, "--lr-schedule 'linear' is "
                     'not one of constant, step, cosine')
        expect_error(['train', *m, '--optimizer', 'adamw', '--weight-decay', '1'], 2,
                     "--weight-decay '1' is not a number at least 0 and less than 1; "
                     "give e.g. --weight-decay 0.1")
        expect_error(['train', *m, '--decay-steps', '0'], 2, "--decay-steps '0' is not a whole "
                     'number from 1 to 4294967295')
        expect_error(['train', *m, '--warmup-steps', 'x'], 2, "--warmup-steps 'x' is not a "
                     'whole number')
        expect_error(['train', *m, '--decay-rate', '2'], 2, "--decay-rate '2' is not a number "
                     'from 0 to 1')
        expect_error(['train', '--model'], 2, "option '--model' needs a value")
        expect_error(['train', '--model', w.path('none.json')], 1, "--model: cannot open model "
                     f"file '{w.path('none.json')}'")
        # a --model path in a config file is relative to the current directory, as on the
        # command line: the message says so
        cfg = w.path('c.json')
        with open(cfg, 'w') as f:
            json.dump({'model': 'none.json'}, f)
        expect_error(['train', '--config', cfg], 1, "--model: cannot open model file "
                     "'none.json'")
        p = run('train', '--config', cfg, expect=1)
        assert p.stderr.rstrip('\n').endswith('(paths in --config FILE are relative to the '
                                               'current directory)'), p.stderr
        help_text = run('train', '--help').stdout
        for opt in ('--model FILE.json', '--optimizer', '--weight-decay X', '--lr-schedule',
                    '--warmup-steps N', '--decay-steps N', '--decay-rate X'):
            assert opt in help_text, opt
        assert 'y (N,) labels,\n' in help_text and \
            'or float targets (N,k) for mean_squared_error;' in help_text, help_text
    finally:
        w.close()


@case
def data_is_checked_against_the_model_before_any_work():
    w = Work()
    try:
        expect_error(['train', '--model', w.reg, '--data', w.images, *TINY], 2,
                     f"--model '{w.reg}' (net 'reg') and the data: ", 'x_test.npy holds 6x6 '
                     "examples (36 values); the model's input is 4 values")
        expect_error(['train', '--model', w.small, '--data', w.targets, *TINY], 2,
                     "(net 'small') and the data: ", 'x_test.npy holds examples of 4 values')
        # labels 0-3 for a model of 3 classes
        four = w.path('four')
        os.mkdir(four)
        image_set(four, classes=4)
        expect_error(['train', '--model', w.small, '--data', four, *TINY], 2,
                     "(net 'small') and the data: ", 'y_test.npy')
        # a model whose output is a regression, on class labels
        expect_error(['train', '--model', w.reg, '--data', w.images, *TINY], 2, 'x_test.npy')
        # nothing was written: the checks come before any work
        md = w.path('md')
        expect_error(['train', '--model', w.small, '--data', four, '--model-dir', md, *TINY], 2)
        assert not os.path.exists(os.path.join(md, 'checkpoint.json'))
        # a bad model file fails before the data is read (the data here does not exist)
        bad = w.path('bad.json')
        with open(bad, 'w') as f:
            f.write('{"name": "bad", "input": [4], "layers": [], "loss": "mse"}')
        expect_error(['train', '--model', bad, '--data', w.path('nodata'), *TINY], 1,
                     f'--model: {bad}:')
    finally:
        w.close()


if __name__ == '__main__':
    raise SystemExit(main())
