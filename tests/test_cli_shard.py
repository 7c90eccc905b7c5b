#!/usr/bin/env python3
"""`tpusim shard` driven as a user drives it: the text, the --json schema (parsed, every field
checked), the SVG (parsed with xml.etree: one part per logical core, labelled), every
TPUEstimator rule's message through the command line, the option errors, and combinations of
hosts, cores per replica, input modes and modes checked against an independent model of
TPUEstimator's input pipeline written here (_InputPipeline's calls and batch sizes,
_validate_tpu_configuration's rules, TPU infeed's greedy split).

usage: test_cli_shard.py PATH/TO/tpusim"""
import json
import os
import tempfile
import xml.etree.ElementTree as ET

from cli_harness import case, expect_error, main, run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN = os.path.join(ROOT, 'configs', 'models', 'cnn.json')
SVG_NS = '{http://www.w3.org/2000/svg}'


def shard_json(*args):
    p = run('shard', '--json', *args)
    assert p.stderr == '', p.stderr
    return json.loads(p.stdout)


# ---- an independent model of TPUEstimator's splits ----------------------------------------------
def greedy_parts(n, p):
    """tpu_feed.partition_or_replicate_on_host's sizes of one dimension, as written there."""
    if p <= 1:
        return [n]
    q, r = divmod(n, p)
    if r == 0:
        return [q] * p
    ceil = q + 1
    full, left = divmod(n, ceil)
    sizes = [ceil] * full + [left]
    return sizes + [0] * (p - len(sizes))


