#!/usr/bin/env python3
"""`tpusim train/evaluate/predict --backend rtl`, driven as a user drives it: the same run on
the native backend and on the Verilated RTL array gives the same losses, the same simulated
times and the same checkpoints, predictions agree bit for bit, --vcd writes a waveform, and
every misuse gets its one-line message. Runs only in builds with the RTL (-Drtl=enabled).

usage: test_cli_rtl.py PATH/TO/tpusim
Prints CMocka-style summary lines so the suite's totals count each case.
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

from cli_harness import TPUSIM, case, expect_error, main, run

FASHION = '/usr/share/datasets/fashion-mnist'

# A small model on the tiny chip (8x8 MXU): 784-12-10, 12 rows per replica, a few steps.
SMALL = ['--chip', 'tiny', '--layers', '12', '--train-batch-size', '24', '--steps', '4',
         '--iterations-per-loop', '2']





def have_data():
    if os.path.isdir(FASHION):
        return True
    print('skipped: Fashion-MNIST is not installed')
    return False


@case
def train_on_rtl_matches_native():
    if not have_data():
        return
    with tempfile.TemporaryDirectory() as d:
        out = {}
        for backend in ('native', 'rtl'):
            md = os.path.join(d, backend)
            out[backend] = json.loads(run('train', *SMALL, '--backend', backend, '--no-eval',
                                          '--json', '--model-dir', md).stdout)
        nat, rtl = out['native'], out['rtl']
        assert nat['backend'] == 'native' and rtl['backend'] == 'rtl', (nat, rtl)
        # every figure of the simulated device is the same: values and cycles
        for key in ('global_step', 'loss', 'step_time_s', 'examples_per_s', 'mxu_utilization',
                    'infeed_stall_share', 'host_overhead_share', 'simulated_seconds'):
            assert nat[key] == rtl[key], (key, nat[key], rtl[key])
        assert nat['global_step'] == 4
        # both cores' arrays ran every matmul: weight tiles per step and core, as M chunks x
        # N tiles x K tiles: forward 1x2x98 + 1x2x2, weight gradients 13x2x2 + 1x2x2 (M 784
        # in chunks of 64 accumulator rows), the hidden layer's gradient 1x2x2
        assert rtl['rtl_units'] == 2, rtl
        assert rtl['rtl_tiles'] == 4 * 2 * (196 + 4 + 52 + 4 + 4), rtl
        assert rtl['rtl_cycles'] > rtl['rtl_tiles'] * 8, rtl
        # the checkpoints hold the same weights and optimizer state, byte for byte
        for name in ('ckpt-4.safetensors',):
            with open(os.path.join(d, 'native', name), 'rb') as a, \
                    open(os.path.join(d, 'rtl', name), 'rb') as b:
                assert a.read() == b.read(), name
        # predictions from the RTL-trained model, on each backend, agree bit for bit
        files = {}
        for backend in ('native', 'rtl'):
            files[backend] = os.path.join(d, f'logits-{backend}.npy')
            pr = json.loads(run('predict', *SMALL[:4], '--model-dir', os.path.join(d, 'rtl'),
                                '--backend', backend, '--limit', '100', '--predict-batch-size',
                                '48', '--output', files[backend], '--json').stdout)
            assert pr['predictions'] == 100, pr
        with open(files['native'], 'rb') as a, open(files['rtl'], 'rb') as b:
            assert a.read() == b.read()


def write_npy(path, shape, descr, fmt, values):
    """A C-order .npy file (format 1.0) of `shape` holding `values` (flat)."""
    dims = ', '.join(str(s) for s in shape) + (',' if len(shape) == 1 else '')
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    header += ' ' * ((64 - (10 + len(header) + 1) % 64) % 64) + '\n'
    with open(path, 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header)) + header.encode())
        f.write(struct.pack('<%d%s' % (len(values), fmt), *values))


def image_set(d, classes=3, n=96):
    """6x6 uint8 images whose class is a bright band of rows, labels int64 (train and
    test)."""
    for name, seed in (('train', 1), ('test', 2)):
        rnd = random.Random(seed)
        labels = [i % classes for i in range(n)]
        x = []
        for y in labels:
            for j in range(36):
                hot = y * (36 // classes) <= j < (y + 1) * (36 // classes)
                x.append(rnd.randrange(160, 256) if hot else rnd.randrange(0, 96))
        write_npy(os.path.join(d, f'x_{name}.npy'), (n, 6, 6), '|u1', 'B', x)
        write_npy(os.path.join(d, f'y_{name}.npy'), (n,), '<i8', 'q', labels)


# A conv net of a model file on 6x6 images: a 3x3 'same' conv, a 3x3
# stride-2 conv (whose input gradient is a conv2d_grad_input), a dense layer.
CONV_MODEL = {'name': 'convs', 'input': [6, 6, 1],
              'layers': [{'type': 'conv2d', 'filters': 4, 'kernel_size': 3, 'padding': 'same',
                          'activation': 'relu'},
                         {'type': 'conv2d', 'filters': 5, 'kernel_size': 3, 'strides': 2,
                          'activation': 'relu'},
                         {'type': 'flatten'},
                         {'type': 'dense', 'units': 3}],
              'loss': 'softmax_cross_entropy'}


@case
def conv_model_on_rtl_matches_native():
    """The conv2d ops (forward, kernel and input gradients) run as GEMMs on the Verilated
    arrays: the same losses, simulated times and checkpoints as the native backend."""
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, 'convs.json')
        with open(model, 'w') as f:
            json.dump(CONV_MODEL, f)
        data = os.path.join(d, 'images')
        os.mkdir(data)
        image_set(data)
        out = {}
        for backend in ('native', 'rtl'):
            out[backend] = json.loads(run(
                'train', '--model', model, '--data', data, '--chip', 'tiny',
                '--train-batch-size', '32', '--steps', '4', '--iterations-per-loop', '2',
                '--backend', backend, '--no-eval', '--json', '--verbose', '0',
                '--model-dir', os.path.join(d, backend)).stdout)
        nat, rtl = out['native'], out['rtl']
        for key in ('global_step', 'loss', 'step_time_s', 'examples_per_s', 'mxu_utilization',
                    'simulated_seconds'):
            assert nat[key] == rtl[key], (key, nat[key], rtl[key])
        assert nat['global_step'] == 4
        assert rtl['rtl_tiles'] > 0, rtl
        with open(os.path.join(d, 'native', 'ckpt-4.safetensors'), 'rb') as a, \
                open(os.path.join(d, 'rtl', 'ckpt-4.safetensors'), 'rb') as b:
            assert a.read() == b.read()


@case
def vcd_waveform():
    if not have_data():
        return
    with tempfile.TemporaryDirectory() as d:
        vcd = os.path.join(d, 'mxu.vcd')
        p = run('train', *SMALL[:6], '--steps', '1', '--backend', 'rtl', '--no-eval',
                '--vcd', vcd, '--verbose', '0')
        assert f"waveform of core 0's array in {vcd}" in p.stdout, p.stdout
        assert 'RTL backend        2 Verilated 8x8 arrays' in p.stdout, p.stdout
        with open(vcd) as f:
            head = f.read(4096)
        assert head.startswith('$version'), head[:80]
        assert ' clk ' in head and 'out_valid' in head, head[:400]
        assert os.path.getsize(vcd) > 100000


@case
def vcd_full_disk():
    """A waveform on a full disk ends the run with a message, promptly (it used to hang
    inside Verilator's VCD writer, so the run has a short timeout of its own)."""
    if not have_data() or not os.access('/dev/full', os.W_OK):
        return
    args = [TPUSIM, 'train', *SMALL[:6], '--steps', '1', '--backend', 'rtl', '--no-eval',
            '--vcd', '/dev/full', '--verbose', '0']
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError('tpusim train --vcd /dev/full hung (no exit within 60 s)')
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    err = p.stderr
    assert err.count('\n') == 1, err
    assert err.startswith('tpusim train: error: '), err
    assert "writing the waveform file '/dev/full' failed: No space left on device" in err, err


@case
def backend_errors():
    expect_error(['train', '--backend', 'fpga'], 2, "--backend 'fpga' is not one of native, "
                 "rtl, systemc\n")
    expect_error(['train', '--vcd', 'x.vcd'], 2, '--vcd is the waveform of the RTL array',
                 '--backend rtl')
    expect_error(['train', '--backend', 'rtl', '--passes', '3'], 2,
                 '--backend rtl runs one-pass (bf16 input) matmuls only; --passes 3 needs '
                 '--backend native')
    expect_error(['train', '--backend', 'rtl', '--timing-only'], 2,
                 'does not go with --timing-only')
    if not have_data():
        return
    expect_error(['train', '--chip', 'tpu-v3', '--backend', 'rtl', '--steps', '1'], 1,
                 "--backend rtl: chip 'tpu-v3' has 128x128 matrix units",
                 'the built shapes are 8x8, 4x4, 4x8, 8x4', '--chip tiny')
    # checked before any work, as every output path
    expect_error(['train', *SMALL, '--backend', 'rtl', '--vcd', '/nonexistent-dir/w.vcd'], 2,
                 "--vcd '/nonexistent-dir/w.vcd': the directory '/nonexistent-dir' does not "
                 "exist")



if __name__ == '__main__':
    sys.exit(main())
