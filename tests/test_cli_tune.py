#!/usr/bin/env python3
"""Loop sizes in `tpusim train` as a user chooses them: `--iterations-per-loop auto` with
`--tuner model|keras`, a time per launch (TPUEstimator's rule), the step counter's log
cadence, and every bad value of these flags refused with the value, the rule and the fix.

usage: test_cli_tune.py PATH/TO/tpusim
Prints CMocka-style summary lines so the suite's totals count each case.
"""
import json
import os
import re
import tempfile

import cli_harness
from cli_harness import case, expect_error, main, run, write_fashion_subset

_TMP = tempfile.TemporaryDirectory()
if os.sep in cli_harness.TPUSIM:
    cli_harness.TPUSIM = os.path.abspath(cli_harness.TPUSIM)
os.chdir(_TMP.name)
DATA = write_fashion_subset(os.path.join(_TMP.name, 'data'), 512, 64)
BASE = ['--chip', 'tiny', '--layers', '8', '--data', DATA, '--train-batch-size', '16',
        '--eval-batch-size', '16', '--no-eval', '--verbose', '0']


def loops(model_dir):
    """The training loops of metrics.jsonl: (steps, host_overhead_share) of each."""
    with open(os.path.join(model_dir, 'metrics.jsonl')) as f:
        rows = [json.loads(line) for line in f]
    return [(r['steps'], r['host_overhead_share']) for r in rows if r['mode'] == 'train']


@case
def bad_flag_values_are_refused():
    grammar = "must match ^[1-9][0-9]*[smh]?$ (as in TPUEstimator)"
    for v in ('AUTO', 'Auto', 'auto ', 'autos', '0'):
        expect_error(['train', '--iterations-per-loop', v], 2,
                     f"iterations_per_loop '{v}' {grammar}", 'or auto for a tuner',
                     'e.g. 100 or 30s (or auto)')
    expect_error(['train', '--iterations-per-loop', ''], 2,
                 "--iterations-per-loop '' is empty: give it a value")
    expect_error(['train', '--iterations-per-loop', 'auto', '--tuner', 'time'], 2,
                 "--tuner 'time' is not one of model, keras",
                 "model: tpusim's own, keras: Keras 2.15's StepsPerExecutionTuner")
    expect_error(['train', '--iterations-per-loop', 'auto', '--tuner', 'Keras'], 2,
                 "--tuner 'Keras' is not one of model, keras")
    expect_error(['train', '--iterations-per-loop', 'auto', '--tuner'], 2,
                 "option '--tuner' needs a value: --tuner model|keras")
    # a tuner without auto has nothing to choose, whichever order the flags come in
    for args in (['--tuner', 'keras'], ['--tuner', 'model', '--iterations-per-loop', '10'],
                 ['--iterations-per-loop', 'auto', '--tuner', 'keras',
                  '--iterations-per-loop', '30s']):
        expect_error(['train', *args], 2, '--tuner chooses the loop size of '
                     '--iterations-per-loop auto; give --iterations-per-loop auto with it, or '
                     'leave --tuner out')
    for v in ('0', '0.6', '-0.01', 'x', 'nan'):
        expect_error(['train', '--iterations-per-loop', 'auto', '--tuner-target-overhead', v],
                     2, f"--tuner-target-overhead '{v}' is not a number from 0.0001 to 0.5")
    for args in (['--tuner-target-overhead', '0.05'],
                 ['--iterations-per-loop', 'auto', '--tuner', 'keras',
                  '--tuner-target-overhead', '0.05']):
        expect_error(['train', *args], 2, "--tuner-target-overhead is the model tuner's: give "
                     "--iterations-per-loop auto (and --tuner model, the default) with it")
    # the same through a config file, and evaluate/predict take them as train does
    cfg = os.path.join(_TMP.name, 'bad.json')
    with open(cfg, 'w') as f:
        json.dump({'iterations_per_loop': 'auto', 'tuner': 'fast'}, f)
    expect_error(['train', '--config', cfg], 2, "--tuner 'fast' is not one of model, keras")
    with open(cfg, 'w') as f:
        json.dump({'tuner': 'keras'}, f)
    expect_error(['train', '--config', cfg], 2, '--tuner chooses the loop size of')
    expect_error(['evaluate', '--model-dir', 'm', '--tuner', 'keras'], 2,
                 '--tuner chooses the loop size of')


@case
def help_names_the_rules():
    out = run('train', '--help').stdout
    flat = ' '.join(out.split())
    assert '--iterations-per-loop N|Ns|Nm|Nh|auto' in out, out
    assert "sized by TPUEstimator's rule (its IterationCountEstimator: the target over the " \
           "mean step time of the last 20 launches" in flat, flat
    assert '--tuner model|keras' in out
    assert "keras, Keras 2.15's StepsPerExecutionTuner on simulated time" in flat
    assert "as TPUEstimator's step counter hook" in flat


@case
def auto_model_tuner_sizes_the_loops():
    md = os.path.join(_TMP.name, 'auto_model')
    p = run('train', *BASE, '--steps', '3000', '--iterations-per-loop', 'auto',
            '--log-step-count-steps', '0', '--model-dir', md)
    sizes = [s for s, _ in loops(md)]
    assert sum(sizes) == 3000, sizes
    # the summary says where it ended: the size of the last full loop
    assert f'  loop size          auto (model): {sizes[-2]} steps at the end\n' in p.stdout, \
        (p.stdout, sizes)
    # from 1 step, at most 64-fold per loop, then a steady size
    assert sizes[0] == 1 and 1 < sizes[1] <= 64, sizes
    assert len(sizes) < 40, sizes
    # the full loops from the third on keep the host's share near the 2 % target: the tuner's
    # fit of the fixed cost and the step time (least squares over the last 8 loops, the first
    # of which found its infeed filled ahead) is within a few per cent of the real costs, so
    # 2.05 % bounds it
    for steps, share in loops(md)[2:-1]:
        assert share <= 0.0205, loops(md)
    # a tighter target gives longer loops
    md10 = os.path.join(_TMP.name, 'auto_model_1pc')
    run('train', *BASE, '--steps', '3000', '--iterations-per-loop', 'auto',
        '--log-step-count-steps', '0', '--tuner-target-overhead', '0.01', '--model-dir', md10)
    assert max(s for s, _ in loops(md10)) > max(sizes), (loops(md10), sizes)


