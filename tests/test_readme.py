#!/usr/bin/env python3
"""The README's commands are tests. This reads README.md itself, so a command line added to
the README is run here without anyone writing a test for it:

- every line of a ```sh block that starts with `tpusim ` (a trailing `\\` joins the next line;
  `#` starts a comment) is run as written, in one scratch directory, in the README's order,
  and must exit 0 with the output it promises: the files it names exist and parse (traces
  load as JSON, .npy files have the right shape, checkpoints are there), and its printed
  summary names the values the command line asked for;
- the two quick-start commands are not run (they install packages and take minutes); the
  scripts they name must exist, parse, do what the README says, and tests/run.sh must be
  what .ci/run calls.

The changes made to README lines so that they run on small data, and nothing else:
- `train`, `evaluate`, `predict`: `--data DIR` is appended, DIR holding the first 1024
  training and 128 test images of Fashion-MNIST (the default global batch of 512 needs at
  least 512 training images; 1024 gives two steps per epoch, so `--epochs 5` is 10 steps);
- `--backend rtl` lines with a global batch over 64 (the default is 512): `--steps N` is
  capped at 1, since each such step on the Verilated array takes seconds; without the RTL in the build, these lines
  must instead fail with exit 2 and the documented 'built without the RTL' message;
- `--backend systemc` lines: without the SystemC model in the build (TPUSIM_HAVE_SYSTEMC=0),
  they must fail with exit 2 and the documented 'built without the SystemC/TLM-2.0 model'
  message;
- in a sanitizer build (TPUSIM_SANITIZED=1, set by tests/meson.build; everything runs 10-30
  times slower there), the same paths on less work: `train` runs at most 4 steps (`--backend
  rtl` lines 1), `--check-equivalence N` 1 step, and `bench loops` at most 4 hosts and 16
  chips per host; each line may take 600 s instead of 280 s.
The files the commands read are written first, as the README implies them: the model files
of configs/models/ (copied to configs/models/ in the scratch directory), run.json (options
for `train --config`, several of them strings), step.tpuprog (a training-step program with an
`iterations` variable: tests/data/program/mlp_step.tpuprog), my-chip.json (a chip file of
one's own, made from configs/tiny.json), A.npy and B.npy (float32 operands), layers.csv (a
SCALE-Sim topology file); runs/a is made by the README's own earlier line.

usage: test_readme.py PATH/TO/tpusim
The environment variables TPUSIM_HAVE_RTL and TPUSIM_HAVE_SYSTEMC (1 or 0, set by
tests/meson.build) say whether the build has the RTL and the SystemC backends; without them,
tpusim is asked. Prints CMocka-style summary lines so
the suite's totals count each case.
"""
import glob
import json
import math
import os
import random
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from cli_harness import CASES, TPUSIM, main, read_npy, write_fashion_subset, write_npy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, 'README.md')
N_TRAIN, N_TEST = 1024, 128
RTL_MAX_STEPS = 1
SANITIZED = os.environ.get('TPUSIM_SANITIZED') == '1'
# the commands run in a scratch directory: the executable by its absolute path
EXE = os.path.abspath(TPUSIM) if os.sep in TPUSIM else shutil.which(TPUSIM) or TPUSIM
PRESETS = ['tiny', 'tpu-v1', 'tpu-v2', 'tpu-v3', 'tpu-v4']

# run.json: what `tpusim train --config run.json --verbose 2 --trace step.json` reads.
RUN_JSON = {'chip': 'tiny', 'layers': '32,16', 'optimizer': 'sgd', 'learning_rate': 0.05,
            'train_batch_size': 64, 'eval_batch_size': 64, 'epochs': 2,
            'iterations_per_loop': '4', 'per_host_input_for_training': 'PER_HOST_V2',
            'model_dir': 'runs/b'}


# ---- the README ------------------------------------------------------------------------------
def sh_blocks(text):
    """The ```sh blocks of a Markdown text, each as a list of logical lines (continuations
    joined)."""
    blocks, cur = [], None
    for line in text.splitlines():
        if cur is None:
            if line.strip() == '```sh':
                cur = []
        elif line.strip() == '```':
            blocks.append(cur)
            cur = None
        elif cur and cur[-1].endswith('\\'):
            cur[-1] = cur[-1][:-1] + ' ' + line.strip()
        else:
            cur.append(line.rstrip())
    assert cur is None, 'README.md: a ```sh block is not closed'
    return blocks


