#!/usr/bin/env python3
"""Users' data through `tpusim train/evaluate/predict --data DIR`: a NumPy set (Keras's
x_train.npy ... names) and a non-Fashion MNIST-format IDX set (float32 4-D images, int16
labels), generated here into temporary directories (no NumPy needed), trained with the MLP,
whose input width and class count come from the data; and every error a --data directory can
give: both sets or neither, a test set of another shape, regression targets for the MLP, a
negative label, data that does not fit the checkpoint."""
import json
import os
import sys
import random
import struct
import tempfile

from cli_harness import case, expect_error, main, read_npy, run

NPY_FMT = {'|u1': 'B', '|i1': 'b', '<i2': 'h', '<i4': 'i', '<i8': 'q', '<f4': 'f', '<f8': 'd'}
IDX_FMT = {0x08: 'B', 0x09: 'b', 0x0B: 'h', 0x0C: 'i', 0x0D: 'f', 0x0E: 'd'}


def write_array(path, shape, descr, values):
    """A C-order .npy file (format 1.0) of `shape` holding `values` (flat)."""
    dims = ', '.join(str(s) for s in shape) + (',' if len(shape) == 1 else '')
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    header += ' ' * ((64 - (10 + len(header) + 1) % 64) % 64) + '\n'
    with open(path, 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header)) + header.encode())
        f.write(struct.pack('<%d%s' % (len(values), NPY_FMT[descr]), *values))


def write_idx(path, type_byte, shape, values):
    """An IDX file (big-endian) of `shape` holding `values` (flat)."""
    with open(path, 'wb') as f:
        f.write(struct.pack('>I', type_byte << 8 | len(shape)))
        f.write(struct.pack('>%dI' % len(shape), *shape))
        f.write(struct.pack('>%d%s' % (len(values), IDX_FMT[type_byte]), *values))


def separable(n, features, classes, seed):
    """n examples of `features` values in [0, 255] and labels in [0, classes): each class is
    bright on its own band of features, so an MLP learns it in a few epochs."""
    rnd = random.Random(seed)
    labels = [i % classes for i in range(n)]
    rnd.shuffle(labels)
    band = features // classes
    x = []
    for y in labels:
        for j in range(features):
            hot = y * band <= j < (y + 1) * band
            x.append(rnd.randrange(160, 256) if hot else rnd.randrange(0, 96))
    return x, labels


def npy_set(d, n_train=384, n_test=96, hw=(6, 6), classes=3):
    feats = hw[0] * hw[1]
    for name, n, seed in (('train', n_train, 1), ('test', n_test, 2)):
        x, y = separable(n, feats, classes, seed)
        write_array(os.path.join(d, f'x_{name}.npy'), (n,) + hw, '|u1', x)
        write_array(os.path.join(d, f'y_{name}.npy'), (n,), '<i8', y)


BASE = ['--chip', 'tiny', '--layers', '16', '--train-batch-size', '32', '--eval-batch-size',
        '32', '--predict-batch-size', '32', '--learning-rate', '0.01', '--verbose', '0']


@case
def npy_set_trains_evaluates_predicts():
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, 'data')
        os.mkdir(data)
        npy_set(data)
        md = os.path.join(d, 'model')
        out = json.loads(run('train', '--data', data, '--epochs', '4', '--model-dir', md,
                             '--json', *BASE).stdout)
        # 6x6 uint8 examples (36 values), labels 0-2: the MLP is 36-16-3
        assert out['layers'] == '36-16-3', out
        assert out['global_step'] == 4 * 384 // 32, out
        assert out['test_examples'] == 96, out
        # separable classes (a bright band each): far above chance (1/3) after 48 steps
        assert out['test_accuracy'] >= 0.9, out
        ev = json.loads(run('evaluate', '--data', data, '--model-dir', md, '--json', *BASE).stdout)
        assert ev['examples'] == 96 and abs(ev['accuracy'] - out['test_accuracy']) < 1e-9, ev
        logits = os.path.join(d, 'logits.npy')
        pr = json.loads(run('predict', '--data', data, '--model-dir', md, '--output', logits,
                            '--json', *BASE).stdout)
        assert pr['predictions'] == 96, pr
        descr, rows = read_npy(logits)
        assert descr == '<f4' and len(rows) == 96 and len(rows[0]) == 3, (descr, len(rows))


