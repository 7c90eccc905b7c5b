#!/usr/bin/env python3
"""Several hosts and input partition dims on the command line: `tpusim train|evaluate|predict
--hosts N` (each host driving --chips chips, its own infeed thread and input clock) and
`--input-partition-dims TEXT`, alone, from a --config file, with --trace, --model, the
evaluation after training, evaluate and predict of the checkpoint, and their errors.

A small NumPy image set (6x6, 3 classes) and a small CNN model file, made here, on the tiny
chip (1 chip of 2 cores per host): each run takes a fraction of a second."""
import json
import os
import sys
import random
import struct
import tempfile

from cli_harness import case, expect_error, main, read_npy, run

SMALL = {'name': 'small', 'input': [6, 6, 1],
         'layers': [{'type': 'conv2d', 'filters': 4, 'kernel_size': 3, 'activation': 'relu'},
                    {'type': 'flatten'},
                    {'type': 'dense', 'units': 3}],
         'loss': 'softmax_cross_entropy'}

TINY = ['--chip', 'tiny', '--train-batch-size', '32', '--eval-batch-size', '32',
        '--predict-batch-size', '32', '--verbose', '0']


def write_array(path, shape, descr, values):
    """A C-order .npy file (format 1.0) of `shape` holding `values` (flat)."""
    fmt = {'|u1': 'B', '<i8': 'q'}[descr]
    dims = ', '.join(str(s) for s in shape) + (',' if len(shape) == 1 else '')
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    header += ' ' * ((64 - (10 + len(header) + 1) % 64) % 64) + '\n'
    with open(path, 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header)) + header.encode())
        f.write(struct.pack('<%d%s' % (len(values), fmt), *values))