@case
def auto_model_tuner_keeps_the_log_cadence():
    md = os.path.join(_TMP.name, 'auto_cadence')
    p = run('train', *BASE, '--steps', '400', '--iterations-per-loop', 'auto',
            '--log-step-count-steps', '40', '--model-dir', md)
    sizes = [s for s, _ in loops(md)]
    assert sum(sizes) == 400, sizes
    assert all(s <= 40 for s in sizes), sizes  # loops never longer than the cadence
    assert 40 in sizes, sizes  # the 2 % target wants more than 40 here: the cadence binds
    # and the summary says so, with what the target wanted
    m = re.search(r'^  loop size          auto \(model\): 40 steps at the end, held by the '
                  r'cadence of --log-step-count-steps and --save-checkpoints-steps \(40\); the '
                  r'2 % overhead target wants (\d+)$', p.stdout, re.M)
    assert m and int(m.group(1)) > 40, p.stdout


@case
def auto_model_tuner_caps_at_the_smallest_cadence():
    # coprime cadences (log lines every 100 steps, checkpoints every 101): loops up to 100
    # steps, not their gcd 1 (a log line or checkpoint comes at the first boundary at least
    # that many steps after the last, as in TPUEstimator: loops need not divide the cadence)
    md = os.path.join(_TMP.name, 'auto_coprime')
    run('train', *BASE, '--steps', '600', '--iterations-per-loop', 'auto',
        '--log-step-count-steps', '100', '--save-checkpoints-steps', '101', '--model-dir', md)
    sizes = [s for s, _ in loops(md)]
    assert sum(sizes) == 600 and max(sizes) == 100, sizes
    # timing-only writes no checkpoints: their cadence does not hold the loops back
    md = os.path.join(_TMP.name, 'auto_timing_only')
    p = run('train', *BASE, '--steps', '600', '--timing-only', '--iterations-per-loop', 'auto',
            '--log-step-count-steps', '0', '--save-checkpoints-steps', '7', '--model-dir', md)
    sizes = [s for s, _ in loops(md)]
    assert sum(sizes) == 600 and max(sizes) > 7, sizes
    assert 'held by the cadence' not in p.stdout, p.stdout
    # a cadence of 1 step holds every loop at 1 step, and the summary says "1 step"
    p = run('train', *BASE, '--steps', '20', '--iterations-per-loop', 'auto',
            '--log-step-count-steps', '1')
    assert re.search(r'^  loop size          auto \(model\): 1 step at the end, held by the '
                     r'cadence of .* \(1\);', p.stdout, re.M), p.stdout


@case
def auto_keras_tuner_from_a_config_file():
    cfg = os.path.join(_TMP.name, 'keras.json')
    with open(cfg, 'w') as f:
        json.dump({'iterations_per_loop': 'auto', 'tuner': 'keras'}, f)
    md = os.path.join(_TMP.name, 'auto_keras')
    p = run('train', *BASE, '--steps', '60', '--config', cfg, '--model-dir', md)
    # Keras starts at 1 and measures every 5 s: 60 short steps end before its first change
    assert [s for s, _ in loops(md)] == [1] * 60, loops(md)
    assert '  loop size          auto (keras): 1 step at the end\n' in p.stdout, p.stdout


@case
def time_per_launch_starts_with_one_step():
    md = os.path.join(_TMP.name, 'time')
    p = run('train', *BASE, '--steps', '300', '--iterations-per-loop', '1s', '--model-dir',
            md)
    sizes = [s for s, _ in loops(md)]
    # TPUEstimator's estimator has no launch to go by at first: 1 step; then 1 s of steps
    # (more than the 299 left)
    assert sizes == [1, 299], sizes
    assert re.search(r"^  loop size          1 s per launch \(TPUEstimator's rule\): \d+ steps "
                     r"at the end$", p.stdout, re.M), p.stdout
    # a fixed count has no tuner to report
    p = run('train', *BASE, '--steps', '30', '--iterations-per-loop', '10')
    assert 'loop size' not in p.stdout, p.stdout


@case
def log_lines_follow_the_step_counter_cadence():
    p = run('train', *BASE[:-2], '--verbose', '2', '--steps', '20', '--iterations-per-loop',
            '3', '--log-step-count-steps', '5')
    steps = [int(m) for m in re.findall(r'^global step (\d+):', p.stderr, re.M)]
    # loops end at 3 6 9 12 15 18 20; the count starts at 3: lines at 9, 15 and 20
    assert steps == [9, 15, 20], p.stderr
    # each shows the rate since the last line, and examples/sec is that rate times the global
    # batch of 16 (to the printed rounding: 0.05 global_step/sec, 0.5 examples/sec)
    for rate, ex in re.findall(r'^global step \d+: loss [^,]+, ([\d.]+) global_step/sec, '
                               r'(\d+) examples/sec \(simulated\)$', p.stderr, re.M):
        assert float(rate) > 0 and abs(int(ex) - float(rate) * 16) <= 0.05 * 16 + 0.5, p.stderr


if __name__ == '__main__':
    raise SystemExit(main())
