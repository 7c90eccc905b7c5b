#!/usr/bin/env python3
"""`tpusim fit`: Keras's compile / fit / evaluate from the command line, as a user runs it.

What is checked: the Keras lines (verbose 2: "Epoch k/n" and one line per epoch; verbose 1
off a terminal: the progress bar's updates, one per execution at most; verbose 0: only the
test line), that a run prints the same bytes every time (times are simulated), validation's
val_ logs, every callback through its option (ModelCheckpoint's directories, read back by
`tpusim evaluate --model-dir`; EarlyStopping's stop and messages; CSVLogger's file;
LearningRateScheduler's messages and "lr" log), the options in combination (checkpoint +
early stopping + validation + steps_per_execution > 1 + several hosts), and every option
error's message.

Data: the first 200 training and 64 test images of Fashion-MNIST (made up when the package is
missing), on the tiny chip (2 cores: 2 replicas); a run takes well under a second."""
import os
import re
import tempfile

from cli_harness import case, expect_error, main, run, write_fashion_subset

TMP = tempfile.TemporaryDirectory()
DATA = write_fashion_subset(os.path.join(TMP.name, 'fashion'), 200, 64)
BASE = ['fit', '--chip', 'tiny', '--data', DATA, '--layers', '16', '--batch-size', '32']
MODEL = os.path.join(TMP.name, 'mlp.json')
with open(MODEL, 'w') as f:
    f.write('{"name": "mlp", "input": [28, 28, 1], "layers": [{"type": "flatten"}, '
            '{"type": "dense", "units": 16, "activation": "relu"}, '
            '{"type": "dense", "units": 10}], "loss": "softmax_cross_entropy"}')

# "7/7 - 0s - loss: 2.2756 - accuracy: 0.1650 - 5ms/epoch - 732us/step"
TIME = r'\d+(?:s|ms|us)'
EPOCH_LINE = (r'^(\d+)/\1 - \d+s - loss: [\d.e+-]+ - accuracy: [\d.e+-]+%s - ' + TIME
              + r'/epoch - ' + TIME + r'/step$')
TEST_LINE = r'^test \(64 examples\): loss [\d.]+ - accuracy [\d.]+$'


def path(name):
    return os.path.join(TMP.name, name)


def epoch_lines(out, extra=''):
    """The counts of fit's epoch lines (verbose 2): the output less its last two lines,
    model.evaluate's line (of the same form) and the test line."""
    return re.findall(EPOCH_LINE % extra, '\n'.join(out.splitlines()[:-2]), re.M)


@case
def verbose2_lines():
    p = run(*BASE, '--epochs', '3', '--verbose', '2')
    lines = p.stdout.splitlines()
    # 200 examples, batch 32: 7 batches an epoch, the last one partial (8 rows)
    assert [l for l in lines if l.startswith('Epoch ')] == ['Epoch 1/3', 'Epoch 2/3',
                                                           'Epoch 3/3'], p.stdout
    assert epoch_lines(p.stdout) == ['7', '7', '7'], p.stdout
    # then model.evaluate's own line (64 examples, 2 batches) and the test line
    assert re.match(r'^2/2 - \d+s - loss: [\d.]+ - accuracy: [\d.]+ - ' + TIME + r'/epoch - '
                    + TIME + '/step$', lines[-2]), lines
    assert re.match(TEST_LINE, lines[-1]), lines
    assert p.stderr == '', p.stderr
    # simulated times: the same bytes every run
    assert run(*BASE, '--epochs', '3', '--verbose', '2').stdout == p.stdout


@case
def verbose_auto_off_a_terminal_is_2():
    # Keras's 'auto' is 1; tpusim's is 1 on a terminal only, a difference the help states
    auto = run(*BASE, '--epochs', '2')
    assert auto.stdout == run(*BASE, '--epochs', '2', '--verbose', '2').stdout, auto.stdout
    assert '\r' not in auto.stdout, auto.stdout
    help_text = ' '.join(run('fit', '--help').stdout.split())
    assert ("without --verbose (Keras's verbose='auto', which is 1 unless absl logging is on) "
            'the progress bar is shown on a terminal only') in help_text, help_text
    assert ("LearningRateScheduler's message prints the rate as the float32 the chip uses "
            '(0.0005), where Keras prints the double of that float32 (0.0005000000237487257)'
            ) in help_text, help_text


