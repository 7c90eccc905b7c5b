#!/usr/bin/env python3
"""`tpusim train/evaluate/predict --backend systemc`, driven as a user drives it: the chip as
a SystemC/TLM-2.0 model, reached through TLM transactions. The same run on the native backend
gives the same summary (every value and every simulated time, text and JSON), the same
checkpoint bytes and the same predictions; the options that need the native chip's insides
(--trace, --step-shares, --check-equivalence) are refused with their one-line message. In a
build without the SystemC model (TPUSIM_HAVE_SYSTEMC=0) the option is refused with the way to
build it.

usage: test_cli_systemc.py PATH/TO/tpusim
Prints CMocka-style summary lines so the suite's totals count each case.
"""
import json
import os
import re
import sys
import tempfile

from cli_harness import Skip, case, expect_error, main, run, write_fashion_subset

HAVE = os.environ.get('TPUSIM_HAVE_SYSTEMC') == '1'

# A small model on the tiny chip (8x8 MXU, 2 cores): 784-12-10, a few steps in loops of 2.
MODEL = ['--chip', 'tiny', '--layers', '12', '--train-batch-size', '24',
         '--iterations-per-loop', '2', '--eval-batch-size', '40']
SMALL = MODEL + ['--steps', '5']

# The summary lines that measure the host's wall time (or the bus), not the simulated chip.
WALL = re.compile(r'^  (simulation|evaluation wall|SystemC backend)\b.*\n|"wall_seconds": [0-9.]+, |'
                  r'"backend": "[a-z]+"|\d+(\.\d+)? s of wall time', re.M)


def need_systemc():
    if not HAVE:
        raise Skip('this tpusim was built without the SystemC model (-Dsystemc=enabled)')


def data_dir(d):
    data = os.path.join(d, 'data')
    os.mkdir(data)
    write_fashion_subset(data, 240, 80)
    return data


@case
def train_json_equals_native():
    need_systemc()
    with tempfile.TemporaryDirectory() as d:
        data = data_dir(d)
        out = {}
        for backend in ('native', 'systemc'):
            out[backend] = json.loads(run('train', *SMALL, '--data', data, '--backend', backend,
                                          '--json', '--model-dir',
                                          os.path.join(d, backend)).stdout)
        nat, sc = out['native'], out['systemc']
        assert nat['backend'] == 'native' and sc['backend'] == 'systemc', (nat, sc)
        assert nat['global_step'] == 5, nat
        # every figure of the simulated device, values and cycles: the same
        # and what the bus did
        assert sc.pop('systemc_transactions') > 4 * 2 * 5, sc
        assert sc.pop('systemc_time_s') > 0, sc
        del nat['backend'], sc['backend'], nat['wall_seconds'], sc['wall_seconds']
        assert nat == sc, (nat, sc)
        # the checkpoints hold the same weights and optimizer state, byte for byte
        for name in sorted(os.listdir(os.path.join(d, 'native'))):
            if name.endswith('.safetensors'):
                with open(os.path.join(d, 'native', name), 'rb') as a, \
                        open(os.path.join(d, 'systemc', name), 'rb') as b:
                    assert a.read() == b.read(), name


@case
def timing_only_equals_native():
    """--timing-only: no values, the same cycles (the feeds carry no data through the bus)."""
    need_systemc()
    with tempfile.TemporaryDirectory() as d:
        data = data_dir(d)
        out = {}
        for backend in ('native', 'systemc'):
            out[backend] = json.loads(run('train', *SMALL, '--data', data, '--backend', backend,
                                          '--timing-only', '--json').stdout)
        nat, sc = out['native'], out['systemc']
        assert nat['loss'] is None and nat['step_time_s'] > 0, nat
        for o in (nat, sc):
            for key in ('backend', 'wall_seconds', 'systemc_transactions', 'systemc_time_s'):
                o.pop(key, None)
        assert nat == sc, (nat, sc)


@case
def train_text_summary_equals_native():
    """The text summary a user reads: the same lines but the wall-time ones."""
    need_systemc()
    with tempfile.TemporaryDirectory() as d:
        data = data_dir(d)
        text = {}
        for backend in ('native', 'systemc'):
            text[backend] = run('train', *SMALL, '--data', data, '--backend', backend,
                                '--verbose', '0').stdout
        assert 'accuracy' in text['native'], text['native']
        assert re.search(r'^  SystemC backend    [1-9]\d* TLM transactions; SystemC time '
                         r'0\.\d{6} s \(global quantum 10000 ns\)$', text['systemc'], re.M), \
            text['systemc']
        nat, sc = (WALL.sub('', text[b]) for b in ('native', 'systemc'))
        assert nat == sc, (text['native'], text['systemc'])


@case
def evaluate_and_predict_equal_native():
    need_systemc()
    with tempfile.TemporaryDirectory() as d:
        data = data_dir(d)
        md = os.path.join(d, 'model')
        run('train', *SMALL, '--data', data, '--model-dir', md, '--no-eval', '--verbose', '0')
        ev, files = {}, {}
        for backend in ('native', 'systemc'):
            ev[backend] = json.loads(run('evaluate', *SMALL, '--data', data, '--model-dir', md,
                                         '--backend', backend, '--json').stdout)
            files[backend] = os.path.join(d, f'logits-{backend}.npy')
            pr = json.loads(run('predict', *MODEL, '--data', data, '--model-dir', md,
                                '--backend', backend, '--limit', '50', '--output',
                                files[backend], '--json').stdout)
            assert pr['predictions'] == 50, pr
        for e in ev.values():
            e.pop('wall_seconds', None)
            e.pop('backend', None)
        assert ev['native'] == ev['systemc'], ev
        with open(files['native'], 'rb') as a, open(files['systemc'], 'rb') as b:
            assert a.read() == b.read()


@case
def native_only_options_are_refused():
    need_systemc()
    expect_error(['train', *SMALL, '--backend', 'systemc', '--trace', '/tmp/t.json'], 2,
                 '--backend systemc records no timeline', 'leave --trace out',
                 '--backend native (the same cycles)')
    expect_error(['train', *SMALL, '--backend', 'systemc', '--step-shares'], 2,
                 '--backend systemc keeps no per-op statistics', 'leave --step-shares out')
    expect_error(['train', *MODEL, '--backend', 'systemc', '--check-equivalence', '2'], 2,
                 '--check-equivalence runs on the native backend',
                 'leave --backend systemc out')
    expect_error(['train', *SMALL, '--backend', 'systemc', '--vcd', '/tmp/w.vcd'], 2,
                 '--vcd is the waveform of the RTL array: it goes with --backend rtl')


@case
def refused_in_a_build_without_systemc():
    if HAVE:
        raise Skip('this tpusim has the SystemC model; the refusal is for builds without it')
    with tempfile.TemporaryDirectory() as md:
        for cmd in ('train', 'evaluate', 'predict'):
            refused_without_systemc([cmd, '--chip', 'tiny', '--backend', 'systemc',
                                     '--model-dir', md])


def refused_without_systemc(argv):
    expect_error(argv, 2,
                 '--backend systemc: this tpusim was built without the SystemC/TLM-2.0 '
                 "model; rebuild with 'meson configure -Dsystemc=enabled' (needs "
                 'libsystemc-dev and a C++17 compiler), or use --backend native')


@case
def backend_word_is_checked():
    expect_error(['train', '--backend', 'tlm'], 2,
                 "--backend 'tlm' is not one of native, rtl, systemc")


if __name__ == '__main__':
    sys.exit(main())
