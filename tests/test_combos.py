#!/usr/bin/env python3
"""`tpusim train`, `evaluate` and `predict` with their options in combination, as users mix
them: --trace, --timing-only, --json, --verbose 0/1/2, --backend native/rtl, the four
--per-host-input-for-training modes, --config (the run's options from a file, several of them
strings) and --iterations-per-loop in steps and in seconds.

The full product is 3 x 2 x 2 x 2 x 3 x 2 x 4 x 2 x 2 = 2304 runs; a deterministic greedy
all-pairs generator (below) picks rows so that every pair of values of two options appears
together in at least one run that is valid, and every pair that no valid run can hold appears
in a run that must be refused. Then come the combinations known to have crashed, hung or
misbehaved (a trace with evaluation, a config file with several string options and flags,
--cores-per-replica 2 with evaluation, a trace from predict).

Valid runs must exit 0 and show it: --json prints one strict JSON object with the keys of its
command; the text summary names the chip, model and step; a trace loads as Chrome trace JSON;
training leaves its checkpoint; evaluation and prediction of the same checkpoint agree on the
accuracy whatever the options; the loops are as long as --iterations-per-loop says. Runs that
are invalid by design (--timing-only with evaluate or predict, --timing-only with
--backend rtl, --backend rtl in a build without the RTL) must exit 2 with the documented
one-line message.

Everything runs on the tiny chip (2 cores, 8x8 MXU), a 784-12-10 MLP, 64 training and 40
test images (the last evaluation batch is partial), global batches of 16, 4 training steps.

usage: test_combos.py PATH/TO/tpusim
The environment variable TPUSIM_HAVE_RTL (1 or 0, set by tests/meson.build) says whether the
build has the RTL backend; without it, tpusim is asked. Prints CMocka-style summary lines so
the suite's totals count each case.
"""
import glob
import itertools
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

from cli_harness import CASES, TPUSIM, main, read_npy, write_fashion_subset

EXE = os.path.abspath(TPUSIM) if os.sep in TPUSIM else shutil.which(TPUSIM) or TPUSIM
N_TRAIN, N_TEST, BATCH, STEPS = 64, 40, 16, 4
LAYERS = '12'
# iterations_per_loop: 2 steps, or a simulated time (whole units, as in TPUEstimator; 1 s
# holds every step of these short runs in one loop)
IPL = {'steps': '2', 'seconds': '1s'}
# A run that takes longer has hung. These runs take about a second in a plain build, but an
# RTL run takes over a minute under AddressSanitizer; a deadlock among the runtime's threads
# ends in an error within a second anyway (its watchdog), so this catches anything else.
TIMEOUT_S = 200

FACTORS = [
    ('cmd', ['train', 'evaluate', 'predict']),
    ('trace', [False, True]),
    ('timing_only', [False, True]),
    ('json', [False, True]),
    ('verbose', ['0', '1', '2']),
    ('backend', ['native', 'rtl']),
    ('input', ['PER_SHARD_V1', 'PER_HOST_V1', 'PER_HOST_V2', 'BROADCAST']),
    ('config', [False, True]),
    ('ipl', ['steps', 'seconds']),
]

MSG_TIMING_ONLY = ("--timing-only belongs to 'tpusim train', not to 'tpusim {cmd}' (evaluating "
                   "and predicting compute values)")
MSG_RTL_TIMING = ("--backend rtl computes every matmul's values on the RTL array; it does not "
                  "go with --timing-only")
MSG_NO_RTL = '--backend rtl: this tpusim was built without the RTL matrix unit'


def refusal(row, have_rtl):
    """The documented message a run must be refused with, or None if it is valid. In a
    build without the RTL every rtl run is refused, so there the all-pairs runs cover the
    other options' pairs with native runs."""
    if row['timing_only'] and row['cmd'] != 'train':
        return MSG_TIMING_ONLY.format(cmd=row['cmd'])
    if row['backend'] == 'rtl' and not have_rtl:
        return MSG_NO_RTL
    if row['backend'] == 'rtl' and row['timing_only']:
        return MSG_RTL_TIMING
    return None


