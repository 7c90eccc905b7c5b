#!/usr/bin/env python3
"""The `tpusim` command line, driven as a user drives it: real files, real exit codes, real
messages. The GEMM values are checked against a reference written here in Python, which
rounds to fp32 and bf16 with the struct module, independently of the C code.

usage: test_cli.py PATH/TO/tpusim
Prints CMocka-style summary lines so the suite's totals count each case.
"""
import json
import math
import os
import random
import struct
import sys
import tempfile

from cli_harness import case, expect_error, main, read_npy, run, write_npy






def f32(x):
    """Round a Python float (double) to the nearest fp32, ties to even."""
    try:
        return struct.unpack('<f', struct.pack('<f', x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def f32_bits(x):
    return struct.unpack('<I', struct.pack('<f', x))[0]


def bf16(x):
    """fp32 -> bf16 -> fp32, round to nearest even (finite inputs)."""
    u = f32_bits(x)
    lo = u & 0xFFFF
    hi = u >> 16
    if lo > 0x8000 or (lo == 0x8000 and hi & 1):
        hi += 1
    return struct.unpack('<f', struct.pack('<I', (hi << 16) & 0xFFFFFFFF))[0]


def ref_gemm_bf16(a, b, R):
    """The array's order: per K tile of R rows, t = +0 then t = f32(t + f32(a*w)); acc = t,
    then acc = f32(acc + t)."""
    m, k, n = len(a), len(b), len(b[0])
    y = [[0.0] * n for _ in range(m)]
    for i in range(m):
        for j in range(n):
            acc = None
            for k0 in range(0, k, R):
                t = 0.0
                for kk in range(k0, min(k0 + R, k)):
                    t = f32(t + f32(a[i][kk] * b[kk][j]))
                acc = t if acc is None else f32(acc + t)
            y[i][j] = acc
    return y


# ---- .npy files without numpy ---------------------------------------------------------------



@case
def top_level_help_and_unknown_command():
    p = run('--help')
    assert 'gemm' in p.stdout and 'config' in p.stdout
    expect_error(['frobnicate'], 2, "tpusim: error: 'frobnicate' is not a command of tpusim; the "
                 "commands are train, evaluate, predict, fit, program, config, gemm, model, shard and bench (run "
                 "'tpusim --help')\n")
    expect_error(['model', 'frob'], 2, "tpusim model: error: 'frob' is not a command of tpusim "
                 "model; the commands are show (run 'tpusim model --help')\n")
    expect_error(['config', 'frob'], 2, "tpusim config: error: 'frob' is not a command of tpusim "
                 "config; the commands are list, show and check (run 'tpusim config --help')\n")
    run(expect=2)


@case
def gemm_help():
    p = run('gemm', '--help')
    assert '--schedule tpu|serial' in p.stdout
    assert '--topology FILE.csv' in p.stdout


@case
def gemm_timing_matches_closed_form():
    cfg = json.loads(run('config', 'show', 'tiny', '--json').stdout)
    p = run('gemm', '-m', '64', '-k', '64', '-n', '64', '--chip', 'tiny', '--json',
            '--timing-only')
    out = json.loads(p.stdout)
    R, C = out['array']
    mxus = out['mxus']
    acc = out.get('m_chunks')
    assert acc == 1, out
    # 8 N tiles dealt to the MXUs, each with 8 K tiles of 64 rows
    units = math.ceil(64 / C)
    per_mxu = math.ceil(units / mxus) * math.ceil(64 / R)
    expect = R + (per_mxu - 1) * max(64, R) + 64 + R + C - 1
    assert out['cycles'] == expect, (out['cycles'], expect)
    assert 'values' not in out
    assert cfg  # the config command answered with JSON


@case
def gemm_values_match_python_reference():
    rnd = random.Random(5)
    m, k, n = 5, 19, 7
    a = [[f32(rnd.uniform(-2, 2)) for _ in range(k)] for _ in range(m)]
    b = [[f32(rnd.uniform(-2, 2)) for _ in range(n)] for _ in range(k)]
    with tempfile.TemporaryDirectory() as d:
        pa, pb, py = (os.path.join(d, x) for x in ('a.npy', 'b.npy', 'y.npy'))
        write_npy(pa, a, '<f4', 'f')
        write_npy(pb, b, '<f4', 'f')
        run('gemm', '--a', pa, '--b', pb, '--chip', 'tiny', '--array', '8x4', '--dump', py,
            '--dump-inputs', os.path.join(d, 'in'), '--threads', '2')
        descr, y = read_npy(py)
        assert descr == '<f4'
        ab = [[bf16(x) for x in row] for row in a]
        bb = [[bf16(x) for x in row] for row in b]
        want = ref_gemm_bf16(ab, bb, 8)
        for i in range(m):
            for j in range(n):
                assert f32_bits(y[i][j]) == f32_bits(want[i][j]), (i, j, y[i][j], want[i][j])
        # the operands as the chip saw them: bf16 values, stored as float32
        _, da = read_npy(os.path.join(d, 'in_a.npy'))
        _, db = read_npy(os.path.join(d, 'in_b.npy'))
        assert da == ab and db == bb


@case
def gemm_int8_values():
    rnd = random.Random(9)
    m, k, n = 3, 21, 4
    a = [[rnd.randint(-128, 127) for _ in range(k)] for _ in range(m)]
    b = [[rnd.randint(-128, 127) for _ in range(n)] for _ in range(k)]
    with tempfile.TemporaryDirectory() as d:
        pa, pb, py = (os.path.join(d, x) for x in ('a.npy', 'b.npy', 'y.npy'))
        write_npy(pa, a, '|i1', 'b')
        write_npy(pb, b, '|i1', 'b')
        run('gemm', '--a', pa, '--b', pb, '--chip', 'tiny', '--dtype', 'int8', '--dump', py)
        descr, y = read_npy(py)
        assert descr == '<i4'
        for i in range(m):
            for j in range(n):
                assert y[i][j] == sum(a[i][x] * b[x][j] for x in range(k))


@case
def gemm_fp32_passes_are_accurate():
    rnd = random.Random(3)
    m, k, n = 4, 33, 5
    a = [[f32(rnd.uniform(-1, 1)) for _ in range(k)] for _ in range(m)]
    b = [[f32(rnd.uniform(-1, 1)) for _ in range(n)] for _ in range(k)]
    with tempfile.TemporaryDirectory() as d:
        pa, pb, py = (os.path.join(d, x) for x in ('a.npy', 'b.npy', 'y.npy'))
        write_npy(pa, a, '<f4', 'f')
        write_npy(pb, b, '<f4', 'f')
        errs = {}
        for passes in ('1', '3', '6'):
            run('gemm', '--a', pa, '--b', pb, '--chip', 'tiny', '--dtype', 'fp32',
                '--passes', passes, '--dump', py)
            _, y = read_npy(py)
            worst = 0.0
            for i in range(m):
                for j in range(n):
                    exact = sum(a[i][x] * b[x][j] for x in range(k))
                    scale = sum(abs(a[i][x] * b[x][j]) for x in range(k))
                    worst = max(worst, abs(y[i][j] - exact) / scale)
            errs[passes] = worst
        # each pass count is more accurate than the last; 6 passes is fp32 accuracy
        assert errs['1'] > errs['3'] > errs['6'], errs
        assert errs['6'] < 2 ** -20, errs


@case
def gemm_serial_schedule():
    out = json.loads(run('gemm', '-m', '100', '-k', '64', '-n', '40', '--chip', 'tiny',
                         '--schedule', 'serial', '--dataflow', 'os', '--timing-only',
                         '--json').stdout)
    assert out['schedule'] == 'serial' and out['dataflow'] == 'os'
    assert out['cycles'] > 0 and 0 < out['utilization'] <= 1


@case
def gemm_topology_table():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, 'layers.csv')
        with open(path, 'w') as f:
            f.write('Layer, M, N, K,\nfc1, 256, 512, 784,\nfc2, 256, 10, 512,\n')
        p = run('gemm', '--topology', path, '--chip', 'tpu-v3')
        lines = p.stdout.splitlines()
        assert any(l.startswith('fc1') for l in lines)
        assert any(l.startswith('fc2') for l in lines)
        assert lines[-1].startswith('total')
        out = json.loads(run('gemm', '--topology', path, '--chip', 'tpu-v3', '--json').stdout)
        assert [l['name'] for l in out['layers']] == ['fc1', 'fc2']
        assert out['total']['cycles'] == sum(l['cycles'] for l in out['layers'])
        expect_error(['gemm', '--topology', os.path.join(d, 'none.csv')], 1, 'none.csv')


@case
def gemm_usage_errors():
    expect_error(['gemm', '-m', '4', '-k', '4'], 2, 'give the GEMM size with -m, -k and -n')
    expect_error(['gemm', '-m', '0', '-k', '4', '-n', '4'], 2, "-m '0' is not a whole number")
    expect_error(['gemm', '-m', 'x', '-k', '4', '-n', '4'], 2, "-m 'x'")
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--array', '8by8'], 2,
                 "--array '8by8' is not ROWSxCOLS")
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--array', '0x8'], 2, '--array')
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--dataflow', 'os'], 2,
                 'needs --schedule serial')
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--passes', '3'], 2,
                 '--passes applies to --dtype fp32 only')
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--dtype', 'fp16'], 2,
                 "--dtype 'fp16' is not one of bf16, int8, fp32\n")
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--dtype', 'fp32', '--passes', '2'],
                 2, "--passes '2' is not one of 1, 3, 6 (bf16, XLA HIGH, XLA HIGHEST)\n")
    expect_error(['gemm', '--schedule', 'fast'], 2,
                 "--schedule 'fast' is not one of tpu, serial (tpu: double-buffered "
                 "weight-stationary; serial: SCALE-Sim v2)\n")
    expect_error(['gemm', '--dataflow', 'xy'], 2,
                 "--dataflow 'xy' is not one of ws, os, is")
    expect_error(['gemm', 'stray'], 2, "'stray' is not an option (options start with -)")
    expect_error(['gemm', '--a', 'x.npy'], 2, '--a and --b go together')
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--bogus'], 2,
                 "unknown option '--bogus'; run 'tpusim gemm --help' for the list")
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--chip'], 2,
                 "option '--chip' needs a value: --chip NAME|FILE (see 'tpusim gemm --help')")
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--timing-only', '--dump', 'y.npy'],
                 2, '--timing-only computes no values')