def readme_text():
    with open(README) as f:
        return f.read()


def tpusim_lines():
    """Every `tpusim ...` command line of the README, as argv lists without comments."""
    out = []
    for block in sh_blocks(readme_text()):
        for line in block:
            if line.lstrip().startswith('tpusim '):
                out.append(shlex.split(line, comments=True))
    return out


# ---- options of a command line ---------------------------------------------------------------
def opt(argv, name, default=None):
    """The value of the last `name VALUE` in argv."""
    val = default
    for i, a in enumerate(argv[:-1]):
        if a == name:
            val = argv[i + 1]
    return val


def set_opt(argv, name, value):
    return [value if i > 0 and argv[i - 1] == name else a for i, a in enumerate(argv)]


def config_argv(path):
    """A --config file's options as the flags they stand for ("a_b": 1 is --a-b 1)."""
    with open(path) as f:
        cfg = json.load(f)
    out = []
    for k, v in cfg.items():
        flag = '--' + k.replace('_', '-')
        out += [flag] if v is True else [flag, str(v)]
    return out


def have_rtl():
    env = os.environ.get('TPUSIM_HAVE_RTL')
    if env is not None:
        return env == '1'
    p = subprocess.run([EXE, 'train', '--backend', 'rtl', '--timing-only'],
                       capture_output=True, text=True, timeout=60)
    return 'built without the RTL' not in p.stderr


def have_systemc():
    env = os.environ.get('TPUSIM_HAVE_SYSTEMC')
    if env is not None:
        return env == '1'
    p = subprocess.run([EXE, 'train', '--backend', 'systemc', '--timing-only'],
                       capture_output=True, text=True, timeout=60)
    return 'built without the SystemC' not in p.stderr


def smaller(argv):
    """The README's command line with the substitutions documented at the top of this file."""
    argv = list(argv)
    if argv[1] in ('train', 'evaluate', 'predict', 'fit'):
        argv += ['--data', DATA]
        if (opt(argv, '--backend') == 'rtl' and int(opt(argv, '--train-batch-size', '512')) > 64
                and int(opt(argv, '--steps', '0')) > RTL_MAX_STEPS):
            argv = set_opt(argv, '--steps', str(RTL_MAX_STEPS))
    if not SANITIZED:
        return argv
    caps = {'--steps': RTL_MAX_STEPS if opt(argv, '--backend') == 'rtl' else 4,
            '--check-equivalence': 1} if argv[1] == 'train' else \
        {'--hosts': 4, '--chips': 16} if argv[1] == 'bench' else {}
    for name, cap in caps.items():
        if opt(argv, name) is not None and int(opt(argv, name)) > cap:
            argv = set_opt(argv, name, str(cap))
    return argv


def run_line(argv, expect=0):
    p = subprocess.run([EXE, *argv[1:]], cwd=WORK, capture_output=True, text=True,
                       timeout=600 if SANITIZED else 280)
    assert p.returncode == expect, (f'{shlex.join(argv)}: exit {p.returncode}, expected '
                                    f'{expect}\nstdout: {p.stdout}\nstderr: {p.stderr}')
    return p


def path(name):
    return os.path.join(WORK, name)


def load_trace(name):
    with open(path(name)) as f:
        t = json.load(f)
    events = t['traceEvents'] if isinstance(t, dict) else t
    assert isinstance(events, list) and events, f'{name}: no trace events'
    assert all('ph' in e and 'name' in e for e in events), f'{name}: not Chrome trace events'
    return events


def ckpt_steps(model_dir):
    return sorted(int(re.search(r'ckpt-(\d+)\.safetensors$', p).group(1))
                  for p in glob.glob(os.path.join(path(model_dir), 'ckpt-*.safetensors')))


# ---- what each command must print and write -------------------------------------------------
def check_equivalence(eff, p):
    """train --check-equivalence N: the head names the model, the chip and the cores; a row
    per step, each within the bound; the verdict line says so (exit 0)."""
    out = p.stdout.splitlines()
    chip = opt(eff, '--chip', 'tpu-v3')
    assert out[0].startswith('tpusim train --check-equivalence: '), out
    assert f' on {chip}, ' in out[0] and ' against 1 core, global batch ' in out[0], out
    assert out[1].startswith('bound: '), out
    n = int(opt(eff, '--check-equivalence'))
    rows = [line.split() for line in out if re.match(r'^\s+\d+\s', line)]
    assert [r[0] for r in rows] == [str(k) for k in range(1, n + 1)], out
    assert all(r[-1] == 'ok' for r in rows), out
    assert out[-1].startswith(f'verdict: all {n} steps within the bound'), out