# ---- the all-pairs generator -----------------------------------------------------------------
def all_pairs(factors, is_valid):
    """Rows (dicts) in which every pair of values of two factors appears at least once:
    first in valid rows for every pair some valid row can hold, then in invalid rows for the
    pairs no valid row can hold. Greedy and deterministic: each row starts from the first
    uncovered pair, in factor order, and takes for each other factor, in order, the value
    that covers the most uncovered pairs with the values already chosen (ties: the first)."""
    names = [n for n, _ in factors]
    values = dict(factors)
    pairs = [((a, x), (b, y)) for i, a in enumerate(names) for b in names[i + 1:]
             for x in values[a] for y in values[b]]

    def holdable(partial):
        """Some valid full row extends the partial one: brute force over the unassigned
        factors, which stops at the first valid row (the whole product is 2304 rows)."""
        free = [n for n in names if n not in partial]
        for combo in itertools.product(*(values[n] for n in free)):
            if is_valid({**partial, **dict(zip(free, combo))}):
                return True
        return False

    valid_pairs = [p for p in pairs if holdable(dict(p))]
    rows = []
    for want_valid, pending in ((True, valid_pairs), (False, [p for p in pairs if p not in valid_pairs])):
        uncovered = list(pending)
        while uncovered:
            row = dict(uncovered[0])
            for n in names:
                if n in row:
                    continue
                best, best_score = None, -1  # a holdable row always has a next value
                for v in values[n]:
                    trial = {**row, n: v}
                    if want_valid and not holdable(trial):
                        continue
                    score = sum(1 for p in uncovered
                                if all(trial.get(k) == x for k, x in p) and
                                any(k == n for k, _ in p))
                    if score > best_score:
                        best, best_score = v, score
                row[n] = best
            row = {n: row[n] for n in names}
            rows.append(row)
            uncovered = [p for p in uncovered if not all(row[k] == x for k, x in p)]
    return rows


# ---- running tpusim ---------------------------------------------------------------------------
def tpusim(argv, cwd, timeout=TIMEOUT_S):
    try:
        return subprocess.run([EXE, *argv], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f'tpusim {shlex.join(argv)}: no answer in {timeout} s (a hang)') \
            from None


def strict_json(text):
    """One JSON object and nothing else; NaN and Infinity are not JSON."""
    def no_constants(c):
        raise ValueError(f'{c} is not JSON')
    return json.loads(text, parse_constant=no_constants)


def load_trace(p):
    with open(p) as f:
        t = json.load(f)
    events = t['traceEvents'] if isinstance(t, dict) else t
    assert isinstance(events, list) and events, f'{p}: no trace events'
    assert all('ph' in e and 'name' in e for e in events), f'{p}: not Chrome trace events'
    return events


def train_loops(model_dir):
    """The steps of each training loop, from metrics.jsonl."""
    with open(os.path.join(model_dir, 'metrics.jsonl')) as f:
        recs = [json.loads(l) for l in f if l.strip()]
    return [r['steps'] for r in recs if r.get('mode') == 'train']


def ckpt_steps(model_dir):
    return sorted(int(re.search(r'ckpt-(\d+)\.safetensors$', p).group(1))
                  for p in glob.glob(os.path.join(model_dir, 'ckpt-*.safetensors')))


# ---- one combination ---------------------------------------------------------------------------
def argv_of(row, d):
    """The command line of a row, run in directory d. The run's own options go on the
    command line, or with config into a JSON file (several of them strings); the options
    under test stay flags."""
    model_dir = os.path.join(d, 'model')
    opts = {'chip': 'tiny', 'layers': LAYERS, 'data': DATA, 'model_dir': model_dir,
            'per_host_input_for_training': row['input'],
            'iterations_per_loop': IPL[row['ipl']],
            'train_batch_size': BATCH, 'eval_batch_size': BATCH, 'predict_batch_size': BATCH}
    if row['cmd'] == 'train':
        opts['steps'] = STEPS
    if row['cmd'] == 'predict':
        opts['output'] = os.path.join(d, 'logits.npy')
    if row['config']:
        cfg = os.path.join(d, 'run.json')
        with open(cfg, 'w') as f:
            json.dump(opts, f, indent=1)
        argv = [row['cmd'], '--config', cfg]
    else:
        argv = [row['cmd']]
        for k, v in opts.items():
            argv += ['--' + k.replace('_', '-'), str(v)]
    if row['trace']:
        argv += ['--trace', os.path.join(d, 'trace.json')]
    if row['timing_only']:
        argv += ['--timing-only']
    if row['json']:
        argv += ['--json']
    argv += ['--verbose', row['verbose'], '--backend', row['backend']]
    return argv


TRAIN_KEYS = {'chip', 'replicas', 'layers', 'global_step', 'train_batch_size', 'loss',
              'step_time_s', 'examples_per_s', 'mxu_utilization', 'infeed_stall_share',
              'host_overhead_share', 'simulated_seconds', 'host_time', 'wall_seconds',
              'backend'}