@case
def gemm_chip_and_file_errors():
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--chip', 'tpu-v9'], 1, 'tpu-v9')
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--chip', 'tpu-v1'], 1,
                 "chip 'tpu-v1' has no bf16 matrix unit")
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--chip', 'tpu-v3', '--dtype',
                  'int8'], 1, 'no int8 matrix unit')
    with tempfile.TemporaryDirectory() as d:
        pa, pb = os.path.join(d, 'a.npy'), os.path.join(d, 'b.npy')
        write_npy(pa, [[1.0, 2.0, 3.0]], '<f4', 'f')
        write_npy(pb, [[1.0], [2.0]], '<f4', 'f')
        expect_error(['gemm', '--a', pa, '--b', pb], 1, "A's columns (K=3) must equal B's rows (2)")
        write_npy(pb, [[1.0], [2.0], [3.0]], '<f4', 'f')
        expect_error(['gemm', '--a', pa, '--b', pb, '--dtype', 'int8', '--chip', 'tiny'], 1,
                     'holds float32; --dtype int8 needs int8 data')
        expect_error(['gemm', '--a', os.path.join(d, 'missing.npy'), '--b', pb], 1,
                     "cannot open '", 'missing.npy')
        with open(pa, 'w') as f:
            f.write('not an array')
        expect_error(['gemm', '--a', pa, '--b', pb], 1, 'is not a NumPy .npy file')
        # a failed run leaves no result file behind
        py = os.path.join(d, 'y.npy')
        run('gemm', '--a', pa, '--b', pb, '--dump', py, expect=1)
        assert not os.path.exists(py)


