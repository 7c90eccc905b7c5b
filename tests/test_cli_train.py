#!/usr/bin/env python3
"""`tpusim train`, `evaluate` and `predict` as a new user drives them: the trace of a whole
run, output paths checked before any work, config files, option lengths, the options each
subcommand takes, and refusals that say why and what to do instead.

usage: test_cli_train.py PATH/TO/tpusim
Prints CMocka-style summary lines so the suite's totals count each case.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import cli_harness
from cli_harness import Skip, case, expect_error, main, run

FASHION = '/usr/share/datasets/fashion-mnist'


def need_data():
    if not os.path.isdir(FASHION):
        raise Skip('Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)')


@case
def trace_of_train_then_evaluate_holds_both():
    # the README's example: the trace is written after the evaluation that follows training,
    # which runs another program; the training's events keep their own program's names
    need_data()
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



# one small trained model, made by the first case that needs it
_MODEL = {}
_TMP = tempfile.TemporaryDirectory()
# relative paths in the cases land in the temporary directory, never in the source tree
if os.sep in cli_harness.TPUSIM:
    cli_harness.TPUSIM = os.path.abspath(cli_harness.TPUSIM)
os.chdir(_TMP.name)


def trained_model_dir():
    if 'dir' not in _MODEL:
        md = os.path.join(_TMP.name, 'model')
        run('train', '--chip', 'tiny', '--layers', '8', '--steps', '2', '--model-dir', md,
            '--no-eval', '--verbose', '0')
        _MODEL['dir'] = md
    return _MODEL['dir']


@case
def resumed_training_counts_the_steps_it_ran():
    # the estimator restores the checkpoint inside train: the progress, the epoch lines and
    # the step time count the steps this run ran, not the checkpoint's (32 steps an epoch)
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, 'data')
        cli_harness.write_fashion_subset(data, 1024, 64)
        base = ['--chip', 'tiny', '--layers', '16', '--data', data, '--train-batch-size', '32',
                '--model-dir', os.path.join(d, 'md'), '--no-eval']
        run('train', *base, '--steps', '30', '--verbose', '0')
        p = run('train', *base, '--steps', '40', '--iterations-per-loop', '4', '--verbose', '2')
        assert re.findall(r'^epoch (\d+) done by global step (\d+)', p.stderr, re.M) == \
            [('1', '34'), ('2', '66')], p.stderr  # at the loop that crosses it
        assert 'training ended at global step 70 (epoch 2.19)' in p.stderr, p.stderr
        p = run('train', *base, '--max-steps', '90', '--iterations-per-loop', '4', '--verbose',
                '1')
        assert '20/20 steps' in p.stderr and '/90 steps' not in p.stderr, p.stderr
        one = json.loads(run('train', *base, '--steps', '10', '--iterations-per-loop', '10',
                             '--verbose', '0', '--json').stdout)
        # one loop of 10 steps: the step time is the loop's device time over 10 steps
        assert one['global_step'] == 100, one
        with open(os.path.join(d, 'md', 'metrics.jsonl')) as f:
            last = [json.loads(line) for line in f if '"train"' in line][-1]
        assert last['steps'] == 10, last
        assert abs(one['step_time_s'] - last['device_seconds'] / 10) <= 1e-9 * 10, (one, last)


@case
def flags_after_config_replace_its_training_length():
    # README: flags after --config override it; "epochs" in the file, --steps after it
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, 'data')
        cli_harness.write_fashion_subset(data, 1024, 64)
        cfg = os.path.join(d, 'c.json')
        with open(cfg, 'w') as f:
            json.dump({'epochs': 1, 'chip': 'tiny', 'layers': '16', 'data': data,
                       'train_batch_size': 32, 'no_eval': True, 'verbose': 0}, f)
        j = json.loads(run('train', '--config', cfg, '--steps', '2', '--json').stdout)
        assert j['global_step'] == 2, j
        # two of them in one place is still an error
        with open(cfg, 'w') as f:
            json.dump({'epochs': 1, 'steps': 3}, f)
        expect_error(['train', '--config', cfg], 2, 'give one of --steps, --max-steps and '
                     '--epochs')
        expect_error(['train', '--steps', '2', '--epochs', '1'], 2, 'give one of --steps')
        # --reference without an evaluation on the chip compares with nothing
        p = run('train', '--chip', 'tiny', '--layers', '16', '--data', data, '--steps', '2',
                '--train-batch-size', '32', '--no-eval', '--reference', '--verbose', '0')
        assert re.search(r'^  fp32 host reference [\d.]+ %, [\d.]+ s$', p.stdout, re.M), \
            p.stdout


@case
def devices_as_outputs_need_no_writable_directory():
    # /dev/null is written in place: its directory (/dev) need not be writable, which only
    # shows for a user who is not root
    if os.geteuid() != 0 or not shutil.which('setpriv'):
        raise Skip('needs root and setpriv to run tpusim as another user')
    d = tempfile.mkdtemp()
    try:
        os.chmod(d, 0o755)
        data = os.path.join(d, 'data')
        cli_harness.write_fashion_subset(data, 512, 64)
        # a copy of the binary the other user can reach (the build tree may sit under /root)
        exe = os.path.join(d, 'tpusim')
        shutil.copy(cli_harness.TPUSIM, exe)
        for root, dirs, files in os.walk(d):
            for n in dirs + files:
                os.chmod(os.path.join(root, n), 0o755)
        p = subprocess.run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups',
                            exe, 'train', '--chip', 'tiny', '--layers', '8',
                            '--data', data, '--steps', '1', '--no-eval', '--verbose', '0',
                            '--trace', '/dev/null'], capture_output=True, text=True, timeout=120,
                           cwd=d)
        assert p.returncode == 0, p.stderr
    finally:
        shutil.rmtree(d)


@case
def predict_writes_its_trace():
    need_data()
    md = trained_model_dir()
    with tempfile.TemporaryDirectory() as d:
        t = os.path.join(d, 'p.json')
        p = run('predict', '--chip', 'tiny', '--layers', '8', '--model-dir', md, '--limit', '10',
                '--trace', t)
        assert '10 predictions' in p.stdout, p.stdout
        with open(t) as f:
            names = {e['name'] for e in json.load(f)['traceEvents'] if e['ph'] == 'X'}
        assert any(n.startswith('matmul') for n in names), sorted(names)
        assert not any(n.startswith('adam') for n in names), sorted(names)


@case
def output_paths_are_checked_before_any_work():
    with tempfile.TemporaryDirectory() as d:
        md = os.path.join(d, 'new-model')
        missing = os.path.join(d, 'no-such-dir', 't.json')
        # before any work: training would have made the model_dir and its first checkpoint
        expect_error(['train', '--chip', 'tiny', '--layers', '8', '--steps', '2', '--model-dir',
                      md, '--trace', missing], 2,
                     f"--trace '{missing}': the directory '{os.path.dirname(missing)}' does not "
                     "exist", 'mkdir -p')
        assert not os.path.exists(md)
        expect_error(['train', '--chip', 'tiny', '--steps', '1', '--trace', d], 2,
                     f"--trace '{d}' is a directory; give the name of a file to write")
        expect_error(['predict', '--model-dir', md, '--output', d], 2,
                     f"--output '{d}' is a directory", 'logits.npy')
        expect_error(['predict', '--model-dir', md, '--output', missing], 2,
                     f"--output '{missing}': the directory")
        afile = os.path.join(d, 'a-file')
        open(afile, 'w').close()
        expect_error(['train', '--chip', 'tiny', '--steps', '1', '--model-dir', afile], 2,
                     f"--model-dir '{afile}' is a file, not a directory")
        expect_error(['train', '--chip', 'tiny', '--steps', '1', '--model-dir',
                      os.path.join(afile, 'm')], 2, 'Not a directory')
        expect_error(['train', '--chip', 'tiny', '--steps', '1', '--trace',
                      os.path.join(afile, 't.json')], 2,
                     f"--trace '{afile}/t.json' cannot be written: Not a directory")
        assert not os.path.exists(md)


@case
def config_string_options_are_kept():
    # several string options in one file: each keeps its own value after the file is closed
    need_data()
    with tempfile.TemporaryDirectory() as d:
        md = os.path.join(d, 'm')
        cfg = os.path.join(d, 'run.json')
        with open(cfg, 'w') as f:
            json.dump({'chip': 'tiny', 'layers': '8,4', 'data': FASHION, 'model_dir': md,
                       'optimizer': 'sgd', 'iterations_per_loop': '2', 'json': True,
                       'no_eval': True, 'verbose': 0}, f)
        out = json.loads(run('train', '--config', cfg, '--steps', '2').stdout)
        assert out['chip'] == 'tiny' and out['layers'] == '784-8-4-10', out
        assert os.path.isdir(md) and 'test_accuracy' not in out


LONG_PATH = 'a' * 600


@case
def long_values_are_rejected_with_the_limit():
    expect_error(['train', '--model-dir', LONG_PATH], 2,
                 '--model-dir', 'is 600 characters long; it takes at most 511')
    long4k = 'b' * 4001
    for opt in ('--chip', '--data', '--trace', '--config'):
        expect_error(['train', opt, long4k], 2, opt, 'is 4001 characters long; it takes at most '
                     '4000')
    expect_error(['predict', '--model-dir', 'm', '--output', long4k], 2,
                 'is 4001 characters long; it takes at most 4000')
    expect_error(['train', '--layers', '8,' * 200 + '8'], 2,
                 '--layers', 'is 401 characters long; it takes at most 255')
    expect_error(['train', '--iterations-per-loop', '1' * 300], 2, 'takes at most 255')
    expect_error(['train', '--seed', ''], 2, "--seed '' is not a whole number")
    expect_error(['train', '--layers', ''], 2, "--layers '' is empty")
    # an unknown option is named as such, whatever its value
    expect_error(['train', '--bogus', ''], 2, "unknown option '--bogus'")
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, 'c.json')
        with open(cfg, 'w') as f:
            json.dump({'model_dir': LONG_PATH}, f)  # was cut to 511 characters, silently
        expect_error(['train', '--config', cfg], 2, 'is 600 characters long; it takes at most 511')
        with open(cfg, 'w') as f:
            f.write('{"trace": "t\\u0000.json"}')
        expect_error(['train', '--config', cfg], 2, 'c.json:1:24: \\u0000 is not allowed')


@case
def evaluate_steps_counts_batches():
    need_data()
    md = trained_model_dir()
    ev = json.loads(run('evaluate', '--chip', 'tiny', '--layers', '8', '--model-dir', md,
                        '--steps', '3', '--json').stdout)
    assert ev['examples'] == 3 * 512 and ev['global_step'] == 2, ev
    ev = json.loads(run('evaluate', '--chip', 'tiny', '--layers', '8', '--model-dir', md,
                        '--steps', '2', '--eval-batch-size', '100', '--json').stdout)
    assert ev['examples'] == 200, ev


@case
def options_of_other_subcommands_are_refused():
    expect_error(['evaluate', '--model-dir', 'm', '--epochs', '1'], 2,
                 "--epochs belongs to 'tpusim train', not to 'tpusim evaluate'", 'leave it out')
    expect_error(['predict', '--model-dir', 'm', '--steps', '3'], 2,
                 "--steps belongs to 'tpusim train' and 'tpusim evaluate', not to 'tpusim "
                 "predict'")
    expect_error(['evaluate', '--model-dir', 'm', '--no-eval'], 2, '--no-eval belongs to')
    expect_error(['predict', '--model-dir', 'm', '--reference'], 2,
                 "--reference belongs to 'tpusim train'")
    expect_error(['train', '--limit', '10'], 2, "--limit belongs to 'tpusim predict'")
    expect_error(['evaluate', '--model-dir', 'm', '--timing-only'], 2,
                 "--timing-only belongs to 'tpusim train'")
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, 'c.json')
        with open(cfg, 'w') as f:
            json.dump({'max_steps': 100}, f)
        expect_error(['evaluate', '--model-dir', 'm', '--config', cfg], 2,
                     "--max-steps belongs to 'tpusim train'")


@case
def evaluate_and_predict_need_a_checkpoint():
    with tempfile.TemporaryDirectory() as d:
        md = os.path.join(d, 'never-trained')
        for cmd in ('evaluate', 'predict'):
            expect_error([cmd, '--chip', 'tiny', '--model-dir', md], 1,
                         f"could not find a trained model in model_dir '{md}' (no such "
                         "directory)", f"'tpusim train --model-dir {md}'")
            assert not os.path.exists(md)  # and it was not created
        empty = os.path.join(d, 'empty')
        os.mkdir(empty)
        expect_error(['evaluate', '--chip', 'tiny', '--model-dir', empty], 1,
                     f"could not find a trained model in model_dir '{empty}' (no checkpoint in "
                     "it)")
        assert os.listdir(empty) == []


@case
def tpu_v1_cannot_train():
    # refused from the options alone: before the data is read (this directory does not exist)
    expect_error(['train', '--chip', 'tpu-v1', '--steps', '1', '--data', '/nonexistent-dir'], 2,
                 "chip 'tpu-v1' cannot train: its matrix unit multiplies int8 only",
                 'tpu-v2 and later', 'on tpu-v1 with --int8')


def help_options(cmd):
    """{option: whether --help shows it with a value} from each option line of --help."""
    opts = {}
    text = run(cmd, '--help').stdout
    for m in re.finditer(r'^  (?:-[a-z], )?(--[a-z0-9][a-z0-9-]*)( [^ ]+)?', text, re.M):
        opts[m.group(1)] = m.group(2) is not None
    return opts


@case
def help_lists_every_option_the_parser_takes():
    # The parser and --help read one table (cli/options.h); test_cli_options walks it and
    # finds each of its options in --help. Here, from the outside: every option --help shows
    # is one the parser knows, with a value if --help shows one, and none otherwise. The
    # probes end in a usage error before any work.
    for cmd in ('train', 'evaluate', 'predict'):
        shown = help_options(cmd)
        assert {'--no-eval', '--json', '--config', '--model-dir', '--help', '--int8'} <= set(shown)
        for opt, takes_value in sorted(shown.items()):
            if opt == '--help':
                continue
            args = [cmd, opt] if takes_value else [cmd, opt, 'stray']
            p = run(*args, expect=2)
            assert f"unknown option '{opt}'" not in p.stderr, (args, p.stderr)
            if takes_value:
                assert f"option '{opt}' needs a value: {opt} " in p.stderr, (args, p.stderr)
            else:
                assert ('takes no value' in p.stderr or 'belongs to' in p.stderr), (args, p.stderr)
        expect_error([cmd, '--not-in-help'], 2, "unknown option '--not-in-help'; run "
                     f"'tpusim {cmd} --help' for the list")


@case
def config_file_flags_and_messages():
    need_data()
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, 'c.json')
        with open(cfg, 'w') as f:
            json.dump({'json': True, 'no_eval': True, 'reference': False, 'strict_input': False,
                       'chip': 'tiny', 'layers': '8', 'verbose': 0}, f)
        out = json.loads(run('train', '--config', cfg, '--steps', '1').stdout)
        assert out['global_step'] == 1 and 'test_accuracy' not in out, out
        with open(cfg, 'w') as f:
            json.dump({'json': True, 'no_eval': False, 'chip': 'tiny', 'layers': '8',
                       'verbose': 0}, f)
        out = json.loads(run('train', '--config', cfg, '--steps', '1').stdout)
        assert out['test_examples'] == 10000, out  # no_eval false: evaluated


@case
def values_are_echoed_on_one_line():
    # an error line never carries a user's control characters or invalid UTF-8 raw
    for args, shown in ((['--chips', '4\n\x1b[2J'], "--chips '4\\x0A\\x1B[2J'"),
                        (['--backend', 'rt\udcffl'], "--backend 'rt\\xFFl'"),
                        (['--chips', ' 5'], "--chips ' 5' is not a whole number")):
        p = run('train', *args, expect=2)
        assert p.stderr.count('\n') == 1 and shown in p.stderr, (shown, p.stderr)
        assert all(c >= ' ' for c in p.stderr[:-1]), p.stderr


@case
def usage_errors_have_the_shared_wordings():
    expect_error(['train', '--bogus'], 2, "unknown option '--bogus'; run 'tpusim train --help' "
                 "for the list")
    expect_error(['evaluate', '--chip'], 2, "option '--chip' needs a value: --chip NAME|FILE "
                 "(see 'tpusim evaluate --help')")
    expect_error(['train', '--chips', '0'], 2, "--chips '0' is not a whole number from 1 to "
                 "4096; give e.g. --chips 1")
    expect_error(['train', '--l2', '11'], 2,
                 "--l2 '11' is not a number from 0 to 10; give e.g. --l2 0.1\n")
    expect_error(['train', '--decay-rate', '2'], 2,
                 "--decay-rate '2' is not a number from 0 to 1; give e.g. --decay-rate 0.1\n")
    expect_error(['train', '--momentum', '1'], 2, "--momentum '1' is not a number at least 0 "
                 "and less than 1; give e.g. --momentum 0.1\n")
    expect_error(['train', '--optimizer', 'rmsprop'], 2, "--optimizer 'rmsprop' is not one of "
                 "adam, sgd, adamw\n")
    expect_error(['train', '--passes', '2'], 2, "--passes '2' is not one of 1, 3, 6 (bf16, XLA "
                 "HIGH, XLA HIGHEST)\n")
    expect_error(['train', '-x'], 2, "unknown option '-x'")


@case
def stray_arguments_are_named():
    expect_error(['train', '--json', 'true'], 2, "'true' is not an option (options start with "
                 "--); --json takes no value: it is on when given")
    expect_error(['train', 'tiny'], 2, "'tiny' is not an option (options start with --)")


@case
def config_file_errors():
    with tempfile.TemporaryDirectory() as d:
        expect_error(['train', '--config', d], 2, f"--config '{d}' is a directory; give a JSON "
                     "file of options")
        cfg = os.path.join(d, 'c.json')
        for body, needle in (({'json': 1}, "'json' is a true/false option: give it true or "
                                           "false"),
                             ({'steps': True}, "'steps' is not a true/false option"),
                             ({'config': 'other.json'}, "a config file cannot name another"),
                             ({'colour': 'blue'}, "unknown option 'colour'"),
                             ({'json': 'true'}, "'json' is a true/false option: give it true "
                                                "or false"),
                             ({'steps': [1]}, "'steps' must be a number, a string, true or "
                                              "false")):
            with open(cfg, 'w') as f:
                json.dump(body, f)
            expect_error(['train', '--config', cfg], 2, needle)


if __name__ == '__main__':
    sys.exit(main())