class Work:
    """A scratch directory: the model file and a 6x6 image set (96 test examples)."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.small = self.path('small.json')
        with open(self.small, 'w') as f:
            json.dump(SMALL, f)
        self.data = self.path('images')
        os.mkdir(self.data)
        for name, n, seed in (('train', 384, 1), ('test', 96, 2)):
            rnd = random.Random(seed)
            labels = [i % 3 for i in range(n)]
            rnd.shuffle(labels)
            x = []
            for y in labels:
                for j in range(36):
                    hot = y * 12 <= j < (y + 1) * 12
                    x.append(rnd.randrange(160, 256) if hot else rnd.randrange(0, 96))
            write_array(os.path.join(self.data, f'x_{name}.npy'), (n, 6, 6), '|u1', x)
            write_array(os.path.join(self.data, f'y_{name}.npy'), (n,), '<i8', labels)

    def path(self, name):
        return os.path.join(self.dir, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.tmp.cleanup()


def run_json(*args):
    return json.loads(run(*args, '--json').stdout)


@case
def hosts_read_the_same_examples_as_one_host():
    with Work() as w:
        base = ['train', *TINY, '--data', w.data, '--layers', '8', '--steps', '6']
        two_hosts = run_json(*base, '--hosts', '2')
        one_host = run_json(*base, '--chips', '2')
        assert two_hosts['replicas'] == one_host['replicas'] == 4, (two_hosts, one_host)
        assert two_hosts['hosts'] == 2 and 'hosts' not in one_host, (two_hosts, one_host)
        # the same examples in the same order: the same model, bit for bit
        for k in ('loss', 'test_accuracy', 'test_loss', 'test_examples'):
            assert two_hosts[k] == one_host[k], (k, two_hosts, one_host)
        assert two_hosts['test_examples'] == 96, two_hosts
        # the two hosts read their input in parallel: less simulated time than one host
        # reading all 4 replicas' batches
        assert two_hosts['simulated_seconds'] < one_host['simulated_seconds'], \
            (two_hosts, one_host)
        # --chips is per host: 2 hosts x 2 chips x 2 cores
        out = run_json(*base, '--hosts', '2', '--chips', '2')
        assert out['replicas'] == 8 and out['hosts'] == 2, out
        text = run(*base, '--hosts', '2').stdout
        assert 'on tiny, 4 replicas (2 hosts), bf16 matmul inputs' in text, text


@case
def every_input_mode_on_hosts():
    with Work() as w:
        base = ['train', *TINY, '--data', w.data, '--layers', '8', '--steps', '4',
                '--hosts', '2']
        losses = {}
        for mode in ('PER_SHARD_V1', 'PER_HOST_V1', 'PER_HOST_V2', 'BROADCAST'):
            # PER_SHARD_V1 and PER_HOST_V1 evaluate per host: on 2 hosts only SLICED
            extra = ['--eval-training-input-configuration', 'SLICED'] \
                if mode in ('PER_SHARD_V1', 'PER_HOST_V1') else []
            out = run_json(*base, '--per-host-input-for-training', mode, *extra)
            assert out['global_step'] == 4 and out['test_examples'] == 96, (mode, out)
            losses[mode] = out['loss']
        # data parallel modes give every replica a quarter of the same global batch
        assert losses['PER_SHARD_V1'] == losses['PER_HOST_V1'] == losses['PER_HOST_V2'], losses
        # BROADCAST: a global batch that does not divide by the 4 replicas is fine
        out = run_json(*base, '--per-host-input-for-training', 'BROADCAST',
                       '--train-batch-size', '30')
        assert out['global_step'] == 4 and out['train_batch_size'] == 30, out
        # PER_HOST_V1 evaluation on 2 hosts is TPUEstimator's error, before any work
        expect_error([*base, '--per-host-input-for-training', 'PER_HOST_V1'], 2,
                     'evaluation on 2 hosts is only supported with', '(or give --no-eval)')


@case
def options_from_a_config_file():
    with Work() as w:
        cfg = w.path('run.json')
        with open(cfg, 'w') as f:
            json.dump({'hosts': 2, 'chip': 'tiny', 'layers': '8', 'steps': 3,
                       'data': w.data, 'train_batch_size': 32, 'eval_batch_size': 32,
                       'per_host_input_for_training': 'PER_HOST_V2'}, f)
        out = run_json('train', '--config', cfg, '--verbose', '0')
        assert out['replicas'] == 4 and out['hosts'] == 2 and out['global_step'] == 3, out
        # a flag after --config overrides the file
        out = run_json('train', '--config', cfg, '--verbose', '0', '--hosts', '1')
        assert out['replicas'] == 2 and 'hosts' not in out, out
        # input_partition_dims from the file: checked against the rules with the rest
        bad = w.path('bad.json')
        with open(bad, 'w') as f:
            json.dump({'hosts': 2, 'chip': 'tiny', 'model': w.small, 'data': w.data,
                       'input_partition_dims': '[[1, 2, 1, 1], None]',
                       'per_host_input_for_training': 'PER_HOST_V1'}, f)
        expect_error(['train', '--config', bad, '--verbose', '0', '--cores-per-replica', '2'],
                     2, 'input_partition_dims is only supported in PER_HOST_V2 mode',
                     'is PER_HOST_V1')
        # JSON's own form: lists and null, as the Python text gives them
        good = w.path('good.json')
        with open(good, 'w') as f:
            json.dump({'chip': 'tiny', 'model': w.small, 'data': w.data, 'steps': 1,
                       'cores_per_replica': 2, 'no_eval': True,
                       'input_partition_dims': [[1, 2, 1, 1], None]}, f)
        as_list = run_json('train', '--config', good, '--verbose', '0')
        with open(good) as f:
            conf = json.load(f)
        conf['input_partition_dims'] = '[[1, 2, 1, 1], None]'
        with open(good, 'w') as f:
            json.dump(conf, f)
        as_text = run_json('train', '--config', good, '--verbose', '0')
        assert as_list['loss'] == as_text['loss'] and as_list['cores_per_replica'] == 2, (as_list, as_text)
        with open(bad, 'w') as f:
            json.dump({'input_partition_dims': [['a']]}, f)
        expect_error(['train', '--config', bad], 2,
                     "bad.json: 'input_partition_dims' [[\"a\"]]: input_partition_dims: expected "
                     "a count")
        with open(bad, 'w') as f:
            json.dump({'input_partition_dims': {'features': [1, 2]}}, f)
        expect_error(['train', '--config', bad], 2,
                     "bad.json: 'input_partition_dims' must be a list of one or two entries")
        with open(bad, 'w') as f:
            json.dump({'input_partition_dims': '[[1, 2'}, f)
        expect_error(['train', '--config', bad], 2, '--input-partition-dims')
        with open(bad, 'w') as f:
            json.dump({'hosts': 0}, f)
        expect_error(['train', '--config', bad], 2, '--hosts')


@case
def trace_shows_each_hosts_input():
    with Work() as w:
        trace = w.path('t.json')
        run('train', *TINY, '--data', w.data, '--layers', '8', '--steps', '3', '--hosts', '2',
            '--iterations-per-loop', '3', '--no-eval', '--trace', trace)
        with open(trace) as f:
            events = json.load(f)
        events = events['traceEvents'] if isinstance(events, dict) else events
        names = [e.get('name', '') for e in events if e.get('ph') == 'X']
        # PER_HOST_V2: one call per replica, 2 replicas per host, 3 steps: 6 per host
        assert names.count('train input batch host 0') == 6, sorted(set(names))
        assert names.count('train input batch host 1') == 6, sorted(set(names))
        assert 'train input batch' not in names, sorted(set(names))
        # the two hosts' clocks run side by side: both start at the pass's start
        starts = {}
        for e in events:
            if e.get('ph') == 'X' and e.get('name', '').startswith('train input batch host'):
                starts.setdefault(e['name'], []).append(e['ts'])
        assert min(starts['train input batch host 0']) == \
            min(starts['train input batch host 1']), starts


@case
def model_file_on_hosts_then_evaluate_and_predict():
    with Work() as w:
        md = w.path('model')
        base = [*TINY, '--data', w.data, '--model', w.small]
        two = run_json('train', *base, '--steps', '4', '--hosts', '2', '--model-dir', md)
        one = run_json('train', *base, '--steps', '4', '--chips', '2')
        assert two['replicas'] == 4 and two['hosts'] == 2, two
        for k in ('loss', 'test_accuracy', 'test_loss', 'test_examples'):
            assert two[k] == one[k], (k, two, one)
        # evaluate the checkpoint on 2 hosts, and on one: the same figures
        ev2 = run_json('evaluate', *base, '--hosts', '2', '--model-dir', md)
        ev1 = run_json('evaluate', *base, '--model-dir', md)
        assert ev2['examples'] == ev1['examples'] == 96, (ev2, ev1)
        assert ev2['accuracy'] == ev1['accuracy'] == two['test_accuracy'], (ev2, ev1, two)
        assert ev2['loss'] == ev1['loss'], (ev2, ev1)
        # predict on 2 hosts: SLICED reads once on host 0; every example once, in order
        o2, o1 = w.path('p2.npy'), w.path('p1.npy')
        run('predict', *base, '--hosts', '2', '--model-dir', md, '--output', o2,
            '--eval-training-input-configuration', 'SLICED')
        run('predict', *base, '--model-dir', md, '--output', o1)
        assert read_npy(o2) == read_npy(o1)
        assert len(read_npy(o2)[1]) == 96
        # PER_HOST_V2 prediction with 4 replicas on 2 hosts: TPUEstimator's error
        expect_error(['predict', *base, '--hosts', '2', '--model-dir', md, '--output', o2], 2,
                     'prediction on 2 hosts is only supported with')


@case
def partitioned_model_trains_as_the_unpartitioned_one():
    """The CNN's rows cut over the 2 cores of each replica (features [1, 2, 1, 1]; labels
    None, then [1, 1] to logical core 0), on one host of 2 chips and on 2 hosts: the same
    model as one core per replica. The forward pass is bit-identical (net_lower_part.c);
    the kernel gradients are summed over the cores in another order, so after 4 Adam steps
    the loss and the test loss may differ in the last bits of fp32: within 1e-4 here (the
    JSON's 6 significant digits are compared), and the accuracy over 96 examples not at
    all."""
    with Work() as w:
        base = ['train', *TINY, '--data', w.data, '--model', w.small, '--steps', '4']
        ref = run_json(*base)
        runs = [run_json(*base, '--cores-per-replica', '2', '--chips', '2',
                         '--input-partition-dims', '[[1, 2, 1, 1], None]'),
                run_json(*base, '--cores-per-replica', '2', '--hosts', '2',
                         '--input-partition-dims', '[[1, 2, 1, 1], [1, 1]]')]
        for out in runs:
            assert out['replicas'] == 2 and out['global_step'] == 4, out
            assert out['test_examples'] == 96, out
            assert out['test_accuracy'] == ref['test_accuracy'], (out, ref)
            for k in ('loss', 'test_loss'):
                assert abs(out[k] - ref[k]) <= 1e-4, (k, out, ref)
        assert runs[1]['hosts'] == 2, runs[1]


@case
def partition_dims_rules():
    with Work() as w:
        base = ['train', *TINY, '--data', w.data, '--model', w.small, '--steps', '1']
        expect_error([*base, '--input-partition-dims', '[[1, 2, 1, 1]]'], 2,
                     'input_partition_dims requires setting num_cores_per_replica')
        expect_error([*base, '--cores-per-replica', '2', '--input-partition-dims',
                      '[[1, 2, 2, 1]]'], 2,
                     "tensor 'features': the product of its input partition dims "
                     '[1, 2, 2, 1] is 4, and it should equal num_cores_per_replica 2')
        expect_error([*base, '--cores-per-replica', '2', '--input-partition-dims',
                      '[[1, 2, 1]]'], 2, "tensor 'features' of shape [32, 6, 6, 1] has 4 "
                     'dimensions (the batch first), and its input partition dims [1, 2, 1] '
                     'have 3')
        expect_error([*base, '--cores-per-replica', '2', '--per-host-input-for-training',
                      'BROADCAST', '--input-partition-dims', '[[1, 2, 1, 1]]'], 2,
                     'input_partition_dims is only supported in PER_HOST_V2 mode')
        # the --layers MLP does not describe its tensors' shapes
        expect_error(['train', *TINY, '--data', w.data, '--layers', '8',
                      '--cores-per-replica', '2', '--input-partition-dims', '[[1, 2]]'], 2,
                     "the model does not describe its input tensors' shapes")
        # the text itself
        expect_error([*base, '--input-partition-dims', '[[1, 2'], 2,
                     '--input-partition-dims')
        expect_error([*base, '--input-partition-dims', '[None, None, None]'], 2,
                     '--input-partition-dims')


@case
def bad_host_counts():
    expect_error(['train', '--hosts', '0'], 2, '--hosts')
    expect_error(['train', '--hosts', 'two'], 2, '--hosts')
    expect_error(['train', '--hosts', '2000'], 2, '--hosts')
    expect_error(['train', '--chip', 'tiny', '--hosts', '1024', '--chips', '8'], 2,
                 '--hosts 1024 x 8 chips per host is 8192 chips; tpusim simulates at most 4096')
    # a replica larger than a host's cores outside PER_HOST_V2
    expect_error(['train', '--chip', 'tiny', '--hosts', '2', '--cores-per-replica', '4',
                  '--per-host-input-for-training', 'PER_HOST_V1'], 2,
                 'except in PER_HOST_V2 mode, a replica must fit on one host')
    # PER_SHARD_V1 with model parallelism
    expect_error(['train', '--chip', 'tiny', '--cores-per-replica', '2',
                  '--per-host-input-for-training', 'PER_SHARD_V1'], 2,
                 'model parallelism (num_cores_per_replica 2) only supports per host input')


@case
def shard_rules_come_before_the_data_and_the_device():
    """train, evaluate and predict check the shard plan in their preflight: its message (not
    the device's), exit 2, before the data is read (a missing --data dir is not reached) and,
    for evaluate and predict, before the checkpoint is looked for."""
    missing = '/nonexistent/tpusim-data'
    for args in (['train', '--train-batch-size', '8', '--steps', '2'],
                 ['evaluate', '--eval-batch-size', '8', '--model-dir', missing],
                 ['predict', '--predict-batch-size', '8', '--model-dir', missing]):
        expect_error([*args, '--chip', 'tiny', '--layers', '16', '--cores-per-replica', '4',
                      '--data', missing], 2,
                     'the num of cores required by the model parallelism, num_cores_per_replica'
                     ' 4, is larger than the total num of TPU cores in the system, 2 (1 host x '
                     '1 chip x 2 cores)')
    # the batch rule of the mode that runs: training's, then evaluation's after training
    expect_error(['train', '--chip', 'tiny', '--layers', '16', '--train-batch-size', '7',
                  '--steps', '2', '--data', missing], 2,
                 'train_batch_size 7 must be divisible by the number of replicas')
    expect_error(['train', '--chip', 'tiny', '--layers', '16', '--train-batch-size', '8',
                  '--eval-batch-size', '5', '--steps', '2', '--data', missing], 2,
                 'eval_batch_size 5 must be divisible by the number of replicas')


@case
def cores_that_split_nothing_are_said_so():
    """--cores-per-replica 2 with the small CNN (one dense layer: no pair to split) and no
    partition dims: every core runs the whole model. The summary warns, and the equivalence
    check holds the run to data parallelism's bound (its reason says why)."""
    with Work() as w:
        base = [*TINY, '--data', w.data, '--model', w.small, '--cores-per-replica', '2']
        p = run('train', *base, '--steps', '1', '--no-eval')
        assert "splits nothing over a replica's 2 cores" in p.stdout, p.stdout
        assert run_json('train', *base, '--steps', '1', '--no-eval')['cores_redundant'] is True
        # with the features' rows cut, the cores share the work: no warning
        p = run('train', *base, '--steps', '1', '--no-eval', '--input-partition-dims',
                '[[1, 2, 1, 1]]')
        assert 'splits nothing' not in p.stdout, p.stdout
        assert 'cores_redundant' not in run_json('train', *base, '--steps', '1', '--no-eval',
                                                 '--input-partition-dims', '[[1, 2, 1, 1]]')
        j = run_json('train', *base, '--chips', '2', '--check-equivalence', '1')
        assert j['bound']['why'].startswith("the lowering splits nothing over a replica's 2 "
                                            "cores"), j
        assert 'data parallelism over 2 replicas' in j['bound']['why'], j
        assert j['within'] is True, j


@case
def help_says_where_tpusim_differs():
    text = run('train', '--help').stdout
    for needle in ('--hosts N', '--input-partition-dims DIMS', 'Where tpusim differs',
                   'chips on each host'):
        assert needle in text, needle


if __name__ == '__main__':
    sys.exit(main())