@case
def gemm_large_timing_only_is_fast():
    out = json.loads(run('gemm', '-m', '4096', '-k', '4096', '-n', '4096', '--chip', 'tpu-v4',
                         '--timing-only', '--json').stdout)
    assert out['weight_tiles'] == 32 * 32 * out['m_chunks']
    assert 0.5 < out['utilization'] <= 1.0


DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'config')


@case
def config_list_and_show():
    p = run('config', 'list')
    lines = [l for l in p.stdout.splitlines() if l and not l.startswith(('NAME', '('))]
    assert [l.split()[0] for l in lines] == ['tiny', 'tpu-v1', 'tpu-v2', 'tpu-v3', 'tpu-v4']
    assert '275.3 TFLOP/s' in [l for l in lines if l.startswith('tpu-v4')][0]
    assert '91.75 TOPS' in [l for l in lines if l.startswith('tpu-v1')][0]
    out = json.loads(run('config', 'show', 'tpu-v1', '--json').stdout)
    assert out['config']['name'] == 'tpu-v1'
    assert out['derived']['total_mxus'] == 1
    assert abs(out['derived']['ridge_macs_per_byte'] - 1349.27) < 0.01
    p = run('config', 'show', 'tpu-v4')
    assert 'ridge point' in p.stdout and 'Jouppi' in p.stdout