@case
def one_epoch_has_no_epoch_line():
    p = run(*BASE, '--verbose', '2')
    assert 'Epoch ' not in p.stdout, p.stdout  # Keras prints "Epoch k/n" only when n > 1
    assert epoch_lines(p.stdout) == ['7'], p.stdout


@case
def verbose0_prints_the_test_line_only():
    p = run(*BASE, '--epochs', '2', '--verbose', '0')
    assert len(p.stdout.splitlines()) == 1 and re.match(TEST_LINE, p.stdout), p.stdout


@case
def verbose1_progress_bar_not_a_terminal():
    # steps_per_execution 4: the batch hooks come at batches 3 and 6 (the execution of 4,
    # then the epoch's last 3): the bar shows 4/7, then the epoch's end 7/7 (no update per
    # batch); off a terminal each update starts a new line (Keras's non-dynamic display)
    p = run(*BASE, '--epochs', '2', '--verbose', '1', '--steps-per-execution', '4')
    out = p.stdout
    bars = re.findall(r'^(\d)/7 \[([=>.]{30})\]', out, re.M)
    assert bars == [('4', '=' * 16 + '>' + '.' * 13), ('7', '=' * 30)] * 2, out
    assert re.search(r'^4/7 \[.{30}\] - ETA: \d+s - loss: [\d.]+ - accuracy: [\d.]+$', out,
                     re.M), out
    assert re.search(r'^7/7 \[={30}\] - \d+s ' + TIME + r'/step - loss: [\d.]+ - accuracy: '
                     r'[\d.]+$', out, re.M), out
    assert out.startswith('Epoch 1/2\n\n4/7 ['), out


@case
def validation_split_adds_val_logs():
    p = run(*BASE, '--epochs', '2', '--verbose', '2', '--validation-split', '0.25')
    # the last 50 examples validate: 150 train, 5 batches
    assert epoch_lines(p.stdout, r' - val_loss: [\d.]+ - val_accuracy: [\d.]+') == ['5', '5'], \
        p.stdout
    # validation every second epoch, and at the listed epochs
    p = run(*BASE, '--epochs', '3', '--verbose', '2', '--validation-split', '0.25',
            '--validation-freq', '2')
    lines = [l for l in p.stdout.splitlines() if l.startswith('5/5')]
    assert ['val_loss' in l for l in lines] == [False, True, False], p.stdout
    p = run(*BASE, '--epochs', '3', '--verbose', '2', '--validation-split', '0.25',
            '--validation-freq', '1,3')
    lines = [l for l in p.stdout.splitlines() if l.startswith('5/5')]
    assert ['val_loss' in l for l in lines] == [True, False, True], p.stdout
    # a list of one epoch (Keras's validation_freq=[3]: epoch 3 only, not every third), and
    # a list in any order with a repeat (Keras tests `epoch in validation_freq`)
    for freq in ('[3]', '3,'):
        p = run(*BASE, '--epochs', '6', '--verbose', '2', '--validation-split', '0.25',
                '--validation-freq', freq)
        lines = [l for l in p.stdout.splitlines() if l.startswith('5/5')]
        assert ['val_loss' in l for l in lines] == [False, False, True, False, False,
                                                     False], (freq, p.stdout)
    # validation that runs short says so, as Keras's evaluate does (50 rows: 2 batches)
    p = run(*BASE, '--verbose', '2', '--validation-split', '0.25', '--validation-steps', '100')
    assert ('tpusim fit: warning: Your input ran out of data; interrupting training.'
            in p.stderr and '(in this case, 100 batches)' in p.stderr), p.stderr
    p = run(*BASE, '--verbose', '2', '--validation-split', '0.25', '--validation-steps', '2')
    assert p.stderr == '', p.stderr
    p = run(*BASE, '--epochs', '3', '--verbose', '2', '--validation-split', '0.25',
            '--validation-freq', '3,1,3')
    lines = [l for l in p.stdout.splitlines() if l.startswith('5/5')]
    assert ['val_loss' in l for l in lines] == [True, False, True], p.stdout


