#!/usr/bin/env python3
"""`tpusim train`, `evaluate` and `predict` as a new user drives them: the trace of a whole
run, output paths checked before any work, config files, option lengths, the options each
subcommand takes, and refusals that say why and what to do instead.

usage: test_cli_train.py PATH/TO/tpusim
Prints CMocka-style summary lines so the suite's totals count each case.
"""
import json
import os
import sys
import tempfile

from cli_harness import TPUSIM, case, expect_error, main, run

FASHION = '/usr/share/datasets/fashion-mnist'


def have_data():
    if not os.path.isdir(FASHION):
        print('skipped: Fashion-MNIST is not installed')
        return False
    return True


@case
def trace_of_train_then_evaluate_holds_both():
    # the README's example: the trace is written after the evaluation that follows training,
    # which runs another program; the training's events keep their own program's names
    if not have_data():
        return
    with tempfile.TemporaryDirectory() as d:
        t = os.path.join(d, 't.json')
        run('train', '--chip', 'tiny', '--layers', '16', '--steps', '2', '--trace', t,
            '--verbose', '0')
        with open(t) as f:
            events = json.load(f)['traceEvents']
        names = {e['name'] for e in events if e['ph'] == 'X'}
        assert 'adam w0' in names, sorted(names)               # the training program
        assert 'classify_count counts' in names, sorted(names)  # the evaluation program
        assert 'outfeed loss' in names, sorted(names)


if __name__ == '__main__':
    sys.exit(main())
