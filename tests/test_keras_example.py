#!/usr/bin/env python3
"""examples/keras_mlp (the Keras-style API of keras.h on Fashion-MNIST) run as a user runs it:

  - it trains with validation_split, prints a line per epoch with the Keras logs (loss,
    accuracy, val_loss, val_accuracy) and its test accuracy line;
  - steps_per_execution changes how many batches each execution runs, never the model: the
    test accuracy line is the same, byte for byte, for 1, 7 and 'auto';
  - a small budget reaches a stated accuracy floor;
  - fit is the estimator-style run of the same net: --estimator-style (runtime.h's estimator
    over the same training rows, shuffled with the same seed, for the same steps) prints the
    same test accuracy and loss line, byte for byte, where the training rows split into
    whole batches (1280 rows, validation_split 0.1: 1152 = 18 batches of 64);
  - a flag it does not know, or a bad value, is a usage error (exit 2) naming the flag.

Every run is deterministic (fixed seed, no shuffle differences between the runs compared),
so the floor is set below the measured value by the margin stated at the case.

usage: test_keras_example.py PATH/TO/keras_mlp [b_sanitize]
Prints CMocka-style summary lines so the suite's totals count each case.
"""
import os
import re
import sys

import cli_harness
from cli_harness import Skip, case, main, run

FASHION = '/usr/share/datasets/fashion-mnist'
SANITIZED = len(sys.argv) > 2 and sys.argv[2] not in ('', 'none')
ACCURACY = re.compile(r'^test accuracy: (\d\.\d{4}) \(loss (\d+\.\d{4}), 10000 examples\)$')
EPOCH = re.compile(r'^epoch (\d+)/(\d+) - loss: \d+\.\d{4} - accuracy: \d\.\d{4} - '
                   r'val_loss: \d+\.\d{4} - val_accuracy: \d\.\d{4} - \d+\.\d{3}s simulated$')


def need_data():
    if not os.path.isdir(FASHION):
        raise Skip('Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)')


def small(*args):
    """A small budget: the first 1200 training examples (1080 train, 120 validation)."""
    examples = '600' if SANITIZED else '1200'
    return run('--train-examples', examples, '--batch', '64', '--threads', '1', *args)


@case
def example_trains_validates_and_prints_its_accuracy():
    need_data()
    p = small('--epochs', '2')
    lines = p.stdout.splitlines()
    assert len(lines) == 3, p.stdout
    assert [EPOCH.match(x).group(1) for x in lines[:2]] == ['1', '2'], lines
    m = ACCURACY.match(lines[2])
    assert m, lines[2]
    if not SANITIZED:
        # 2 epochs of 17 batches of 64 (the last one partial, 56 rows): measured 0.6978;
        # chance is 0.10, the floor leaves 10 points
        assert float(m.group(1)) > 0.6, m.group(1)


@case
def steps_per_execution_does_not_change_the_model():
    need_data()
    last = {spe: small('--steps-per-execution', spe).stdout.splitlines()[-1]
            for spe in ('1', '7', 'auto')}
    assert len(set(last.values())) == 1, last


@case
def fit_is_the_estimator_style_run():
    need_data()
    examples = '640' if SANITIZED else '1280'  # 576 or 1152 training rows: whole batches
    args = ('--train-examples', examples, '--batch', '64', '--threads', '1', '--epochs', '2',
            '--steps-per-execution', '7')
    fit = run(*args).stdout.splitlines()
    est = run(*args, '--estimator-style').stdout.splitlines()
    assert len(fit) == 3 and len(est) == 1, (fit, est)
    assert ACCURACY.match(est[0]), est
    assert fit[-1] == est[0], (fit[-1], est[0])


@case
def example_rejects_an_unknown_flag_and_a_bad_value():
    p = run('--epoch', '1', expect=2)
    assert p.stdout == '' and '--epoch is not a flag keras_mlp knows' in p.stderr, p.stderr
    p = run('--validation-split', '1', expect=2)
    assert '--validation-split takes a fraction in [0, 0.99]' in p.stderr, p.stderr
    p = run('--help')
    assert p.stdout.startswith('usage: keras_mlp '), p.stdout


if __name__ == '__main__':
    cli_harness.TPUSIM = sys.argv[1]
    sys.exit(main())