@case
def csv_log():
    csv = path('log.csv')
    run(*BASE, '--epochs', '3', '--verbose', '0', '--validation-split', '0.25',
        '--csv-log', csv)
    with open(csv, 'rb') as f:
        rows = f.read().decode().split('\r\n')
    assert rows[0] == 'epoch,accuracy,loss,val_accuracy,val_loss', rows
    assert [r.split(',')[0] for r in rows[1:4]] == ['0', '1', '2'] and rows[4] == '', rows
    for r in rows[1:4]:
        vals = [float(v) for v in r.split(',')[1:]]
        assert all(0 <= v < 20 for v in vals), rows
    # append: rows added under the same header, the epochs from --initial-epoch
    run(*BASE, '--epochs', '3', '--initial-epoch', '2', '--verbose', '0',
        '--validation-split', '0.25', '--csv-log', csv, '--csv-append')
    with open(csv, 'rb') as f:
        rows = f.read().decode().split('\r\n')
    assert rows[0].startswith('epoch,') and rows[4].startswith('2,') and len(rows) == 6, rows


@case
def lr_scheduler():
    p = run(*BASE, '--epochs', '3', '--verbose', '2', '--lr-scheduler-decay', '0.5',
            '--learning-rate', '0.01')
    msgs = re.findall(r'^Epoch (\d): LearningRateScheduler setting learning rate to '
                      r'([\d.e-]+)\.$', p.stdout, re.M)
    # lr * 0.5 from epoch 1 (0-based) on: 0.01, 0.005, 0.0025 (each the f32's shortest digits)
    assert msgs == [('1', '0.01'), ('2', '0.005'), ('3', '0.0025')], p.stdout
    # the "lr" log, on each epoch line
    lrs = re.findall(r' - lr: ([\d.e+-]+) - ', p.stdout)
    assert lrs == ['0.0100', '0.0050', '0.0025'], p.stdout
    p = run(*BASE, '--epochs', '3', '--verbose', '0', '--lr-scheduler-decay', '0.5',
            '--lr-scheduler-start', '2')
    assert 'LearningRateScheduler' not in p.stdout  # messages only with --verbose 1 or 2


