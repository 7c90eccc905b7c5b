#!/usr/bin/env python3
"""`tpusim bench loops` driven as a user drives it: the timing-only sweep's table, CSV, JSON
and plot (PNG and SVG, made by gnuplot), agreeing with each other; --model, --chips and
--timing-only in combination; and every bad option value, each with its message.

usage: test_cli_bench.py PATH/TO/tpusim
Prints CMocka-style summary lines so the suite's totals count each case.
"""
import csv
import json
import os
import shutil
import sys
import tempfile

import cli_harness
from cli_harness import Skip, case, expect_error, main, run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN = os.path.join(ROOT, 'configs', 'models', 'cnn.json')
SMALL = ['bench', 'loops', '--chip', 'tiny', '--layers', '32']


def table_rows(stdout):
    """The table's rows: (marked, loop size, examples/s, busy %, stall %, host %, how)."""
    rows = []
    for line in stdout.splitlines():
        f = line[1:].split()
        if line[:1] in ' *' and f and f[0].isdigit():
            rows.append((line[0] == '*', int(f[0]), float(f[1]), float(f[2].rstrip('%')),
                         float(f[3].rstrip('%')), float(f[4].rstrip('%')), f[-1]))
    return rows


@case
def timing_only_sweep_table_csv_json_agree():
    with tempfile.TemporaryDirectory() as d:
        c = os.path.join(d, 'loops.csv')
        p = run(*SMALL, '--timing-only', '--max', '64', '--extend-above', '8',
                '--save-checkpoints-steps', '10', '--csv', c)
        out = p.stdout
        assert out.startswith('tpusim bench loops: MLP 784-32-10 on tiny x 1 chip '
                              '(2 replicas), global batch 128, timing-only\n'), out
        assert 'host time modeled: launch 100 us, hooks 500 us, input 50 us per batch, ' \
               'checkpoint 20000 us' in out, out
        rows = table_rows(out)
        assert [r[1] for r in rows] == [1, 2, 4, 8, 16, 32, 64], rows
        assert [r[6] for r in rows] == ['simulated'] * 4 + ['extended'] * 3, rows
        assert sum(r[0] for r in rows) == 1, rows
        for r in rows:  # the three shares divide the time (printed to 0.01 %)
            assert abs(r[3] + r[4] + r[5] - 100) < 0.03, r
        assert 'extended: loop sizes above 8 continue the per-step figures of 4 and 8' in out
        with open(c) as f:
            pts = list(csv.DictReader(f))
        assert [int(x['iterations_per_loop']) for x in pts] == [r[1] for r in rows]
        for x, r in zip(pts, rows):
            assert abs(float(x['examples_per_s']) - r[2]) < 0.06, (x, r)
            assert x['method'] == r[6] and (x['knee'] == '1') == r[0], (x, r)
            # a checkpoint every ceil(10 / L) loops (CSV holds 9 significant digits)
            L = int(x['iterations_per_loop'])
            want = -(-10 // L) * float(x['loop_seconds'])
            assert abs(float(x['checkpoint_seconds']) / want - 1) < 1e-8, (x, want)
        p = run(*SMALL, '--timing-only', '--max', '64', '--extend-above', '8',
                '--save-checkpoints-steps', '10', '--json')
        j = json.loads(p.stdout)
        assert j['chip'] == 'tiny' and j['replicas'] == 2 and j['timing_only'] is True, j
        assert j['host_time'] == 'modeled' and j['global_batch'] == 128, j
        assert j['host_costs_us'] == {'launch': 100, 'hooks': 500, 'checkpoint': 20000,
                                      'input_per_batch': 50}, j
        best = max(j['points'], key=lambda x: x['examples_per_s'])
        assert j['best'] == best['iterations_per_loop'], j
        knee = min((x for x in j['points']
                    if x['examples_per_s'] >= 0.99 * best['examples_per_s']),
                   key=lambda x: x['iterations_per_loop'])
        assert j['knee'] == knee['iterations_per_loop'] == rows[[r[0] for r in rows].index(
            True)][1], (j, rows)
        for x, y in zip(j['points'], pts):  # the same sweep: the same figures
            assert abs(x['examples_per_s'] - float(y['examples_per_s'])) < 1e-3, (x, y)
            # each share printed to 9 significant digits: the sum to 1 within their rounding
            assert abs(x['device_busy_share'] + x['stall_share'] +
                       x['host_overhead_share'] - 1) < 1e-8, x
            assert 0 <= x['infeed_stall_share'] <= x['stall_share'] + 1e-9, x
            assert x['report_seconds'] > 0 and x['checkpoint_seconds'] > 0, x


@case
def plots_are_made_by_gnuplot():
    if not shutil.which('gnuplot'):
        raise Skip('gnuplot is not installed (Debian package gnuplot-nox)')
    with tempfile.TemporaryDirectory() as d:
        png, svg = os.path.join(d, 'loops.png'), os.path.join(d, "it's.svg")
        run(*SMALL, '--timing-only', '--max', '16', '--plot', png)
        with open(png, 'rb') as f:
            assert f.read(8) == b'\x89PNG\r\n\x1a\n'
        assert os.path.getsize(png) > 5000, os.path.getsize(png)
        p = run(*SMALL, '--timing-only', '--list', '1,3,9', '--plot', svg, '--json')
        knee = json.loads(p.stdout)['knee']
        with open(svg) as f:
            text = f.read()
        assert '<svg' in text and 'examples/s' in text, text[:300]
        assert f'within 1% of best: {knee}' in text, text


@case
def a_model_file_on_several_chips():
    p = run('bench', 'loops', '--chip', 'tpu-v4', '--chips', '4', '--model', CNN,
            '--timing-only', '--list', '1,8,64', '--batch', '256', '--json')
    j = json.loads(p.stdout)
    assert j['model'] == "model 'cnn' (cnn.json)", j
    assert j['chips'] == 4 and j['replicas'] == 8 and j['global_batch'] == 256, j
    assert [x['iterations_per_loop'] for x in j['points']] == [1, 8, 64], j
    assert [x['method'] for x in j['points']] == ['simulated', 'simulated', 'extended'], j
    # more steps per launch, fewer launches per example: the host's share falls
    shares = [x['host_overhead_share'] for x in j['points']]
    assert shares[0] > shares[1] > shares[2] > 0, shares
    # --full simulates 64 too; the extension is the simulation continued
    p = run('bench', 'loops', '--chip', 'tpu-v4', '--chips', '4', '--model', CNN,
            '--timing-only', '--list', '1,8,64', '--batch', '256', '--json', '--full')
    f = json.loads(p.stdout)
    assert [x['method'] for x in f['points']] == ['simulated'] * 3, f
    assert abs(f['points'][2]['examples_per_s'] / j['points'][2]['examples_per_s'] - 1) < 1e-9


@case
def hosts_each_feed_their_own_chips():
    # tiny has 1 chip per host and 2 cores: with --hosts 2 each host's input pipeline feeds
    # its own 2 replicas; on one host with --chips 2 one pipeline feeds all 4. The input is
    # the bottleneck here (1000 us per batch), so two hosts wait half as long for it.
    common = ['--timing-only', '--list', '1,16', '--input-us', '1000', '--json']
    one = json.loads(run(*SMALL, '--chips', '2', *common).stdout)
    two = json.loads(run(*SMALL, '--hosts', '2', '--chips', '1', *common).stdout)
    assert one['chips'] == two['chips'] == 2 and one['replicas'] == two['replicas'] == 4
    assert one['hosts'] == 1 and two['hosts'] == 2, (one, two)
    for a, b in zip(one['points'], two['points']):
        assert b['examples_per_s'] > 1.5 * a['examples_per_s'], (a, b)
    t = run(*SMALL, '--hosts', '2', '--chips', '1', '--timing-only', '--list', '1')
    assert ' x 2 chips on 2 hosts (4 replicas)' in t.stdout, t.stdout
    expect_error(['bench', 'loops', '--chip', 'tiny', '--hosts', '1024', '--chips', '8'], 2,
                 '--hosts 1024 x 8 chips per host is 8192 chips; tpusim simulates at most '
                 '4096 in one process')


@case
def values_computed_or_not_the_timing_is_the_same():
    a = json.loads(run(*SMALL, '--list', '1,4,16', '--json').stdout)
    b = json.loads(run(*SMALL, '--list', '1,4,16', '--json', '--timing-only').stdout)
    assert a['timing_only'] is False and b['timing_only'] is True
    for x, y in zip(a['points'], b['points']):
        for k in ('examples_per_s', 'infeed_stall_share', 'host_overhead_share'):
            assert x[k] == y[k], (k, x, y)


@case
def measured_host_time_says_so():
    p = run(*SMALL, '--timing-only', '--list', '1,2', '--host-time', 'measured',
            '--checkpoint-us', '1000')
    assert 'host time measured (wall time of hooks and input); launch modeled 100 us (no real ' \
           'launch to time), checkpoint modeled 1000 us' in p.stdout, p.stdout
    j = json.loads(run(*SMALL, '--timing-only', '--list', '1,2', '--host-time', 'measured',
                       '--launch-us', '1000', '--json').stdout)
    assert j['host_time'] == 'measured', j
    assert all(x['hooks_s'] > 0 for x in j['points']), j
    # the launch is the modeled cost, to the cycle (tiny's clock: 1000 us is whole cycles),
    # not the ~30 ns between two reads of the clock
    assert all(abs(x['launch_s'] - 1e-3) < 1e-12 for x in j['points']), j


@case
def bad_values_each_have_their_message():
    B = ['bench', 'loops', '--chip', 'tiny']
    expect_error(B + ['--max', '0'], 2, "--max '0' is not a whole number from 1 to 1000000000")
    # the library's limit (TPU_SWEEP_MAX_LOOP_SIZE): a usage error, before any work
    expect_error(B + ['--max', '1073741824'], 2, "--max '1073741824' is not a whole number "
                 "from 1 to 1000000000")
    expect_error(B + ['--list', '4,2'], 2, "--list '4,2': 2 follows 4; give the loop sizes in "
                 "ascending order without repeats")
    expect_error(B + ['--list', '1,x'], 2, "--list '1,x' is not a comma-separated list of loop "
                 "sizes from 1 to 1000000000; e.g. --list 1,4,16,64")
    expect_error(B + ['--list', '1,'], 2, "--list '1,' is not a comma-separated list")
    expect_error(B + ['--list', '0,4'], 2, "--list '0,4' is not a comma-separated list")
    expect_error(B + ['--list', ','.join(str(i) for i in range(1, 66))], 2,
                 'has more than 64 loop sizes; give at most 64')
    expect_error(B + ['--max', '8', '--list', '1,2'], 2, '--max and --list both give the loop '
                 'sizes; give one')
    expect_error(B + ['--model', CNN, '--layers', '8'], 2, '--model and --layers both give the '
                 'model; give one')
    expect_error(B + ['--layers', '8,0'], 2, "--layers '8,0' is not a comma-separated list")
    expect_error(B + ['--plot', 'loops.txt'], 2, "--plot 'loops.txt' names neither a .png nor "
                 "a .svg file; give e.g. --plot loops.png")
    expect_error(B + ['--extend-above', '24'], 2, '--extend-above 24 is not a power of two; '
                 'give one from 2 to 1048576')
    expect_error(B + ['--extend-above', '1'], 2, "--extend-above '1' is not a whole number "
                 'from 2 to 1048576')
    expect_error(B + ['--full', '--extend-above', '8'], 2, '--full simulates every loop size, '
                 'and --extend-above 8 extends those above it; give one')
    expect_error(B + ['--host-time', 'measured', '--hooks-us', '5'], 2, '--hooks-us fixes a '
                 'host cost, and --host-time measured measures it; leave out one of them')
    expect_error(B + ['--host-time', 'sometimes'], 2, "--host-time 'sometimes' is not one of "
                 'modeled, measured')
    expect_error(B + ['--launch-us', '-1'], 2, "--launch-us '-1' is not a number from 0 to")
    expect_error(B + ['--loops', '0'], 2, "--loops '0' is not a whole number from 1 to 100")
    expect_error(B + ['--cores-per-replica', '3'], 2, '--cores-per-replica 3 does not divide '
                 'the 2 cores of 1 tiny chips; give a divisor of 2')
    expect_error(['bench', 'loops', '--chip', 'tpu-v1'], 2, "chip 'tpu-v1' cannot train: its "
                 'matrix unit multiplies int8 only')
    expect_error(B + ['--batch', '3', '--layers', '8', '--timing-only'], 1,
                 'loop size 1: ', 'train_batch_size 3')
    expect_error(B + ['--csv', '/nonexistent-dir/x.csv'], 2, '--csv', '/nonexistent-dir')
    expect_error(B + ['--model', '/nonexistent.json'], 1, '/nonexistent.json')
    expect_error(B + ['--bogus'], 2, "unknown option '--bogus'")
    expect_error(['bench', 'sweep'], 2, "'sweep' is not a command of tpusim bench")
    p = run('bench', 'loops', '--help')
    assert 'usage: tpusim bench loops' in p.stdout and '--extend-above' in p.stdout, p.stdout


@case
def train_timing_only_runs_on_every_preset_with_traces_and_model_files():
    """What a sweep relies on, checked through `tpusim train`: --timing-only trains on every
    preset that can train (tpu-v1 multiplies int8 only and is refused as without
    --timing-only), with a trace, and with model files; no evaluation follows."""
    if not os.path.isdir('/usr/share/datasets/fashion-mnist'):
        raise Skip('Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)')
    with tempfile.TemporaryDirectory() as d:
        t = os.path.join(d, 't.json')
        for chip in ('tiny', 'tpu-v2', 'tpu-v3', 'tpu-v4'):
            for model in (['--layers', '8'], ['--model', CNN]):
                p = run('train', '--chip', chip, *model, '--timing-only', '--steps', '4',
                        '--iterations-per-loop', '2', '--train-batch-size', '64', '--trace',
                        t, '--json', '--verbose', '0')
                j = json.loads(p.stdout)
                assert j['global_step'] == 4 and j['loss'] is None, (chip, model, j)
                assert j['step_time_s'] > 0 and 'test_accuracy' not in j, (chip, model, j)
                with open(t) as f:
                    ev = json.load(f)['traceEvents']
                loops = [e for e in ev if e['ph'] == 'X' and e['name'] == 'device loop']
                assert len(loops) == 2, (chip, model, len(loops))
        expect_error(['train', '--chip', 'tpu-v1', '--timing-only', '--steps', '1'], 2,
                     "chip 'tpu-v1' cannot train: its matrix unit multiplies int8 only")


if os.sep in cli_harness.TPUSIM:
    cli_harness.TPUSIM = os.path.abspath(cli_harness.TPUSIM)

if __name__ == '__main__':
    sys.exit(main())