@case
def idx_set_float32_4d_int16_labels():
    with tempfile.TemporaryDirectory() as d:
        classes, h, w, c = 4, 4, 4, 2
        for prefix, n, seed in (('train', 256, 3), ('t10k', 64, 4)):
            x, y = separable(n, h * w * c, classes, seed)
            write_idx(os.path.join(d, f'{prefix}-images-idx4-float'), 0x0D, (n, h, w, c),
                      [v / 255.0 for v in x])
            write_idx(os.path.join(d, f'{prefix}-labels-idx1-short'), 0x0B, (n,), y)
        out = json.loads(run('train', '--data', d, '--epochs', '4', '--json', *BASE).stdout)
        assert out['layers'] == '32-16-4', out
        assert out['test_examples'] == 64 and out['test_accuracy'] >= 0.9, out


@case
def data_dir_errors():
    with tempfile.TemporaryDirectory() as d:
        expect_error(['train', '--data', d, '--steps', '1', *BASE], 1,
                     f"--data '{d}' holds no dataset: looked for an IDX set "
                     '(train-images-idx3-ubyte[.gz]', 'or a NumPy set (x_train.npy, '
                     'y_train.npy, x_test.npy, y_test.npy)')
        npy_set(d, 64, 32)
        write_idx(os.path.join(d, 'train-images-idx3-ubyte'), 0x08, (1, 2, 2), [0] * 4)
        expect_error(['train', '--data', d, '--steps', '1', *BASE], 1,
                     'holds both an IDX set (train-images-idx3-ubyte...) and a NumPy set')
    with tempfile.TemporaryDirectory() as d:
        npy_set(d, 64, 32)
        os.unlink(os.path.join(d, 'y_test.npy'))
        expect_error(['train', '--data', d, '--steps', '1', *BASE], 1,
                     'holds a NumPy set without y_test.npy')
    with tempfile.TemporaryDirectory() as d:
        npy_set(d, 64, 32)
        x, y = separable(32, 25, 3, 5)
        write_array(os.path.join(d, 'x_test.npy'), (32, 5, 5), '|u1', x)
        expect_error(['train', '--data', d, '--steps', '1', *BASE], 1,
                     f'{d}/x_train.npy holds 6x6 examples (36 values), but {d}/x_test.npy '
                     'holds 5x5 examples (25 values); a training and a test set hold '
                     'examples of one shape')
    with tempfile.TemporaryDirectory() as d:
        npy_set(d, 64, 32)
        write_array(os.path.join(d, 'y_train.npy'), (64, 2), '<f4', [0.5] * 128)
        write_array(os.path.join(d, 'y_test.npy'), (32, 2), '<f4', [0.5] * 64)
        expect_error(['train', '--data', d, '--steps', '1', *BASE], 2,
                     f'{d}/y_train.npy holds regression targets (float32, 2 per example); '
                     'the --layers MLP trains softmax cross-entropy on integer class labels')
    with tempfile.TemporaryDirectory() as d:
        npy_set(d, 64, 32)
        y = [i % 3 for i in range(64)]
        y[17] = -2
        write_array(os.path.join(d, 'y_train.npy'), (64,), '<i4', y)
        expect_error(['train', '--data', d, '--steps', '1', *BASE], 1,
                     f'{d}/y_train.npy: the label at index 17 is -2; a label is a class index')


@case
def data_does_not_fit_the_checkpoint():
    with tempfile.TemporaryDirectory() as d:
        a, b, md = (os.path.join(d, n) for n in ('a', 'b', 'model'))
        os.mkdir(a)
        os.mkdir(b)
        npy_set(a, 64, 32)
        npy_set(b, 64, 32, hw=(5, 5))
        run('train', '--data', a, '--steps', '2', '--model-dir', md, *BASE)
        expect_error(['evaluate', '--data', b, '--model-dir', md, *BASE], 2,
                     f'{b}/x_test.npy holds 5x5 examples (25 values); the model\'s input is 36 '
                     'values: give data of the model\'s input shape', 'come from the checkpoint')
        # labels above the checkpoint's classes
        write_array(os.path.join(b, 'x_test.npy'), (4, 6, 6), '|u1', [0] * 144)
        write_array(os.path.join(b, 'y_test.npy'), (4,), '|u1', [0, 1, 5, 2])
        expect_error(['evaluate', '--data', b, '--model-dir', md, *BASE], 2,
                     f'{b}/y_test.npy: the label of example 2 is 5; the model has 3 classes '
                     '(labels 0 to 2)')


if __name__ == '__main__':
    sys.exit(main())