@case
def checkpoint_early_stopping_validation_executions_hosts():
    ckpt = path('ckpt')
    # min_delta 10: epoch 1 improves on inf, epoch 2 cannot improve by 10: with patience 0
    # fit stops after epoch 2 (of 6), restoring epoch 1's weights
    p = run('fit', '--chip', 'tiny', '--data', DATA, '--model', MODEL, '--batch-size', '32',
            '--epochs', '6', '--verbose', '2', '--validation-split', '0.2',
            '--steps-per-execution', '3', '--hosts', '2', '--chips', '1',
            '--per-host-input-for-training', 'PER_HOST_V1',
            '--eval-training-input-configuration', 'SLICED',
            '--checkpoint', ckpt + '/{epoch:02d}-{val_loss:.2f}',
            '--early-stopping', 'patience=0,min_delta=10,restore_best_weights=true',
            '--csv-log', path('combo.csv'))
    out = p.stdout
    assert re.findall(r'^Epoch \d/6$', out, re.M) == ['Epoch 1/6', 'Epoch 2/6'], out
    # 160 train examples: 5 batches an epoch, executions of 3 then 2
    assert len(epoch_lines(out, r' - val_loss: [\d.]+ - val_accuracy: [\d.]+')) == 2, out
    saved = re.findall(r'^Epoch (\d): saving model to (.*)$', out, re.M)
    assert [s[0] for s in saved] == ['1', '2'], out
    assert 'Restoring model weights from the end of the best epoch: 1.' in out, out
    assert re.search(r'^Epoch 2: early stopping$', out, re.M), out
    dirs = sorted(os.listdir(ckpt))
    assert len(dirs) == 2 and dirs[0].startswith('01-') and dirs[1].startswith('02-'), dirs
    assert [os.path.join(ckpt, d) for d in dirs] == [s[1] for s in saved], (dirs, saved)
    for d in dirs:
        assert os.path.exists(os.path.join(ckpt, d, 'checkpoint.json')), d
        assert any(n.startswith('ckpt-') for n in os.listdir(os.path.join(ckpt, d))), d
    # the checkpoint is a model_dir the estimator-style commands read
    # (epoch 1's, the weights EarlyStopping restored: the same test loss and accuracy as
    # fit's own evaluation)
    e = run('evaluate', '--chip', 'tiny', '--data', DATA, '--model', MODEL,
            '--model-dir', os.path.join(ckpt, dirs[0]), '--eval-batch-size', '32')
    fit_test = re.search(r'^test \(64 examples\): loss ([\d.]+) - accuracy ([\d.]+)$', out,
                         re.M)
    ev = re.search(r'accuracy ([\d.]+) %, loss ([\d.]+) over 64 examples', e.stdout)
    assert fit_test and ev, (out, e.stdout)
    assert ev.group(2) == fit_test.group(1), (ev.group(0), fit_test.group(0))
    assert abs(float(ev.group(1)) / 100 - float(fit_test.group(2))) < 6e-5, \
        (ev.group(0), fit_test.group(0))  # 20.31 % against 0.2031: both rounded prints
    # the CSV's last row: the epoch it stopped at
    with open(path('combo.csv'), 'rb') as f:
        rows = f.read().decode().split('\r\n')
    assert [r.split(',')[0] for r in rows[1:-1]] == ['0', '1'], rows


@case
def checkpoint_every_n_batches():
    ckpt = path('every')
    # 160 training examples, 5 batches, executions of 3: the batch hooks come at batches 2
    # and 4. save_freq 6, counted as Keras counts: 3, 5; then 5 + 3 = 8 (a save at epoch 2's
    # batch 2: "b3", the count restarts), 2; then 2 + 3 = 5, 7 (a save at epoch 3's batch 4)
    p = run(*BASE, '--epochs', '3', '--verbose', '2', '--validation-split', '0.2',
            '--steps-per-execution', '3', '--checkpoint', ckpt + '/e{epoch}b{batch}',
            '--checkpoint-freq', '6')
    assert sorted(os.listdir(ckpt)) == ['e2b3', 'e3b5'], (os.listdir(ckpt), p.stdout)


@case
def checkpoint_best_only():
    ckpt = path('best')
    p = run(*BASE, '--epochs', '3', '--verbose', '1', '--validation-split', '0.2',
            '--checkpoint', ckpt, '--checkpoint-best-only', '--checkpoint-monitor',
            'val_accuracy')
    msgs = re.findall(r'^Epoch (\d): val_accuracy (improved from|did not improve from)',
                      p.stdout, re.M)
    assert [m[0] for m in msgs] == ['1', '2', '3'] and msgs[0][1] == 'improved from', p.stdout
    assert 'improved from -inf to ' in p.stdout, p.stdout
    assert os.listdir(ckpt) and 'checkpoint.json' in os.listdir(ckpt), os.listdir(ckpt)


@case
def help_says_where_tpusim_differs():
    p = run('fit', '--help')
    assert p.stdout.startswith('usage: tpusim fit [options]'), p.stdout
    for needle in ('Where tpusim differs from Keras', 'times are simulated',
                   '--steps-per-execution N|auto', '--validation-split X',
                   '--early-stopping K=V,...', '--checkpoint PATH', '--csv-log FILE',
                   '--input-partition-dims DIMS', '--model FILE.json'):
        assert needle in p.stdout, needle
    assert 'fit ' in run('--help').stdout