def check_train(row, p, d):
    model_dir = os.path.join(d, 'model')
    evaluated = not row['timing_only']
    if row['json']:
        out = strict_json(p.stdout)
        assert TRAIN_KEYS <= set(out), TRAIN_KEYS - set(out)
        assert (out['chip'], out['replicas'], out['layers'], out['global_step'],
                out['train_batch_size'], out['backend']) == \
            ('tiny', 2, f'784-{LAYERS}-10', STEPS, BATCH, row['backend']), out
        assert out['simulated_seconds'] > 0 and out['step_time_s'] > 0, out
        if evaluated:
            assert out['test_examples'] == N_TEST and 0 <= out['test_accuracy'] <= 1, out
            assert math.isfinite(out['loss']) and math.isfinite(out['test_loss']), out
        else:
            assert 'test_accuracy' not in out, out
        if row['backend'] == 'rtl':
            assert out['rtl_units'] == 2 and out['rtl_tiles'] > 0, out
    else:
        out = p.stdout
        assert out.startswith(f'tpusim train: MLP 784-{LAYERS}-10 on tiny, 2 replicas'), out
        assert re.search(rf'^  global step\s+{STEPS} \(global batch {BATCH}\)', out, re.M), out
        if evaluated:
            assert re.search(rf'^  test accuracy\s+[\d.]+ % on {N_TEST} examples', out, re.M), out
        else:
            assert 'test accuracy' not in out, out
        if row['backend'] == 'rtl':
            assert re.search(r'^  RTL backend\s+2 Verilated 8x8 arrays ran [1-9]', out, re.M), out
        check_verbose_train(row, p)
    if not row['timing_only']:
        assert os.path.exists(os.path.join(model_dir, 'checkpoint.json')), os.listdir(model_dir)
        assert STEPS in ckpt_steps(model_dir), os.listdir(model_dir)
    loops = train_loops(model_dir)
    assert sum(loops) == STEPS, loops
    if row['ipl'] == 'steps':
        assert loops == [2, 2], loops
    else:
        assert len(loops) > 1 and max(loops) < STEPS, loops


def check_verbose_train(row, p):
    if row['verbose'] == '0':
        assert p.stderr == '', p.stderr
    elif row['verbose'] == '1':
        assert f'] {STEPS}/{STEPS} steps' in p.stderr, p.stderr  # the progress bar
    else:
        # a line per epoch: 4 steps of 16 are one epoch of 64 images
        assert re.findall(r'^epoch (\d+) ', p.stderr, re.M) == ['1'], p.stderr
        assert '\r' not in p.stderr, p.stderr


def check_evaluate(row, p, _d):
    if row['json']:
        out = strict_json(p.stdout)
        assert out['global_step'] == STEPS and out['examples'] == N_TEST, out
        assert abs(out['accuracy'] - BASE['test_accuracy']) < 1e-9, (out, BASE)
        assert abs(out['loss'] - BASE['test_loss']) < 1e-6, (out, BASE)
    else:
        m = re.fullmatch(rf'tpusim evaluate: global step {STEPS}: accuracy ([\d.]+) %, loss '
                         rf'([\d.]+) over {N_TEST} examples\n', p.stdout)
        assert m, p.stdout
        assert abs(float(m.group(1)) - 100 * BASE['test_accuracy']) < 0.006, (m.group(1), BASE)
    if row['verbose'] == '0':
        assert p.stderr == '', p.stderr


def check_predict(row, p, d):
    if row['json']:
        out = strict_json(p.stdout)
        assert out['predictions'] == N_TEST, out
        assert abs(out['accuracy'] - BASE['test_accuracy']) < 1e-9, (out, BASE)
    else:
        assert re.fullmatch(rf'tpusim predict: {N_TEST} predictions \(one per example; accuracy '
                            r'[\d.]+ %\), logits in \S+logits.npy\n', p.stdout), p.stdout
    descr, rows = read_npy(os.path.join(d, 'logits.npy'))
    assert descr == '<f4' and len(rows) == N_TEST and len(rows[0]) == 10, (descr, len(rows))
    assert all(math.isfinite(x) for r in rows for x in r)
    if row['verbose'] == '0':
        assert p.stderr == '', p.stderr


CHECKS = {'train': check_train, 'evaluate': check_evaluate, 'predict': check_predict}