@case
def config_show_json_round_trips_through_check():
    out = json.loads(run('config', 'show', 'tiny', '--json').stdout)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, 'mine.json')
        with open(path, 'w') as f:
            json.dump(out['config'], f)
        p = run('config', 'check', path)
        assert p.stdout.strip() == f'{path}: ok (name tiny, 2 cores x 1 MXU of 8x8, peak 256 GFLOP/s)'
        # a user's own file drives the GEMM like a preset
        out2 = json.loads(run('gemm', '-m', '16', '-k', '16', '-n', '16', '--chip', path,
                              '--json', '--timing-only').stdout)
        out3 = json.loads(run('gemm', '-m', '16', '-k', '16', '-n', '16', '--chip', 'tiny',
                              '--json', '--timing-only').stdout)
        assert out2['cycles'] == out3['cycles']


@case
def config_errors():
    expect_error(['config', 'check', os.path.join(DATA, 'bad_syntax.json')], 1,
                 'bad_syntax.json:3:15: syntax error')
    p = run('config', 'check', os.path.join(DATA, 'unknown_field.json'),
            os.path.join(DATA, 'ok.json'), expect=1)
    assert "unknown field 'mxu.row' (did you mean 'rows'?)" in p.stderr
    assert 'ok.json: ok' in p.stdout
    expect_error(['config', 'show', 'nosuch'], 1,
                 "'nosuch' is neither a built-in chip preset nor an existing file",
                 'tiny, tpu-v1, tpu-v2, tpu-v3, tpu-v4')
    expect_error(['config', 'show', 'tiny', '--yaml'], 2, "unknown option '--yaml'; run "
                 "'tpusim config show --help' for the list")
    expect_error(['config', 'check', 'tiny', '--json'], 2, "unknown option '--json'; run "
                 "'tpusim config check --help' for the list")
    run('config', 'show', expect=2)
    for name in sorted(os.listdir(DATA)):
        if name != 'ok.json':
            p = run('config', 'check', os.path.join(DATA, name), expect=1)
            assert name in p.stderr and 'error:' in p.stderr, p.stderr


FASHION = '/usr/share/datasets/fashion-mnist'