def check_train(argv, p, before):
    if opt(argv, '--config'):
        eff = argv[:2] + config_argv(path(opt(argv, '--config'))) + argv[2:]
    else:
        eff = argv
    if opt(eff, '--check-equivalence'):
        return check_equivalence(eff, p)
    chip = opt(eff, '--chip', 'tpu-v3')
    layers = opt(eff, '--layers', '512,256').replace(',', '-')
    model = opt(eff, '--model')
    batch = int(opt(eff, '--train-batch-size', '512'))
    model_dir = opt(eff, '--model-dir')
    if opt(eff, '--steps'):
        steps = int(opt(eff, '--steps'))
    else:
        steps = math.floor(float(opt(eff, '--epochs', '1')) * (N_TRAIN // batch))
    prior = max(before, default=0)
    out = p.stdout
    if model:
        with open(path(model)) as f:
            name = json.load(f)['name']
        assert out.startswith(f"tpusim train: model '{name}' ({os.path.basename(model)}: "), out
        assert f' params) on {chip}, ' in out.splitlines()[0], out
    else:
        assert out.startswith(f'tpusim train: MLP 784-{layers}-10 on {chip}, '), out
    if opt(eff, '--optimizer') == 'adamw':
        assert ', AdamW' in out.splitlines()[0], out
    if opt(eff, '--lr-schedule'):
        assert f"{opt(eff, '--lr-schedule')} schedule (" in out.splitlines()[0], out
    if opt(eff, '--optimizer') == 'sgd':
        assert 'SGD with momentum' in out.splitlines()[0], out
    gstep = int(re.search(r'^  global step\s+(\d+) \(global batch (\d+)\)', out, re.M).group(1))
    assert gstep == prior + steps, (gstep, prior, steps)
    assert f'(global batch {batch})' in out, out
    if '--no-eval' in eff:
        assert 'test accuracy' not in out, out
    else:
        m = re.search(r'^  test accuracy\s+([\d.]+) % on (\d+) examples', out, re.M)
        assert m and 0 <= float(m.group(1)) <= 100 and int(m.group(2)) == N_TEST, out
    if model_dir:
        assert os.path.exists(path(os.path.join(model_dir, 'checkpoint.json'))), model_dir
        assert gstep in ckpt_steps(model_dir), (model_dir, ckpt_steps(model_dir))
        assert os.path.getsize(path(os.path.join(model_dir, 'metrics.jsonl'))) > 0
    if opt(eff, '--trace'):
        load_trace(opt(eff, '--trace'))
    if '--step-shares' in eff:
        m = re.search(r'^  step shares\s+[\d.]+ us a step after the first loop: all-reduce '
                      r'([\d.]+) %, halo exchange ([\d.]+) %$', out, re.M)
        assert m and 0 <= float(m.group(1)) < 100 and float(m.group(2)) == 0, out
    if opt(eff, '--backend') == 'rtl':
        assert re.search(r'^  RTL backend\s+\d+ Verilated \d+x\d+ arrays ran [1-9]', out, re.M), out
    if opt(eff, '--backend') == 'systemc':
        assert re.search(r'^  SystemC backend\s+[1-9]\d* TLM transactions', out, re.M), out
    if opt(eff, '--vcd'):
        with open(path(opt(eff, '--vcd')), 'rb') as f:
            assert f.read(8) == b'$version', opt(eff, '--vcd')
    verbose = opt(eff, '--verbose', '1')
    if verbose == '2':
        # a line per epoch
        epochs = re.findall(r'^epoch (\d+) ', p.stderr, re.M)
        per_epoch = N_TRAIN // batch
        want = [str(e) for e in range(prior // per_epoch + 1, (prior + steps) // per_epoch + 1)]
        assert epochs == want, (epochs, want, p.stderr)
    elif verbose == '1':
        assert f'{steps}/{steps} steps' in p.stderr, p.stderr
    else:
        assert p.stderr == '', p.stderr


def check_evaluate(argv, p, before):
    # --int8 adds the chip and the fp32 accuracy of the same checkpoint
    int8 = (r', int8 on [\w-]+ \(fp32 on the host: [\d.]+ %, [+-][\d.]+ points in int8\)'
            if '--int8' in argv else '')
    m = re.fullmatch(r'tpusim evaluate: global step (\d+): accuracy ([\d.]+) %, loss ([\d.]+) '
                     r'over (\d+) examples' + int8 + r'\n', p.stdout)
    assert m, p.stdout
    assert int(m.group(1)) == max(before) and int(m.group(4)) == N_TEST, (p.stdout, before)
    assert 0 <= float(m.group(2)) <= 100


def check_predict(argv, p, _before):
    limit = int(opt(argv, '--limit', str(N_TEST)))
    m = re.match(r'tpusim predict: (\d+) predictions', p.stdout)
    assert m and int(m.group(1)) == limit, p.stdout
    if opt(argv, '--output'):
        descr, rows = read_npy(path(opt(argv, '--output')))
        assert descr == '<f4' and len(rows) == limit and len(rows[0]) == 10, (descr, len(rows))
        assert all(math.isfinite(x) for r in rows for x in r)


def check_model(argv, p, _before):
    """model show FILE: the header names the model, the chip and the batch; one row per layer
    of the file, then the loss and the step's own ops; the shares add up to 100 %."""
    with open(path(argv[3])) as f:
        model = json.load(f)
    chip = opt(argv, '--chip', 'tpu-v3')
    lines = p.stdout.splitlines()
    assert lines[0].startswith(f"model '{model['name']}' ({argv[3]}): one training step at "
                               f'global batch '), lines[0]
    assert f' on {chip} (' in lines[0], lines[0]
    rows = lines[2:2 + 1 + len(model['layers']) + 2]
    assert rows[0].split()[:2] == ['input', 'input'], rows[0]
    assert rows[-2].startswith('(loss)') and rows[-1].startswith('(step)'), rows
    shares = [float(re.search(r' ([\d.]+)% +[\d.]+%  \S+$', r).group(1)) for r in rows]
    assert abs(sum(shares) - 100) <= 0.05 * len(rows), shares
    assert re.search(r'^total params: [\d,]+ \(trainable [\d,]+, non-trainable [\d,]+\)$',
                     p.stdout, re.M), p.stdout
    assert re.search(r'^training step: [\d.]+ us simulated, \d+ images/s per chip', p.stdout,
                     re.M), p.stdout


def check_program(argv, p, _before):
    with open(path(argv[3])) as f:
        name = re.search(r'^program (\S+)', f.read(), re.M).group(1)
    if argv[2] == 'check':
        assert p.stdout.startswith(f'program {name}\n'), p.stdout[:200]
        assert re.search(r'^var iterations', p.stdout, re.M), p.stdout[:400]
    else:
        assert re.match(rf'program {name} on \S+: \d+ cores, [1-9]\d* cycles', p.stdout), p.stdout
        if opt(argv, '--trace'):
            load_trace(opt(argv, '--trace'))


def check_config(argv, p, _before):
    if argv[2] == 'list':
        names = [l.split()[0] for l in p.stdout.splitlines()
                 if l and not l.startswith(('NAME', '('))]
        assert names == PRESETS, names
    elif argv[2] == 'show':
        assert p.stdout.startswith(f'{argv[3]}: '), p.stdout[:200]
        assert 'ridge point' in p.stdout, p.stdout
    else:
        for f in argv[3:]:
            with open(path(f)) as fh:
                name = json.load(fh)['name']
            assert re.search(rf'^{re.escape(f)}: ok \(name {re.escape(name)}, ', p.stdout, re.M), \
                p.stdout


def check_gemm(argv, p, _before):
    out = p.stdout
    dtype = opt(argv, '--dtype', 'bf16')
    if opt(argv, '--topology'):
        with open(path(opt(argv, '--topology'))) as f:
            names = [l.split(',')[0].strip() for l in f.read().splitlines()[1:] if l.strip()]
        rows = {l.split()[0]: l.split() for l in out.splitlines() if l.strip()}
        for n in names:
            assert n in rows and int(rows[n][4]) > 0, (n, out)
        assert int(rows['total'][1]) == sum(int(rows[n][4]) for n in names), out
        return
    if opt(argv, '--a'):
        _, a = read_npy(path(opt(argv, '--a')))
        _, b = read_npy(path(opt(argv, '--b')))
        m, k, n = len(a), len(b), len(b[0])
    else:
        m, k, n = (int(opt(argv, x)) for x in ('-m', '-k', '-n'))
    assert out.startswith(f'tpusim gemm: Y[{m}][{n}] = A[{m}][{k}] * B[{k}][{n}], {dtype}\n'), out
    assert int(re.search(r'^cycles\s+(\d+)', out, re.M).group(1)) > 0, out
    if opt(argv, '--schedule') == 'serial':
        assert re.search(rf'^schedule\s+serial folds.*dataflow {opt(argv, "--dataflow", "ws")}$',
                         out, re.M), out
    if opt(argv, '--array'):
        assert f'one {opt(argv, "--array")} array' in out, out
    if '--timing-only' in argv:
        assert re.search(r'^values\s+not computed', out, re.M), out
    else:
        assert re.search(r'^values\s+sum \S+, max \|y\| \S+, 0 NaN', out, re.M), out
    if opt(argv, '--dump'):
        descr, y = read_npy(path(opt(argv, '--dump')))
        assert descr == '<f4' and len(y) == m and len(y[0]) == n
        # the values are the product, to bf16 input precision
        for i in range(m):
            for j in range(n):
                exact = sum(a[i][x] * b[x][j] for x in range(k))
                scale = sum(abs(a[i][x] * b[x][j]) for x in range(k))
                assert abs(y[i][j] - exact) <= 2 ** -7 * scale, (i, j, y[i][j], exact)
    if opt(argv, '--dump-inputs'):
        prefix = opt(argv, '--dump-inputs')
        _, sa = read_npy(path(prefix + '_a.npy'))
        _, sb = read_npy(path(prefix + '_b.npy'))
        assert (len(sa), len(sa[0]), len(sb), len(sb[0])) == (m, k, k, n)


def check_shard(argv, p, _before):
    """shard: the plan names the pod slice and the batch asked for (--json: parsed, its calls
    as many as it says); --svg writes an SVG with one part per logical core of the replica
    (or one, for a tensor that is not split)."""
    batch = int(opt(argv, '--batch'))
    cpr = int(opt(argv, '--cores-per-replica', '1'))
    if '--json' in argv:
        j = json.loads(p.stdout)
        assert j['global_batch'] == batch and j['num_cores_per_replica'] == cpr, j
        assert len(j['input_fn']['calls']) == j['input_fn']['calls_per_step'], j
    else:
        assert p.stdout.startswith('pod slice: '), p.stdout[:200]
        assert re.search(rf', input \S+: global batch {batch}, batch per replica \d+', p.stdout), \
            p.stdout
    if opt(argv, '--svg'):
        root = ET.parse(path(opt(argv, '--svg'))).getroot()
        parts = [g for g in root.iter('{http://www.w3.org/2000/svg}g') if g.get('class') == 'part']
        assert len(parts) in (1, cpr), len(parts)


def check_bench(argv, p, _before):
    """bench loops: one row per loop size asked for (the table or --json), one of them marked
    as the smallest within 1 % of the best; --csv and --plot files written."""
    mx, lst = opt(argv, '--max'), opt(argv, '--list')
    sizes = [int(x) for x in lst.split(',')] if lst else \
        [1 << i for i in range(int(mx or 1024).bit_length())]
    if '--json' in argv:
        j = json.loads(p.stdout)
        assert [x['iterations_per_loop'] for x in j['points']] == sizes, j
        assert j['knee'] in sizes and j['best'] in sizes, j
        assert j['timing_only'] == ('--timing-only' in argv), j
    else:
        rows = [l for l in p.stdout.splitlines() if l[:1] in ' *' and l[1:].split()[:1] and
                l[1:].split()[0].isdigit()]
        assert [int(r[1:].split()[0]) for r in rows] == sizes, p.stdout
        assert sum(r[0] == '*' for r in rows) == 1, p.stdout
    if opt(argv, '--csv'):
        with open(path(opt(argv, '--csv'))) as f:
            assert len(f.read().splitlines()) == 1 + len(sizes)
    if opt(argv, '--plot'):
        with open(path(opt(argv, '--plot')), 'rb') as f:
            head = f.read(8)
        assert head == b'\x89PNG\r\n\x1a\n' or head.startswith(b'<?xml'), head


def check_fit(argv, p, _before):
    """fit: "Epoch k/n" before each epoch (n > 1), one Keras line per epoch (not a terminal:
    verbose 2), validation's val_ logs, each callback's output, then the test line."""
    epochs = int(opt(argv, '--epochs', '1'))
    batch = int(opt(argv, '--batch-size', '32'))
    split = float(opt(argv, '--validation-split', '0'))
    out = p.stdout
    heads = re.findall(r'^Epoch (\d+)/(\d+)$', out, re.M)
    ran = len(heads) if epochs > 1 else 1
    assert heads == [(str(k), str(epochs)) for k in range(1, ran + 1)] or epochs == 1, out
    steps = math.ceil(int(N_TRAIN * (1 - split)) / batch)
    val = r' - val_loss: [\d.]+ - val_accuracy: [\d.]+' if split else ''
    lines = re.findall(rf'^{steps}/{steps} - \d+s - loss: [\d.]+ - accuracy: [\d.]+{val} - '
                       r'\d+(?:s|ms|us)/epoch - \d+(?:s|ms|us)/step$', out, re.M)
    assert len(lines) == ran, (steps, out)
    assert re.search(rf'^test \({N_TEST} examples\): loss [\d.]+ - accuracy [\d.]+$', out,
                     re.M), out
    if opt(argv, '--checkpoint'):
        saved = re.findall(r'^Epoch (\d+): saving model to (.*)$', out, re.M)
        assert [int(s[0]) for s in saved] == list(range(1, ran + 1)), out
        for _, d in saved:
            assert os.path.exists(path(os.path.join(d, 'checkpoint.json'))), d
    if opt(argv, '--csv-log'):
        with open(path(opt(argv, '--csv-log')), 'rb') as f:
            rows = f.read().decode().split('\r\n')
        assert rows[0] == 'epoch,accuracy,loss,val_accuracy,val_loss', rows
        assert [r.split(',')[0] for r in rows[1:-1]] == [str(e) for e in range(ran)], rows


CHECKS = {'train': check_train, 'evaluate': check_evaluate, 'predict': check_predict,
          'program': check_program, 'config': check_config, 'gemm': check_gemm,
          'model': check_model, 'shard': check_shard, 'bench': check_bench, 'fit': check_fit}


def run_readme_line(readme_argv):
    argv = smaller(readme_argv)
    print(f'README: {shlex.join(readme_argv)}')
    print(f'  runs: {shlex.join(argv)}')
    if opt(argv, '--backend') == 'rtl' and not HAVE_RTL:
        p = run_line(argv, expect=2)
        assert 'this tpusim was built without the RTL matrix unit' in p.stderr, p.stderr
        assert "rebuild with 'meson configure -Drtl=enabled'" in p.stderr, p.stderr
        print('  (no RTL in this build: the documented error)')
        return
    if opt(argv, '--backend') == 'systemc' and not have_systemc():
        p = run_line(argv, expect=2)
        assert 'this tpusim was built without the SystemC/TLM-2.0 model' in p.stderr, p.stderr
        assert "rebuild with 'meson configure -Dsystemc=enabled'" in p.stderr, p.stderr
        print('  (no SystemC in this build: the documented error)')
        return
    model_dir = opt(argv, '--model-dir')
    before = ckpt_steps(model_dir) if model_dir else []
    if argv[1] in ('evaluate', 'predict'):
        assert before, f'no checkpoint in {model_dir}: an earlier README line makes it'
    p = run_line(argv)
    check = CHECKS.get(argv[1])
    if check:
        check(argv, p, before)
    else:
        # a command this file does not know yet: it runs and says something
        assert p.stdout.strip(), f'{shlex.join(argv)} printed nothing'


# ---- the files the README's commands read -------------------------------------------------------
def make_inputs():
    write_fashion_subset(DATA, N_TRAIN, N_TEST)
    shutil.copytree(os.path.join(ROOT, 'configs', 'models'), path(os.path.join('configs',
                                                                              'models')))
    with open(path('run.json'), 'w') as f:
        json.dump(RUN_JSON, f, indent=1)
    shutil.copy(os.path.join(ROOT, 'tests', 'data', 'program', 'mlp_step.tpuprog'),
                path('step.tpuprog'))
    with open(os.path.join(ROOT, 'configs', 'tiny.json')) as f:
        chip = json.load(f)
    chip['name'] = 'my-chip'
    chip['description'] = 'a chip of my own: the tiny preset under another name'
    with open(path('my-chip.json'), 'w') as f:
        json.dump(chip, f, indent=1)
    rnd = random.Random(7)
    f32 = lambda x: struct.unpack('<f', struct.pack('<f', x))[0]  # noqa: E731
    write_npy(path('A.npy'), [[f32(rnd.uniform(-2, 2)) for _ in range(19)] for _ in range(5)],
              '<f4', 'f')
    write_npy(path('B.npy'), [[f32(rnd.uniform(-2, 2)) for _ in range(7)] for _ in range(19)],
              '<f4', 'f')
    with open(path('layers.csv'), 'w') as f:
        f.write('Layer, M, N, K,\nfc1, 256, 512, 784,\nfc2, 256, 10, 512,\n')


# ---- cases ---------------------------------------------------------------------------------------
def quick_start_scripts():
    """The quick-start commands are not run; what they run is checked."""
    text = readme_text()
    quick = text.split('## Quick start', 1)[1].split('\n## ', 1)[0]
    lines = [shlex.split(l, comments=True) for b in sh_blocks(quick) for l in b]
    assert [l[:2] for l in lines] == [['bash', 'cli/demo.sh'], ['bash', 'tests/run.sh']], lines
    for _, script in lines:
        full = os.path.join(ROOT, script)
        assert os.path.isfile(full), f'README names {script}, which does not exist'
        p = subprocess.run(['bash', '-n', full], capture_output=True, text=True)
        assert p.returncode == 0, f'{script} does not parse: {p.stderr}'
    # the CI runs the second
    with open(os.path.join(ROOT, '.ci', 'run')) as f:
        ci = [shlex.split(l, comments=True) for l in f.read().splitlines()]
    assert ['bash', 'tests/run.sh'] in ci, ci
    # tests/run.sh --quick: the plain build only, as the README says
    with open(os.path.join(ROOT, 'tests', 'run.sh')) as f:
        assert '--quick' in f.read()
    # the first trains what the README describes: MLP 784-512-256-10, Adam, global batch 512,
    # 15 epochs, a TPU v3 host, iterations_per_loop 100, and the fp32 host reference
    assert 'MLP (784-512-256-10, Adam, global batch 512, 15 epochs)' in ' '.join(quick.split())
    assert '`iterations_per_loop` 100' in quick
    with open(os.path.join(ROOT, 'cli', 'demo.sh')) as f:
        demo = f.read().replace('\\\n', ' ')
    train = [shlex.split(l) for l in demo.splitlines() if 'tpusim train' in l and
             not l.lstrip().startswith('#')]
    assert len(train) == 1, train
    argv = train[0]
    for name, want in (('--chip', 'tpu-v3'), ('--layers', '512,256'), ('--optimizer', 'adam'),
                       ('--train-batch-size', '512'), ('--epochs', '15'),
                       ('--iterations-per-loop', '100')):
        assert opt(argv, name) == want, (name, opt(argv, name), want)
    assert '--reference' in argv and '--no-eval' not in argv


CASES.append(quick_start_scripts)


def readme_has_commands():
    lines = tpusim_lines()
    # every subcommand the README shows has a check of its own here
    assert len(lines) >= 10 and all(l[1] in CHECKS for l in lines), [l[:2] for l in lines]


CASES.append(readme_has_commands)

for _i, _argv in enumerate(tpusim_lines()):
    def _case(argv=_argv):
        run_readme_line(argv)
    _case.__name__ = f'readme_{_i + 1:02d}_' + '_'.join(
        a for a in _argv[1:3] if not a.startswith('-')).replace('.', '_').replace('-', '_')
    CASES.append(_case)


if __name__ == '__main__':
    with tempfile.TemporaryDirectory() as _work:
        WORK = _work
        DATA = os.path.join(_work, 'fashion-small')
        HAVE_RTL = have_rtl()
        make_inputs()
        rc = main()
    sys.exit(rc)