def run_row(row):
    with tempfile.TemporaryDirectory(dir=WORK) as d:
        if row['cmd'] != 'train':
            shutil.copytree(BASE_DIR, os.path.join(d, 'model'))
        argv = argv_of(row, d)
        print('tpusim ' + shlex.join(argv))
        p = tpusim(argv, d)
        msg = refusal(row, HAVE_RTL)
        if msg:
            assert p.returncode == 2, f'exit {p.returncode}, expected 2\n{p.stdout}{p.stderr}'
            assert p.stderr.startswith(f'tpusim {row["cmd"]}: error: {msg}'), p.stderr
            assert p.stderr.count('\n') == 1 and p.stdout == '', (p.stdout, p.stderr)
            return
        assert p.returncode == 0, f'exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}'
        CHECKS[row['cmd']](row, p, d)
        if row['trace']:
            load_trace(os.path.join(d, 'trace.json'))


def row_name(i, row):
    bits = [row['cmd']]
    bits += [k for k in ('trace', 'timing_only', 'json', 'config') if row[k]]
    bits += ['v' + row['verbose'], row['backend'], row['input'].lower(), 'ipl_' + row['ipl']]
    return f'combo_{i:02d}_' + '_'.join(bits)


def have_rtl():
    env = os.environ.get('TPUSIM_HAVE_RTL')
    if env is not None:
        return env == '1'
    p = tpusim(['train', '--backend', 'rtl', '--timing-only'], None)
    return MSG_NO_RTL not in p.stderr


HAVE_RTL = have_rtl()


def valid(row):
    return refusal(row, HAVE_RTL) is None


ROWS = all_pairs(FACTORS, valid)

for _i, _row in enumerate(ROWS):
    def _case(row=_row):
        run_row(row)
    _case.__name__ = row_name(_i + 1, _row)
    CASES.append(_case)


# ---- the generator itself -----------------------------------------------------------------------
def all_pairs_covers_every_pair():
    names = [n for n, _ in FACTORS]
    product = [dict(zip(names, vals)) for vals in itertools.product(*(v for _, v in FACTORS))]
    assert len(product) == 2304
    for (a, xs), (b, ys) in itertools.combinations(FACTORS, 2):
        for x, y in itertools.product(xs, ys):
            hit = [r for r in ROWS if r[a] == x and r[b] == y]
            assert hit, f'no run with {a}={x} and {b}={y}'
            if any(valid(r) for r in product if r[a] == x and r[b] == y):
                assert any(valid(r) for r in hit), \
                    f'no valid run with {a}={x} and {b}={y}'
    # far fewer runs than the product, and the same runs every time
    assert len(ROWS) <= 30, len(ROWS)
    assert ROWS == all_pairs(FACTORS, valid)


CASES.insert(0, all_pairs_covers_every_pair)


# ---- the combinations known to have failed --------------------------------------------------------
def base_flags(model_dir):
    return ['--chip', 'tiny', '--layers', LAYERS, '--data', DATA, '--model-dir', model_dir,
            '--train-batch-size', str(BATCH), '--eval-batch-size', str(BATCH),
            '--predict-batch-size', str(BATCH)]


def special(fn):
    CASES.append(fn)
    return fn


@special
def trace_with_evaluation_in_train():
    with tempfile.TemporaryDirectory(dir=WORK) as d:
        md, trace = os.path.join(d, 'model'), os.path.join(d, 't.json')
        p = tpusim(['train', *base_flags(md), '--steps', str(STEPS), '--trace', trace, '--json'], d)
        assert p.returncode == 0, (p.returncode, p.stderr)
        out = strict_json(p.stdout)
        assert out['global_step'] == STEPS and out['test_examples'] == N_TEST, out
        load_trace(trace)


@special
def trace_from_evaluate_and_predict():
    for cmd in ('evaluate', 'predict'):
        with tempfile.TemporaryDirectory(dir=WORK) as d:
            md, trace = os.path.join(d, 'model'), os.path.join(d, 't.json')
            shutil.copytree(BASE_DIR, md)
            p = tpusim([cmd, *base_flags(md), '--trace', trace, '--json'], d)
            assert p.returncode == 0, (cmd, p.returncode, p.stderr)
            strict_json(p.stdout)
            assert os.path.exists(trace), f'{cmd} --trace wrote no trace'
            load_trace(trace)