@case
def train_evaluate_predict_on_fashion_mnist():
    if not os.path.isdir(FASHION):
        print('skipped: Fashion-MNIST is not installed')
        return
    with tempfile.TemporaryDirectory() as d:
        md = os.path.join(d, 'model')
        out = json.loads(run('train', '--chip', 'tiny', '--layers', '64', '--epochs', '1',
                             '--model-dir', md, '--json', '--iterations-per-loop', '50').stdout)
        # one epoch of 60000 / 512 = 117 full steps, on the tiny chip's 2 replicas
        assert out['global_step'] == 117 and out['replicas'] == 2, out
        assert out['test_examples'] == 10000
        assert out['test_accuracy'] > 0.80, out
        assert 0 < out['mxu_utilization'] <= 1 and out['host_time'] == 'modeled'
        assert os.path.exists(os.path.join(md, 'metrics.jsonl'))
        ev = json.loads(run('evaluate', '--chip', 'tiny', '--layers', '64', '--model-dir', md,
                            '--json').stdout)
        assert ev['examples'] == 10000 and ev['global_step'] == 117
        assert abs(ev['accuracy'] - out['test_accuracy']) < 1e-9
        npy = os.path.join(d, 'logits.npy')
        pr = json.loads(run('predict', '--chip', 'tiny', '--layers', '64', '--model-dir', md,
                            '--limit', '1001', '--output', npy, '--json').stdout)
        assert pr['predictions'] == 1001
        descr, rows = read_npy(npy)
        assert descr == '<f4' and len(rows) == 1001 and len(rows[0]) == 10
        # training again continues from the checkpoint: global step 117 + 10
        out = json.loads(run('train', '--chip', 'tiny', '--layers', '64', '--steps', '10',
                             '--model-dir', md, '--json', '--no-eval').stdout)
        assert out['global_step'] == 127
        # a model of another shape cannot load that checkpoint
        expect_error(['evaluate', '--chip', 'tiny', '--layers', '32', '--model-dir', md], 1,
                     'w0')


@case
def train_errors():
    expect_error(['train', '--chip', 'tiny', '--train-batch-size', '101', '--steps', '1'], 2,
                 'train_batch_size 101 must be divisible by the number of replicas')
    expect_error(['train', '--iterations-per-loop', '10q'], 2,
                 "iterations_per_loop '10q' must match")
    expect_error(['train', '--data', '/nonexistent-dir', '--steps', '1'], 1,
                 '/nonexistent-dir')
    expect_error(['evaluate', '--chip', 'tiny'], 2, 'give --model-dir')
    expect_error(['train', '--steps', '5', '--epochs', '1'], 2, 'give one of --steps')
    expect_error(['train', '--optimizer', 'rmsprop'], 2, "--optimizer 'rmsprop'")
    expect_error(['train', '--layers', '512,,256'], 2, "--layers '512,,256'")
    expect_error(['train', '--bogus', '1'], 2, "unknown option '--bogus'")
    expect_error(['train', '--chip', 'tpu-v1', '--steps', '1'], 2, 'int8 only')
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, 'c.json')
        with open(cfg, 'w') as f:
            f.write('{"learning_rate": 0.01, "colour": "blue"}')
        expect_error(['train', '--config', cfg], 2, "unknown option 'colour'")
        with open(cfg, 'w') as f:
            f.write('{"learning_rate": 0.01,}')
        expect_error(['train', '--config', cfg], 2, 'c.json:1:')



PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'program')