@case
def option_errors():
    e = expect_error
    e([*BASE, '--epochs', '0'], 2, "--epochs '0' is not a whole number from 1 to 1000000")
    e([*BASE, '--steps-per-execution', '0'], 2,
      "--steps-per-execution '0' is neither a whole number of batches from 1 to "
      "1000000000000 nor 'auto'; give e.g. --steps-per-execution 32")
    # the CLI's bound is compile's (TPU_TUNER_MAX_STEPS): one above is a usage error, the
    # bound itself runs (cut to the epoch's 7 batches)
    e([*BASE, '--steps-per-execution', '1000000000001'], 2,
      "--steps-per-execution '1000000000001' is neither a whole number of batches from 1 to "
      "1000000000000 nor 'auto'")
    run(*BASE, '--steps-per-execution', '1000000000000', '--verbose', '0')
    e([*BASE, '--validation-freq', '3,,2'], 2,
      "--validation-freq '3,,2' is neither a whole number of epochs from 1 to 1000000 nor a "
      "list of at most 64 epochs (1-based); give e.g. --validation-freq 2 (every second "
      "epoch), --validation-freq 1,5,10 or, for one epoch only, --validation-freq [3] (or 3,)")
    e([*BASE, '--validation-freq', '[]'], 2, "--validation-freq '[]' is neither")
    e([*BASE, '--validation-steps', '2'], 2,
      '--validation-steps applies to validation, and there is none: give --validation-split')
    e([*BASE, '--validation-split', '1'], 2,
      "--validation-split '1' is not a number at least 0 and less than 1; give e.g. "
      "--validation-split 0.1")
    e([*BASE, '--initial-epoch', '3', '--epochs', '3'], 2,
      '--initial-epoch 3 is not below --epochs 3')
    e([*BASE, '--checkpoint-best-only'], 2,
      'the --checkpoint-* options shape ModelCheckpoint, and no --checkpoint PATH was given')
    e([*BASE, '--checkpoint', 'ck/{epoch'], 2,
      '--checkpoint: Failed to format this callback filepath: "ck/{epoch". Reason: Single '
      "'{' encountered in format string")
    e([*BASE, '--checkpoint', 'ck', '--checkpoint-mode', 'up'], 2,
      "--checkpoint-mode 'up' is not one of auto, min, max")
    e([*BASE, '--checkpoint', 'ck', '--checkpoint-freq', 'x'], 2,
      "--checkpoint-freq 'x' is neither 'epoch' nor a whole number of batches")
    e([*BASE, '--checkpoint', 'ck', '--checkpoint-best-only', '--checkpoint-monitor',
       'val_acc', '--validation-split', '0.1'], 2,
      "--checkpoint-monitor 'val_acc' is not a log this fit writes (loss, accuracy, "
      "val_loss, val_accuracy); give one of those")
    e([*BASE, '--early-stopping', 'patience=x'], 2,
      "--early-stopping: patience 'x' is not valid")
    e([*BASE, '--early-stopping', 'wait=2'], 2,
      "--early-stopping: 'wait' is not an argument of EarlyStopping; give KEY=VALUE pairs")
    e([*BASE, '--early-stopping', 'patience=2'], 2,
      "--early-stopping monitor 'val_loss' is not a log this fit writes (loss, accuracy): "
      "the val_ logs need --validation-split; give one of those")
    e([*BASE, '--csv-append'], 2, '--csv-append goes with --csv-log FILE')
    e([*BASE, '--csv-log', path('no/such/dir/x.csv')], 2, '--csv-log')
    e([*BASE, '--lr-scheduler-start', '2'], 2,
      '--lr-scheduler-start is the epoch the scheduler\'s decay starts at')
    e(['fit', '--chip', 'tiny', '--data', DATA, '--model', MODEL, '--lr-schedule', 'cosine',
       '--decay-steps', '10', '--lr-scheduler-decay', '0.5'], 2,
      '--lr-scheduler-decay sets the rate from the host at each epoch')
    e([*BASE, '--class-weight', '0:1,2:1'], 2,
      "--class-weight '0:1,2:1': expected class_weight to have keys from 0 to one less than "
      "the number of classes (10: 0 to 9)")
    e([*BASE, '--class-weight', 'heavy'], 2,
      "--class-weight 'heavy' is not a list of CLASS:WEIGHT pairs")
    # a weight finite as a double but beyond float32 (the chip's type) would become inf
    big = ','.join(f'{c}:1' for c in range(9)) + ',9:' + '1' * 47
    e([*BASE, '--class-weight', big], 2,
      f"--class-weight '{big}' is not a list of CLASS:WEIGHT pairs (a class from 0, a weight "
      "from 0 to 3.4e38, the largest float32)")
    e([*BASE, '--metrics', 'accuracy,accuracy'], 2,
      "--metrics 'accuracy,accuracy' names accuracy twice")
    e([*BASE, '--metrics', 'f1'], 2, '--metrics: ')
    e([*BASE, '--model', MODEL], 2, 'give one of --model and --layers')
    e([*BASE, '--steps', '10'], 2, "unknown option '--steps'; run 'tpusim fit --help'")
    e([*BASE, '--batch-size', '33'], 2, '33')
    e([*BASE, '--hosts', '2', '--chips', '1', '--per-host-input-for-training', 'PER_HOST_V1'],
      2, 'evaluation on 2 hosts is only supported with per_host_input_for_training BROADCAST '
      "or PER_HOST_V2, or eval_training_input_configuration SLICED", "(fit's validation and "
      'its evaluation of the test set run in evaluation mode)')