@special
def config_with_several_string_options_and_flags():
    """A config file of several string options; a flag before --config is overridden by the
    file, flags after it override the file."""
    with tempfile.TemporaryDirectory(dir=WORK) as d:
        md = os.path.join(d, 'model')
        cfg = os.path.join(d, 'run.json')
        with open(cfg, 'w') as f:
            json.dump({'chip': 'tiny', 'layers': '24,12', 'data': DATA, 'model_dir': md,
                       'optimizer': 'sgd', 'per_host_input_for_training': 'BROADCAST',
                       'eval_training_input_configuration': 'SLICED',
                       'iterations_per_loop': '3', 'host_time': 'modeled',
                       'train_batch_size': BATCH, 'eval_batch_size': BATCH,
                       'steps': STEPS, 'trace': os.path.join(d, 'from-config.json')}, f)
        trace = os.path.join(d, 't.json')
        p = tpusim(['train', '--layers', '99', '--config', cfg, '--iterations-per-loop', '1',
                    '--per-host-input-for-training', 'PER_SHARD_V1', '--trace', trace,
                    '--json', '--verbose', '0'], d)
        assert p.returncode == 0, (p.returncode, p.stderr)
        out = strict_json(p.stdout)
        assert (out['chip'], out['layers'], out['global_step']) == ('tiny', '784-24-12-10', STEPS), out
        assert out['test_examples'] == N_TEST, out
        assert train_loops(md) == [1, 1, 1, 1], train_loops(md)  # the flag after the file
        load_trace(trace)
        assert not os.path.exists(os.path.join(d, 'from-config.json'))
        # and the text summary says SGD: the optimizer came from the file
        md2 = os.path.join(d, 'model2')
        p = tpusim(['train', '--config', cfg, '--model-dir', md2, '--no-eval', '--verbose', '0'], d)
        assert p.returncode == 0, (p.returncode, p.stderr)
        assert p.stdout.startswith('tpusim train: MLP 784-24-12-10 on tiny, 2 replicas, bf16 '
                                   'matmul inputs, SGD with momentum\n'), p.stdout
        assert train_loops(md2) == [3, 1], train_loops(md2)


@special
def cores_per_replica_2_train_with_evaluation():
    with tempfile.TemporaryDirectory(dir=WORK) as d:
        md = os.path.join(d, 'model')
        p = tpusim(['train', *base_flags(md), '--steps', str(STEPS), '--cores-per-replica', '2',
                    '--json'], d)
        assert p.returncode == 0, (p.returncode, p.stderr)
        out = strict_json(p.stdout)
        # two cores hold one replica
        assert out['replicas'] == 1 and out['global_step'] == STEPS, out
        assert out['test_examples'] == N_TEST and 0 <= out['test_accuracy'] <= 1, out
        assert STEPS in ckpt_steps(md)


@special
def cores_per_replica_2_evaluate():
    with tempfile.TemporaryDirectory(dir=WORK) as d:
        md = os.path.join(d, 'model')
        shutil.copytree(BASE_DIR, md)
        p = tpusim(['evaluate', *base_flags(md), '--cores-per-replica', '2', '--json'], d)
        assert p.returncode == 0, (p.returncode, p.stderr)
        out = strict_json(p.stdout)
        assert out['examples'] == N_TEST and out['global_step'] == STEPS, out
        # the same model split over two cores: the same predictions, up to summation order
        assert abs(out['accuracy'] - BASE['test_accuracy']) <= 1 / N_TEST + 1e-9, (out, BASE)


@special
def rtl_with_timing_only_is_refused():
    """The all-pairs runs meet this pair only where --timing-only with evaluate is refused
    first; this one meets the rule itself."""
    with tempfile.TemporaryDirectory(dir=WORK) as d:
        row = {'cmd': 'train', 'trace': False, 'timing_only': True, 'json': True,
               'verbose': '1', 'backend': 'rtl', 'input': 'PER_HOST_V2', 'config': False,
               'ipl': 'steps'}
        p = tpusim(argv_of(row, d), d)
        msg = MSG_RTL_TIMING if HAVE_RTL else MSG_NO_RTL
        assert p.returncode == 2 and p.stdout == '', (p.returncode, p.stdout, p.stderr)
        assert p.stderr.startswith(f'tpusim train: error: {msg}'), p.stderr
        assert p.stderr.count('\n') == 1, p.stderr


def make_base(work):
    """The checkpoint that evaluate and predict read: 4 steps on the tiny chip, plain flags."""
    md = os.path.join(work, 'base')
    p = tpusim(['train', *base_flags(md), '--steps', str(STEPS), '--json', '--verbose', '0'],
               work)
    assert p.returncode == 0, f'the base model did not train: {p.stderr}'
    return md, json.loads(p.stdout)


if __name__ == '__main__':
    with tempfile.TemporaryDirectory() as _work:
        WORK = _work
        DATA = write_fashion_subset(os.path.join(_work, 'data'), N_TRAIN, N_TEST)
        BASE_DIR, BASE = make_base(_work)
        print(f'{len(ROWS)} all-pairs runs over {len(FACTORS)} options; RTL in this build: '
              f'{HAVE_RTL}')
        rc = main()
    sys.exit(rc)