@case
def program_check_and_run():
    src = os.path.join(PROGRAMS, 'mlp_step.tpuprog')
    first = run('program', 'check', src).stdout
    assert first.startswith('program mlp_step')
    with tempfile.TemporaryDirectory() as d:
        again = os.path.join(d, 'again.tpuprog')
        with open(again, 'w') as f:
            f.write(first)
        assert run('program', 'check', again).stdout == first  # canonical text is stable
        trace = os.path.join(d, 't.json')
        out = json.loads(run('program', 'run', src, '--var', 'iterations=2', '--json',
                             '--trace', trace).stdout)
        assert len(out['cores']) == 2 and out['cycles'] > 0
        assert all(c['busy_mxu'] > 0 and c['ops'] > 0 for c in out['cores'])
        assert json.load(open(trace))['traceEvents']
        # the same cycles without values
        t = json.loads(run('program', 'run', src, '--var', 'iterations=2', '--json',
                           '--timing-only').stdout)
        assert t['cycles'] == out['cycles']
        bad = os.path.join(d, 'bad.tpuprog')
        with open(bad, 'w') as f:
            f.write('program p\ntemp x: f32[2, 2]\ny = relu x\n')
        expect_error(['program', 'check', bad], 1, 'bad.tpuprog:3:')
        with open(bad, 'w') as f:
            f.write('program p\ntemp x: f32[2, 2]\ntemp y: f32[2, 2]\ny = relu x\n')
        expect_error(['program', 'check', bad], 1, "op 0 'y = relu x'")
    expect_error(['program', 'run', src, '--var', 'nosuch=3'], 2, "no variable 'nosuch'")
    expect_error(['program', 'run', src, '--var', 'iterations'], 2, "is not NAME=INTEGER")
    expect_error(['program', 'check', '/nonexistent.tpuprog'], 1, "cannot open '/nonexistent")
    expect_error(['program', 'frob'], 2, "tpusim program: error: 'frob' is not a command of "
                 "tpusim program; the commands are check and run (run 'tpusim program "
                 "--help')\n")
    # the wordings every subcommand shares, and run's options refused by check
    expect_error(['program', 'run', src, '--bogus'], 2, "unknown option '--bogus'; run "
                 "'tpusim program --help' for the list")
    expect_error(['program', 'run', src, '--var'], 2, "option '--var' needs a value: --var "
                 "NAME=VALUE (see 'tpusim program --help')")
    expect_error(['program', 'run', src, '--chips', '0'], 2, "--chips '0' is not a whole "
                 "number from 1 to 4096; give e.g. --chips 1")
    for opt in (['--trace', 't.json'], ['--var', 'iterations=1'], ['--timing-only']):
        expect_error(['program', 'check', src, *opt], 2, f"{opt[0]} belongs to 'tpusim "
                     "program run', not to 'tpusim program check' (check only parses and "
                     "verifies); leave it out")


@case
def program_run_ops():
    """--ops: each op's statistics; the shares of a core's ops add up to its cycles."""
    src = os.path.join(PROGRAMS, 'mlp_step.tpuprog')
    out = json.loads(run('program', 'run', src, '--var', 'iterations=3', '--json',
                         '--ops').stdout)
    for c in out['cores']:
        ops = c['op_stats']
        assert sum(o['share_cycles'] for o in ops) == c['cycles'] == out['cycles']
        assert sum(o['busy_mxu'] for o in ops) == c['busy_mxu'] > 0
        assert sum(o['macs'] for o in ops) == c['macs']
        assert [o['op'] for o in ops] == list(range(len(ops)))
        assert any(o['bound'] == 'mxu' for o in ops)
    # what the program takes of a core's HBM: params plus the peak of live temps
    hbm = out['hbm']
    assert hbm['bytes'] == hbm['param_bytes'] + hbm['temp_peak_bytes'] <= hbm['core_bytes']
    assert 0 < hbm['temp_peak_bytes'] < hbm['temp_bytes'] and hbm['peak_op'] > 0
    text = run('program', 'run', src, '--var', 'iterations=3', '--ops').stdout
    lines = text.splitlines()
    assert (f"HBM per core: {hbm['bytes']} of {hbm['core_bytes']} bytes: params "
            f"{hbm['param_bytes']} + the peak of live temps {hbm['temp_peak_bytes']} at op "
            f"{hbm['peak_op']} (all temps: {hbm['temp_bytes']})") in lines
    head = lines.index(next(l for l in lines if l.startswith('ops of core 0')))
    rows = lines[head + 3:]  # after the legend's two lines and the column names
    assert len(rows) == len(out['cores'][0]['op_stats']) == 28  # mlp_step's ops
    assert sum(int(r.split()[2]) for r in rows) == out['cycles']
    # without --ops the output is what it was
    plain = run('program', 'run', src, '--var', 'iterations=3').stdout
    assert text.startswith(plain) and 'ops of core' not in plain
    expect_error(['program', 'check', src, '--ops'], 2, "--ops belongs to 'tpusim program "
                 "run', not to 'tpusim program check'")


if __name__ == '__main__':
    sys.exit(main())