def expected_calls(hosts, cores_per_host, cpr, inp, mode, sliced, batch):
    """(per replica batch, [(host, batch, first replica, n replicas, rows each, broadcast)])
    or None when TPUEstimator refuses the configuration."""
    cores = hosts * cores_per_host
    if cpr > cores or cores % cpr:
        return None
    replicas = cores // cpr
    if inp == 'PER_SHARD_V1' and cpr > 1:
        return None
    if inp != 'PER_HOST_V2' and cpr > cores_per_host:
        return None
    if cpr <= cores_per_host and cores_per_host % cpr:
        return None
    if mode == 'train':
        feed = {'PER_SHARD_V1': 'replica', 'PER_HOST_V1': 'host', 'PER_HOST_V2': 'replica',
                'BROADCAST': 'broadcast'}[inp]
    elif sliced:
        feed = 'sliced'
    else:
        feed = {'BROADCAST': 'broadcast', 'PER_HOST_V2': 'replica'}.get(inp, 'host')
    if feed != 'broadcast' and batch % replicas:
        return None
    if mode == 'eval' and hosts > 1 and feed not in ('broadcast', 'sliced', 'replica'):
        return None
    if mode == 'predict' and hosts > 1 and not (
            feed in ('broadcast', 'sliced') or (feed == 'replica' and replicas == 1)):
        return None
    if feed == 'broadcast':
        return batch, [(0, batch, 0, replicas, batch, True)]
    per = batch // replicas
    if feed == 'sliced':
        return per, [(0, batch, 0, replicas, per, False)]
    if feed == 'host':
        rph = replicas // hosts
        return per, [(h, batch // hosts, h * rph, rph, per, False) for h in range(hosts)]
    return per, [(r * cpr // cores_per_host, per, r, 1, per, False) for r in range(replicas)]


# ---- cases -------------------------------------------------------------------------------------
@case
def text_output():
    """The text names the pod slice, the calls per host and per call, and each core's slice."""
    out = run('shard', '--hosts', '2', '--cores-per-replica', '4', '--batch', '64',
              '--tensor', 'images:28x28x1', '--tensor', 'labels:1',
              '--input-partition-dims', '[[1, 4, 1, 1]]').stdout
    lines = out.splitlines()
    assert lines[0] == 'pod slice: 2 hosts x 4 chips x 2 cores (tpu-v3) = 16 cores, 8 per host', \
        lines[0]
    assert lines[1].startswith('replicas: 4 of 4 cores (num_cores_per_replica)'), lines[1]
    assert lines[2] == 'training, input PER_HOST_V2: global batch 64, batch per replica 16', \
        lines[2]
    assert lines[3] == 'input_fn calls per step: 4', lines[3]
    assert lines[4] == '  host 0: 2 calls of batch 16 (32 rows)', lines[4]
    assert lines[5] == '  host 1: 2 calls of batch 16 (32 rows)', lines[5]
    assert lines[8].split() == ['1', '0', '1', '16', 'replica', '1,', 'rows', '0-15'], lines[8]
    assert lines[9].split()[:2] == ['2', '1'], lines[9]
    assert "tensor 'images' [16, 28, 28, 1] per replica, partition dims [1, 4, 1, 1]: split " \
           "over the replica's cores" in out, out
    assert '        3     3    0  16x7x28x1            [0:16, 21:28, 0:28, 0:1]     ' \
           '16x7x28x1' in out, out
    assert "tensor 'labels' [16, 1] per replica, partition dims None: every core of a replica " \
           "gets all of it" in out, out
    out = run('shard', '--hosts', '2', '--per-host-input-for-training', 'PER_HOST_V1',
              '--batch', '64').stdout
    assert '     1     1      1      32  replicas 8-15 in order, 4 rows each (rows 0-3 to ' \
           'replica 8, 4-7 to replica 9, ...)\n' in out, out
    out = run('shard', '--hosts', '2', '--per-host-input-for-training', 'BROADCAST',
              '--batch', '60').stdout
    assert 'global batch 60, batch per replica 60 (every replica gets all of it)' in out, out
    assert '  host 1: no calls\n' in out and 'replicas 0-15, all 60 rows to each' in out, out
    # uneven: 10 over 4 is 3, 3, 3, 1, each buffer 3 wide
    out = run('shard', '--batch', '8', '--cores-per-replica', '4', '--tensor', 'x:10',
              '--input-partition-dims', '[[1, 4]]').stdout
    assert '        3     3    0  4x1                  [0:4, 9:10]                  4x3' in out, out


@case
def json_schema():
    """Every field of the documented schema, for a partitioned tensor, a replicated one and
    one sent to logical core 0 only."""
    j = shard_json('--chip', 'tpu-v3', '--hosts', '2', '--cores-per-replica', '4', '--batch',
                   '32', '--tensor', 'images:5x14x1', '--tensor', 'labels:1',
                   '--tensor', 'mask:1', '--input-partition-dims', '[[1, 2, 2, 1], [1, 1]]')
    want = {'chip': 'tpu-v3', 'hosts': 2, 'chips_per_host': 4, 'cores_per_chip': 2,
            'cores': 16, 'cores_per_host': 8, 'num_cores_per_replica': 4, 'replicas': 4,
            'mode': 'train', 'input': 'PER_HOST_V2', 'global_batch': 32,
            'batch_per_replica': 8}
    for k, v in want.items():
        assert j[k] == v, (k, j[k], v)
    f = j['input_fn']
    assert f['calls_per_step'] == 4 and len(f['calls']) == 4, f
    assert f['per_host'] == [{'host': 0, 'calls': 2, 'batch': 8, 'rows': 16},
                             {'host': 1, 'calls': 2, 'batch': 8, 'rows': 16}], f['per_host']
    assert f['calls'][3] == {'host': 1, 'shard': 3, 'batch': 8, 'first_replica': 3,
                             'n_replicas': 1, 'rows_each': 8, 'broadcast': False}, f['calls'][3]
    images, labels, mask = j['tensors']
    assert images['name'] == 'images' and images['shape'] == [8, 5, 14, 1]
    assert images['partition_dims'] == [1, 2, 2, 1] and images['placement'] == 'partitioned'
    # 5 rows over 2: 3, 2; 14 columns over 2: 7, 7; row-major over the cores
    cores = images['cores']
    assert [c['logical_core'] for c in cores] == [0, 1, 2, 3]
    assert [c['begin'][1:3] for c in cores] == [[0, 0], [0, 7], [3, 0], [3, 7]], cores
    assert [c['end'][1:3] for c in cores] == [[3, 7], [3, 14], [5, 7], [5, 14]], cores
    assert [c['shape'] for c in cores] == [[8, 3, 7, 1], [8, 3, 7, 1], [8, 2, 7, 1],
                                           [8, 2, 7, 1]], cores
    assert all(c['buffer'] == [8, 3, 7, 1] and c['receives'] for c in cores), cores
    assert [(c['replica0_core'], c['replica0_host']) for c in cores] == [(0, 0), (1, 0),
                                                                          (2, 0), (3, 0)]
    # dims[1] applies to every tensor after the features: a product of 1 is logical core 0's
    for t in (labels, mask):
        assert t['partition_dims'] == [1, 1] and t['placement'] == 'core0', t
        assert [c['receives'] for c in t['cores']] == [True, False, False, False], t
        assert t['cores'][0]['shape'] == [8, 1] and t['cores'][1]['shape'] == [0, 0], t
    # None: replicated
    j = shard_json('--batch', '16', '--cores-per-replica', '2', '--tensor', 'x:4',
                   '--tensor', 'y:3', '--input-partition-dims', '[[1, 2], None]')
    y = j['tensors'][1]
    assert y['partition_dims'] is None and y['placement'] == 'replicated', y
    assert all(c['receives'] and c['shape'] == [4, 3] for c in y['cores']), y
    # no tensors: the calls only
    j = shard_json('--batch', '16')
    assert j['tensors'] == [] and j['replicas'] == 8, j


@case
def tpu_split_examples():
    """TPU's own examples of the greedy split, through the command line."""
    for n, p, sizes in ((5, 2, [3, 2]), (14, 4, [4, 4, 4, 2]), (10, 4, [3, 3, 3, 1]),
                        (9, 4, [3, 3, 3, 0]), (28, 8, [4] * 7 + [0]), (2, 4, [1, 1, 0, 0])):
        assert greedy_parts(n, p) == sizes, (n, p)  # the model here agrees with TPU's examples
        j = shard_json('--batch', str(16 // p), '--cores-per-replica', str(p), '--chips-per-host',
                       '4', '--tensor', f'x:{n}', '--input-partition-dims', f'[[1, {p}]]')
        got = [c['shape'][1] for c in j['tensors'][0]['cores']]
        assert got == sizes, (n, p, got)
        assert all(c['buffer'][1] == max(sizes) for c in j['tensors'][0]['cores'])


@case
def combinations():
    """Hosts, chips, cores per replica, input modes and modes: each accepted plan has the
    calls and batches of the model above, each refused one exits 2 with one line."""
    n = 0
    for hosts in (1, 2, 4):
        for chips in (1, 2):
            for cpr in (1, 2, 4, 8, 16):
                for inp in ('PER_SHARD_V1', 'PER_HOST_V1', 'PER_HOST_V2', 'BROADCAST'):
                    for mode, sliced in (('train', False), ('eval', False), ('eval', True),
                                         ('predict', False)):
                        if (hosts + chips + cpr + n) % 3:  # a third of them: time
                            n += 1
                            continue
                        n += 1
                        batch = 48
                        args = ['shard', '--chip', 'tpu-v3', '--hosts', str(hosts),
                                '--chips-per-host', str(chips), '--cores-per-replica', str(cpr),
                                '--per-host-input-for-training', inp, '--mode', mode,
                                '--batch', str(batch), '--json']
                        if sliced:
                            args += ['--eval-training-input-configuration', 'SLICED']
                        want = expected_calls(hosts, chips * 2, cpr, inp, mode, sliced, batch)
                        if want is None:
                            expect_error(args, 2)
                            continue
                        j = json.loads(run(*args).stdout)
                        per, calls = want
                        assert j['batch_per_replica'] == per, (args, j['batch_per_replica'])
                        got = [(c['host'], c['batch'], c['first_replica'], c['n_replicas'],
                                c['rows_each'], c['broadcast']) for c in j['input_fn']['calls']]
                        assert got == calls, (args, got, calls)


@case
def rule_messages():
    """Each TPUEstimator rule has its own message through the command line (exit 2)."""
    B = ['--batch', '64']
    img = ['--tensor', 'images:28x28x1', '--tensor', 'labels:1']
    cases = [
        (['--cores-per-replica', '3'] + B, 'num_cores_per_replica must be 1, 2, 4, 8, 16, 32, '
         '64 or 128 (TPUConfig); got 3; use 2 or 4'),
        (['--cores-per-replica', '16'] + B, 'num_cores_per_replica 16, is larger than the total '
         'num of TPU cores in the system, 8 (1 host x 4 chips x 2 cores); use '
         'num_cores_per_replica 8 or less'),
        (['--num-shards', '8', '--cores-per-replica', '2'] + B, 'num_shards 8 is not set '
         'correctly: the system has 8 cores and num_cores_per_replica is 2, so num_replicas is 4'),
        (['--hosts', '2', '--chips-per-host', '1', '--cores-per-replica', '4',
          '--per-host-input-for-training', 'PER_HOST_V1'] + B, 'except in PER_HOST_V2 mode, a '
         'replica must fit on one host: num_cores_per_replica 4 is more than the 2 cores per '
         'host'),
        (['--cores-per-replica', '2', '--per-host-input-for-training', 'PER_SHARD_V1'] + B,
         'model parallelism (num_cores_per_replica 2) only supports per host input for '
         'training, and per_host_input_for_training is PER_SHARD_V1'),
        (['--batch', '100'], 'train_batch_size 100 must be divisible by the number of replicas '
         '(num_shards) 8, since each replica takes the same share of the global batch; use 96 '
         'or 104'),
        (['--batch', '100', '--mode', 'eval', '--eval-training-input-configuration', 'SLICED'],
         'eval_batch_size 100 must be divisible', 'SLICED: TPUEstimator would drop the rest'),
        (['--hosts', '2', '--mode', 'eval', '--per-host-input-for-training', 'PER_HOST_V1'] + B,
         'evaluation on 2 hosts is only supported with per_host_input_for_training BROADCAST '
         'or PER_HOST_V2, or eval_training_input_configuration SLICED'),
        (['--hosts', '2', '--mode', 'predict'] + B, 'prediction on 2 hosts is only supported '
         'with', 'PER_HOST_V2 with 16 replicas'),
        (['--per-host-input-for-training', 'PER_HOST_V1', '--cores-per-replica', '2',
          '--input-partition-dims', '[[1, 2, 1, 1]]'] + B + img,
         'input_partition_dims is only supported in PER_HOST_V2 mode (TPUConfig), and '
         'per_host_input_for_training is PER_HOST_V1'),
        (['--input-partition-dims', '[[1, 2, 1, 1]]'] + B + img,
         'input_partition_dims requires setting num_cores_per_replica (TPUConfig), and it is 1'),
        (['--cores-per-replica', '4', '--input-partition-dims', '[[1, 2, 1, 1]]'] + B + img,
         "tensor 'images': the product of its input partition dims [1, 2, 1, 1] is 2, and it "
         'should equal num_cores_per_replica 4'),
        (['--cores-per-replica', '4', '--input-partition-dims', '[[1, 4, 1]]'] + B + img,
         "tensor 'images' of shape [32, 28, 28, 1] has 4 dimensions (the batch first), and its "
         'input partition dims [1, 4, 1] have 3'),
        (['--cores-per-replica', '2', '--mode', 'eval', '--eval-training-input-configuration',
          'SLICED', '--input-partition-dims', '[[1, 2, 1, 1]]'] + B + img,
         'input_partition_dims with eval_training_input_configuration SLICED'),
        (['--cores-per-replica', '2', '--input-partition-dims', '[[1, 2, 1, 1], [1, 2, 1]]'] + B +
         img, "tensor 'labels' of shape [16, 1] has 2 dimensions"),
        (['--cores-per-replica', '2', '--input-partition-dims', '[None, [1, 2]]'] + B + img,
         'input_partition_dims[0] (the features) must not be None'),
        (['--cores-per-replica', '2', '--input-partition-dims', '[[1, 0, 1, 1]]'] + B + img,
         'the count 0 at column 6 is below 1; all input partition dims must be >= 1'),
        (['--cores-per-replica', '2', '--input-partition-dims', '[]'] + B + img,
         'it must be a list with one or two elements'),
        (['--cores-per-replica', '2', '--input-partition-dims', '[[1], [1], [1]]'] + B + img,
         'input_partition_dims has a third entry'),
    ]
    for args, *needles in cases:
        expect_error(['shard', *args], 2, *needles)
    # the partitioned evaluation TPUEstimator supports: PER_HOST_V2, per replica
    j = shard_json('--mode', 'eval', '--cores-per-replica', '2', '--input-partition-dims',
                   '[[1, 2, 1, 1]]', *B, *img)
    assert j['input'] == 'PER_HOST_V2' and j['input_fn']['calls_per_step'] == 4, j


@case
def option_errors():
    expect_error(['shard'], 2, 'give the global batch: --batch N')
    expect_error(['shard', '--batch', '8', '--tensor', 'images'], 2,
                 "--tensor 'images' is not NAME:SHAPE")
    # the labels' dims with no labels: a warning, the plan still printed
    p = run('shard', '--batch', '8', '--cores-per-replica', '2', '--tensor', 'x:4x4x1',
            '--input-partition-dims', '[[1, 2, 1, 1], [2, 1]]')
    assert p.stderr == ('tpusim shard: warning: input_partition_dims[1] applies to no tensor: '
                        'it is for the tensors after the features (the labels), and only the '
                        'features are given; give them (--tensor, or --mode train or eval with '
                        '--model) or write None there\n'), p.stderr
    assert 'x' in p.stdout, p.stdout
    p = run('shard', '--batch', '8', '--cores-per-replica', '2', '--tensor', 'x:4x4x1',
            '--input-partition-dims', '[[1, 2, 1, 1], None]')
    assert p.stderr == '', p.stderr
    # no partition dims with 2 cores a replica: where tpusim differs from TPUEstimator, said
    out = run('shard', '--batch', '8', '--cores-per-replica', '2', '--tensor', 'x:4').stdout
    assert ('every core of a replica gets all of it (tpusim; TPUEstimator with no '
            'input_partition_dims at all feeds logical core 0 only)') in out, out
    assert 'TPUEstimator feeds logical core 0 only' in run('train', '--help').stdout
    # the limits train has (tpusim train --cores-per-replica, --hosts, hosts x --chips)
    expect_error(['shard', '--batch', '8', '--cores-per-replica', '0'], 2,
                 "--cores-per-replica '0' is not a whole number from 1 to 128")
    expect_error(['shard', '--batch', '8', '--cores-per-replica', '256'], 2,
                 "--cores-per-replica '256' is not a whole number from 1 to 128")
    expect_error(['shard', '--batch', '8', '--hosts', '2000'], 2,
                 "--hosts '2000' is not a whole number from 1 to 1024")
    expect_error(['shard', '--batch', '8', '--chip', 'tiny', '--hosts', '1024',
                  '--chips-per-host', '8'], 2,
                 '--hosts 1024 x 8 chips per host is 8192 chips; tpusim simulates at most 4096',
                 '--chips-per-host')
    assert "train's --chips" in run('shard', '--help').stdout
    expect_error(['shard', '--batch', '8', '--tensor', 'x:28x0'], 2,
                 "--tensor 'x:28x0': the shape '28x0' is not 1 to 7 sizes")
    expect_error(['shard', '--batch', '8', '--tensor', 'x:28x'], 2, 'the shape ends in')
    expect_error(['shard', '--batch', '8', '--tensor', 'x:2', '--tensor', 'x:3'], 2,
                 "a tensor named 'x' is already given")
    expect_error(['shard', '--batch', '8'] + ['--tensor', 'a:1', '--tensor', 'b:1',
                                              '--tensor', 'c:1', '--tensor', 'd:1',
                                              '--tensor', 'e:1'], 2, 'at most 4 tensors')
    expect_error(['shard', '--batch', '8', '--tensor', 'x:2', '--model', CNN], 2,
                 'with --tensor or with --model, not both')
    expect_error(['shard', '--batch', '8', '--input-partition-dims', '[[1, 2]]'], 2,
                 '--input-partition-dims applies to input tensors, and none is given')
    expect_error(['shard', '--batch', '8', '--tensor', 'x:2', '--input-partition-dims',
                  '[[1, 2.5]]'], 2, "--input-partition-dims: input_partition_dims: expected ',' "
                 "or a closing bracket after a whole number at column 7, found '.'")
    expect_error(['shard', '--batch', '8', '--svg-tensor', 'x'], 2, 'give --svg FILE too')
    expect_error(['shard', '--batch', '8', '--svg', '/tmp/none.svg'], 2, 'no tensor is given')
    expect_error(['shard', '--batch', '8', '--tensor', 'x:2', '--svg', '/tmp/x.svg',
                  '--svg-tensor', 'y'], 2, "--svg-tensor 'y' is none of the tensors (x)")
    with tempfile.TemporaryDirectory() as d:
        expect_error(['shard', '--batch', '8', '--tensor', 'x:2', '--svg', d], 2, '--svg', d)
    expect_error(['shard', '--batch', '8', '--mode', 'fit'], 2, "--mode 'fit' is not one of "
                 'train, eval, predict')
    expect_error(['shard', '--batch', '8', '--chip', 'nope'], 1, 'nope')
    expect_error(['shard', '--bogus'], 2, "unknown option '--bogus'")
    h = run('shard', '--help').stdout
    for opt in ('--hosts', '--chips-per-host', '--cores-per-replica', '--num-shards',
                '--per-host-input-for-training', '--eval-training-input-configuration',
                '--mode', '--batch', '--tensor', '--model', '--input-partition-dims', '--json',
                '--svg', '--svg-tensor'):
        assert opt in h, opt
    assert 'Where tpusim is stricter than TPUEstimator' in h, h
    assert 'shard' in run('--help').stdout


@case
def model_tensors():
    """--model takes the model file's infeed tensors: x, then labels (train, eval) or none
    (predict)."""
    j = shard_json('--model', CNN, '--batch', '8', '--cores-per-replica', '2',
                   '--input-partition-dims', '[[1, 2, 1, 1]]')
    assert [(t['name'], t['shape']) for t in j['tensors']] == [('x', [2, 28, 28, 1]),
                                                               ('labels', [2, 1])], j['tensors']
    assert j['tensors'][0]['cores'][1]['begin'] == [0, 14, 0, 0]
    j = shard_json('--model', CNN, '--batch', '16', '--mode', 'predict')
    assert [t['name'] for t in j['tensors']] == ['x'], j['tensors']
    with tempfile.TemporaryDirectory() as d:
        reg = os.path.join(d, 'reg.json')
        with open(reg, 'w') as f:
            json.dump({'name': 'reg', 'input': [4], 'layers': [{'type': 'dense', 'units': 3}],
                       'loss': 'mean_squared_error'}, f)
        j = shard_json('--model', reg, '--batch', '16', '--chips-per-host', '4')
        assert [(t['name'], t['shape']) for t in j['tensors']] == [
            ('x', [2, 4]), ('targets', [2, 3]), ('mask', [2, 1])], j['tensors']


def svg_parts(path):
    root = ET.parse(path).getroot()
    assert root.tag == SVG_NS + 'svg', root.tag
    parts = [g for g in root.iter(SVG_NS + 'g') if g.get('class') == 'part']
    texts = [[t.text for t in g.iter(SVG_NS + 'text')] for g in parts]
    rects = [r for r in root.iter(SVG_NS + 'rect') if r.get('class') == 'part']
    assert len(rects) == len(parts)
    return root, parts, texts


@case
def svg_picture():
    with tempfile.TemporaryDirectory() as d:
        svg = os.path.join(d, 'split.svg')
        # 5 x 14 over [2, 4]: 8 parts in a 2 x 4 grid
        out = run('shard', '--batch', '10', '--cores-per-replica', '8', '--chips-per-host', '8',
                  '--tensor', 'x:5x14', '--input-partition-dims', '[[1, 2, 4]]',
                  '--svg', svg).stdout
        assert f"wrote {svg} (tensor 'x')" in out, out
        root, parts, texts = svg_parts(svg)
        assert len(parts) == 8, len(parts)
        assert [g.get('data-logical-core') for g in parts] == [str(k) for k in range(8)]
        assert texts[5] == ['logical core 5', 'core 5, host 0', 'shape 5x2x4',
                            '[0:5, 3:5, 4:8]'], texts[5]
        assert "tensor 'x' [5, 5, 14] per replica, input_partition_dims [1, 2, 4]" in \
            root.find(SVG_NS + 'title').text
        # a grid of 2 rows: the row parts' cells sit below the first row's
        ys = sorted({int(r.get('y')) for r in root.iter(SVG_NS + 'rect')
                     if r.get('class') == 'part'})
        assert len(ys) == 2, ys
        # empty parts are shown and marked: 9 over 4 is 3, 3, 3, 0
        run('shard', '--batch', '8', '--cores-per-replica', '4', '--tensor', 'x:9',
            '--tensor', 'y:1', '--input-partition-dims', '[[1, 4]]', '--svg', svg,
            '--svg-tensor', 'x')
        _, parts, texts = svg_parts(svg)
        assert len(parts) == 4 and [g.get('data-empty') for g in parts] == \
            ['false', 'false', 'false', 'true'], [g.get('data-empty') for g in parts]
        assert texts[3][0] == 'logical core 3 (empty)' and texts[3][3] == '[0:4, 9:9]', texts[3]
        # a tensor that is not split is one part; the default picks the partitioned one
        run('shard', '--batch', '8', '--cores-per-replica', '4', '--tensor', 'x:9',
            '--tensor', 'y:1', '--input-partition-dims', '[[1, 4]]', '--svg', svg,
            '--svg-tensor', 'y')
        _, parts, texts = svg_parts(svg)
        assert len(parts) == 1 and texts[0][0] == 'every logical core (0-3): all of it', texts
        j = shard_json('--batch', '8', '--cores-per-replica', '4', '--tensor', 'y:1',
                       '--tensor', 'x:9', '--input-partition-dims', '[[1, 1], [1, 4]]',
                       '--svg', svg)
        assert j['tensors'][1]['placement'] == 'partitioned'
        root, parts, _ = svg_parts(svg)
        assert len(parts) == 4 and "tensor 'x'" in root.find(SVG_NS + 'title').text
        # a replica across hosts: each part names its host
        run('shard', '--hosts', '4', '--chips-per-host', '1', '--cores-per-replica', '8',
            '--batch', '4', '--tensor', 'x:16', '--input-partition-dims', '[[1, 8]]',
            '--svg', svg)
        _, parts, texts = svg_parts(svg)
        assert [t[1] for t in texts] == [f'core {k}, host {k // 2}' for k in range(8)], texts


if __name__ == '__main__':
    raise SystemExit(main())
