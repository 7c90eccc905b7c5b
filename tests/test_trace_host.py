#!/usr/bin/env python3
"""The host's loop phases on the timeline of `tpusim train --trace`: one "launch" and one
"hooks" per loop, one "checkpoint save" per checkpoint written at a loop boundary, one
"<mode> input batch" per input_fn call; each on its own track of the "host" process, and
launch, hooks and checkpoints adding up to the host time the summary reports.

usage: test_trace_host.py PATH/TO/tpusim
Prints CMocka-style summary lines so the suite's totals count each case.
"""
import collections
import json
import os
import sys
import tempfile

import cli_harness
from cli_harness import Skip, case, main, run

FASHION = '/usr/share/datasets/fashion-mnist'


def need_data():
    if not os.path.isdir(FASHION):
        raise Skip('Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)')


def host_phases(trace):
    """(count, total duration in us, tracks) per name of the host process's events."""
    with open(trace) as f:
        events = json.load(f)['traceEvents']
    hosts = [e['pid'] for e in events if e['ph'] == 'M' and e['name'] == 'process_name'
             and e['args']['name'] == 'host']
    assert len(hosts) == 1, hosts
    count, dur, tracks = collections.Counter(), collections.Counter(), {}
    for e in events:
        if e['ph'] == 'X' and e['pid'] == hosts[0]:
            count[e['name']] += 1
            dur[e['name']] += e['dur']
            tracks.setdefault(e['name'], set()).add(e['tid'])
    return count, dur, tracks


@case
def train_trace_has_the_host_phases():
    need_data()
    with tempfile.TemporaryDirectory() as d:
        t, md = os.path.join(d, 't.json'), os.path.join(d, 'model')
        # 10 steps in loops of 4, 4, 2; checkpoints at 0 (before the first loop, not on the
        # timeline), 8 (5 steps since the last) and 10 (the end)
        p = run('train', '--chip', 'tiny', '--layers', '8', '--steps', '10',
                '--iterations-per-loop', '4', '--model-dir', md, '--save-checkpoints-steps',
                '5', '--no-eval', '--json', '--verbose', '0', '--trace', t)
        summary = json.loads(p.stdout)
        count, dur, tracks = host_phases(t)
        # PER_HOST_V2 (the default) on tiny's 2 replicas: 2 input_fn calls per step
        assert count == {'launch': 3, 'hooks': 3, 'checkpoint save': 2,
                         'train input batch': 20}, count
        # the modeled costs: launch 100 us, hooks 500 us, checkpoint 20 ms, input 50 us
        assert (dur['launch'], dur['hooks'], dur['checkpoint save'],
                dur['train input batch']) == (300, 1500, 40000, 1000), dur
        # the summary's host share is launch, hooks and checkpoints over the simulated time
        host_us = dur['launch'] + dur['hooks'] + dur['checkpoint save']
        total_us = summary['simulated_seconds'] * 1e6
        assert abs(host_us / total_us - summary['host_overhead_share']) < 1e-6, \
            (host_us, total_us, summary)
        # one track per phase: the input pipeline overlaps the launches in time
        assert len(set().union(*tracks.values())) == len(tracks), tracks


@case
def evaluation_after_training_adds_its_input_batches():
    need_data()
    with tempfile.TemporaryDirectory() as d:
        t = os.path.join(d, 't.json')
        # 10000 test examples in batches of 2000: 5 steps of 2 input_fn calls each (PER_HOST_V2
        # evaluates as TPUEstimator does: once per replica, tiny's 2), and an 11th call that
        # finds the input's end (charged like any other)
        run('train', '--chip', 'tiny', '--layers', '8', '--steps', '2',
            '--iterations-per-loop', '2', '--eval-batch-size', '2000', '--verbose', '0',
            '--trace', t)
        count, _, _ = host_phases(t)
        assert count['train input batch'] == 4, count
        assert count['eval input batch'] == 11, count
        assert count['launch'] == count['hooks'] == 1 + 3, count  # eval: loops of 2, 2, 1
        assert count['checkpoint save'] == 0, count  # no model_dir


def loop_spans(trace):
    """The "loops" process's events by name, each as (start, end) in us, in time order, and
    the host process's events likewise."""
    with open(trace) as f:
        events = json.load(f)['traceEvents']
    pids = {e['args']['name']: e['pid'] for e in events
            if e['ph'] == 'M' and e['name'] == 'process_name'}
    assert 'loops' in pids and 'host' in pids, pids
    spans = {'loops': collections.defaultdict(list), 'host': collections.defaultdict(list)}
    for e in events:
        for proc in spans:
            if e['ph'] == 'X' and e['pid'] == pids[proc]:
                spans[proc][e['name']].append((e['ts'], e['ts'] + e['dur']))
    for proc in spans.values():
        for v in proc.values():
            v.sort()
    return spans['loops'], spans['host']


@case
def loop_boundaries_show_the_device_busy_and_idle():
    need_data()
    with tempfile.TemporaryDirectory() as d:
        t, md = os.path.join(d, 't.json'), os.path.join(d, 'model')
        # loops of 4, 4, 2 steps; a checkpoint at step 5's boundary (8) and at the end (10)
        p = run('train', '--chip', 'tiny', '--layers', '8', '--steps', '10',
                '--iterations-per-loop', '4', '--model-dir', md, '--save-checkpoints-steps',
                '5', '--no-eval', '--json', '--verbose', '0', '--trace', t)
        summary = json.loads(p.stdout)
        loops, host = loop_spans(t)
        assert sorted(loops) == ['device idle', 'device loop'], sorted(loops)
        busy, idle = loops['device loop'], loops['device idle']
        assert len(busy) == len(idle) == 3, loops
        # the timeline alternates: idle (the launch, or the boundary and the launch), then
        # the loop on the device, from the pass's start at 0 with no gap and no overlap
        t_us = 0.0
        for (i0, i1), (b0, b1) in zip(idle, busy):
            assert abs(i0 - t_us) < 1e-3 and abs(i1 - b0) < 1e-3 and b1 > b0, (idle, busy)
            t_us = b1
        # each bubble is exactly the host's work between the loops (modeled: launch 100 us,
        # hooks 500 us, checkpoint 20 ms); the second follows the checkpoint of step 8
        assert [round(b - a, 3) for a, b in idle] == [100, 600, 20600], idle
        # each loop starts where its launch ends, and its hooks start where it ends
        assert [round(b, 3) for _, b in host['launch']] == [round(a, 3) for a, _ in busy]
        assert [round(a, 3) for a, _ in host['hooks']] == [round(b, 3) for _, b in busy]
        # the loops' spans are the device time the summary reports
        device_us = sum(b - a for a, b in busy)
        assert abs(device_us / 1e6 + summary['simulated_seconds'] *
                   summary['host_overhead_share'] - summary['simulated_seconds']) < 1e-6, \
            (device_us, summary)


if os.sep in cli_harness.TPUSIM:
    cli_harness.TPUSIM = os.path.abspath(cli_harness.TPUSIM)

if __name__ == '__main__':
    sys.exit(main())