@case
def fit_arguments():
    # steps_per_epoch: 3 batches an epoch; initial_epoch: epochs 3 and 4 of 4 run
    p = run(*BASE, '--epochs', '4', '--initial-epoch', '2', '--steps-per-epoch', '3',
            '--verbose', '2')
    assert re.findall(r'^Epoch (\d)/4$', p.stdout, re.M) == ['3', '4'], p.stdout
    assert epoch_lines(p.stdout) == ['3', '3'], p.stdout
    # the order: shuffled from --seed each epoch (default), or kept
    def losses(*extra):
        out = run(*BASE, '--epochs', '2', '--verbose', '2', *extra).stdout
        return re.findall(r' - loss: ([\d.]+) - ', out)
    shuffled, kept = losses(), losses('--no-shuffle')
    assert shuffled != kept and losses('--seed', '7') != shuffled, (shuffled, kept)
    assert kept == losses('--no-shuffle'), kept
    # steps_per_execution auto (Keras's tuner) trains the same epochs
    p = run(*BASE, '--epochs', '2', '--verbose', '2', '--steps-per-execution', 'auto')
    assert epoch_lines(p.stdout) == ['7', '7'], p.stdout
    # validation's batch and steps: 50 validation examples, batches of 16, 2 of them
    p = run(*BASE, '--epochs', '2', '--verbose', '2', '--validation-split', '0.25',
            '--validation-batch-size', '16', '--validation-steps', '2', '--metrics',
            'accuracy,sparse_categorical_crossentropy')
    assert epoch_lines(p.stdout, r' - sparse_categorical_crossentropy: [\d.]+ - val_loss: '
                       r'[\d.]+ - val_accuracy: [\d.]+ - val_sparse_categorical_crossentropy: '
                       r'[\d.]+') == ['5', '5'], p.stdout


@case
def class_weight_trains():
    w = ','.join(f'{c}:{1 + c / 10}' for c in range(10))
    p = run(*BASE, '--epochs', '2', '--verbose', '2', '--class-weight', w)
    assert epoch_lines(p.stdout) == ['7', '7'], p.stdout


if __name__ == '__main__':
    raise SystemExit(main())
