#!/usr/bin/python3
"""The scaling figure of issue #12: simulated training step time, and the shares of it taken
by the all-reduce and by the halo exchange, for the MLP and the CNN on 1, 2, 4, 8 cores and
on several hosts, data parallel and (where it applies) model parallel: the CNN spatially
partitioned over the cores of a replica, the MLP's dense layers split over them.

Every figure comes from `tpusim train --timing-only --step-shares --json` (the device's
per-op statistics of the steps after the first loop: cli/cli_step_shares.c). Weak scaling:
each replica computes on 128 examples a step (the global batch is 128 x replicas), as TPU
users scale the global batch with the slice. tpu-v3 preset (2 cores a chip, 4 chips a host);
the 1-core point is half a tpu-v3 chip (one core, half the chip's HBM, HBM bandwidth and host
link, so the core is the same as each core of the 2-core chip).

usage: /usr/bin/python3 benchmarks/scaling.py [--tpusim BUILD/cli/tpusim] [--out DIR]
                                              [--steps N] [--check]
Writes DIR/scaling.tsv (with each row's command line) and DIR/scaling.png (gnuplot), and
prints the table. --check (the
`meson test --benchmark` registration) also asserts what the figure must show: a step's
all-reduce share is 0 on one core and above 0 with several replicas, and halo exchange
appears with spatial partitioning only. --series TEXT runs the series whose name holds TEXT.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PER_REPLICA = 128

# (model label, model args, series label, hosts, chips per host, cores per replica,
#  input partition dims or None); chips 0 = the one-core chip
MLP = ('MLP 784-512-256-10', ['--layers', '512,256'])
CNN = ('CNN (cnn.json)', ['--model', os.path.join(ROOT, 'configs', 'models', 'cnn.json')])


def configurations():
    rows = []
    for model in (MLP, CNN):
        for hosts, chips in ((1, 0), (1, 1), (1, 2), (1, 4), (2, 4)):
            rows.append((model, 'data parallel', hosts, chips, 1, None))
        for p in (2, 4):
            for hosts, chips in ((1, p // 2), (1, 4), (2, 4)):
                if model is MLP:
                    rows.append((MLP, f'dense split over {p} cores', hosts, chips, p, None))
                else:
                    rows.append((CNN, f'spatial, {p} cores a replica', hosts, chips, p,
                                 f'[[1, {p}, 1, 1], None]'))
    return rows


def one_core_chip(d):
    with open(os.path.join(ROOT, 'configs', 'tpu-v3.json')) as f:
        chip = json.load(f)
    chip['name'] = 'tpu-v3-1core'
    chip['description'] = 'half a tpu-v3 chip: one of its cores, with its share of the chip'
    chip['cores_per_chip'] = 1
    chip['chips_per_host'] = 1
    chip['memory']['hbm_bytes'] //= 2
    chip['memory']['hbm_gbytes_per_s'] /= 2
    chip['host_link']['gbytes_per_s'] /= 2
    path = os.path.join(d, 'tpu-v3-1core.json')
    with open(path, 'w') as f:
        json.dump(chip, f)
    return path


def shown(arg, chip1):
    """An argument as the TSV shows it: paths relative to the repository, the script's own
    1-core chip file by its name."""
    if arg == chip1:
        return 'tpu-v3-1core.json'
    if ' ' in arg:
        return f"'{arg}'"
    return os.path.relpath(arg, ROOT) if arg.startswith('/') else arg


def run(tpusim, chip1, cfg, steps):
    (mlabel, margs), series, hosts, chips, p, dims = cfg
    cores = (2 * chips if chips else 1) * hosts
    replicas = cores // p
    batch = PER_REPLICA * replicas
    args = [tpusim, 'train', *margs, '--timing-only', '--no-eval', '--json', '--verbose', '0',
            '--step-shares', '--steps', str(steps), '--iterations-per-loop', '1',
            '--train-batch-size', str(batch), '--cores-per-replica', str(p)]
    args += ['--chip', chip1, '--chips', '1'] if not chips else ['--chip', 'tpu-v3', '--chips',
                                                                 str(chips)]
    if hosts > 1:
        args += ['--hosts', str(hosts)]
    if dims:
        args += ['--input-partition-dims', dims]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f'scaling: {" ".join(args[1:])}: exit {r.returncode}: {r.stderr.strip()}')
    j = json.loads(r.stdout)
    return {
        'model': mlabel, 'series': series, 'hosts': hosts, 'chips': chips * hosts if chips else 1,
        'cores': cores, 'cores_per_replica': p, 'replicas': replicas, 'global_batch': batch,
        'step_us': 1e6 * j['steady_step_time_s'],
        'examples_per_s': batch / j['steady_step_time_s'],
        'all_reduce_share': j['all_reduce_share'], 'halo_share': j['halo_share'],
        'command': 'tpusim ' + ' '.join(shown(a, chip1) for a in args[1:]),
    }


COLS = ['model', 'series', 'hosts', 'chips', 'cores', 'cores_per_replica', 'replicas',
        'global_batch', 'step_us', 'examples_per_s', 'all_reduce_share', 'halo_share',
        'command']


def fmt(v):
    return f'{v:.6g}' if isinstance(v, float) else str(v)


def plot(tsv, png, rows):
    gp = shutil.which('gnuplot')
    if not gp:
        sys.exit('scaling: gnuplot not found (apt-get install gnuplot-nox)')
    series = []
    for r in rows:
        key = (r['model'], r['series'])
        if key not in series:
            series.append(key)
    # one data block per series (gnuplot's index), in the order of `series`
    data = tsv + '.blocks'
    with open(data, 'w') as f:
        for key in series:
            f.write(f'# {key[0]}, {key[1]}\n')
            for r in rows:
                if (r['model'], r['series']) == key:
                    f.write(f"{r['cores']}\t{r['step_us']:.6g}\t{100 * r['all_reduce_share']:.6g}"
                            f"\t{100 * r['halo_share']:.6g}\t{r['hosts']}\n")
            f.write('\n\n')
    step_plots, share_plots = [], []
    for k, (m, s) in enumerate(series):
        title = f'{m.split(" ")[0]}, {s}'
        style = f'lw 2 lc {k + 1} pt {k + 4}'
        step_plots.append(f'"{data}" index {k} using 1:2 with linespoints {style} '
                          f'title "{title}"')
        share_plots.append(f'"{data}" index {k} using 1:3 with linespoints {style} '
                           f'title "{title}: all-reduce"')
        if 'spatial' in s:
            share_plots.append(f'"{data}" index {k} using 1:4 with linespoints {style} dt 2 '
                               f'title "{title}: halo"')
    script = f'''
set terminal pngcairo size 1400,720 font ",10"
set output "{png}"
set multiplot layout 1,2 title "tpusim, tpu-v3: a training step, {PER_REPLICA} examples per replica (16 cores: 2 hosts x 4 chips)"
set logscale x 2
set xrange [0.8:20]
set xtics (1, 2, 4, 8, 16)
set xlabel "cores"
set grid
set key outside below font ",9" maxrows 6
set ylabel "simulated step time (us), steps after the first"
set logscale y
plot {", ".join(step_plots)}
unset logscale y
set ylabel "share of the step (%)"
set yrange [0:*]
plot {", ".join(share_plots)}
unset multiplot
'''
    subprocess.run([gp], input=script, text=True, check=True)
    os.remove(data)


def check(rows):
    """What the figure must show, asserted (the benchmark's pass/fail)."""
    for r in rows:
        if r['cores'] == 1:
            assert r['all_reduce_share'] == 0 and r['halo_share'] == 0, r
        if r['cores_per_replica'] == 1 or 'dense' in r['series']:
            assert r['halo_share'] == 0, r
        if 'spatial' in r['series']:
            assert r['halo_share'] > 0, r
        if r['replicas'] > 1:
            assert r['all_reduce_share'] > 0, r
        assert 0 <= r['all_reduce_share'] + r['halo_share'] < 1, r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--tpusim', default=os.path.join(ROOT, 'build-release', 'cli', 'tpusim'))
    ap.add_argument('--out', default=HERE)
    ap.add_argument('--steps', type=int, default=3)
    ap.add_argument('--check', action='store_true')
    ap.add_argument('--series', default='', help='only the series whose name holds this')
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        chip1 = one_core_chip(d)
        for cfg in configurations():
            if a.series not in cfg[1]:
                continue
            rows.append(run(a.tpusim, chip1, cfg, a.steps))
    tsv = os.path.join(a.out, 'scaling.tsv')
    with open(tsv, 'w') as f:
        f.write('\t'.join(COLS) + '\n')
        for r in rows:
            f.write('\t'.join(fmt(r[c]) for c in COLS) + '\n')
    png = os.path.join(a.out, 'scaling.png')
    plot(tsv, png, rows)
    w = [22, 30, 5, 5, 5, 4, 8, 6, 11, 12, 10, 8]
    head = ['model', 'series', 'hosts', 'chips', 'cores', 'P', 'replicas', 'batch', 'step us',
            'examples/s', 'all-reduce', 'halo']
    print('  '.join(h.ljust(w[i]) if i < 2 else h.rjust(w[i]) for i, h in enumerate(head)))
    for r in rows:
        vals = [r['model'], r['series'], r['hosts'], r['chips'], r['cores'],
                r['cores_per_replica'], r['replicas'], r['global_batch'], f"{r['step_us']:.1f}",
                f"{r['examples_per_s']:.0f}", f"{100 * r['all_reduce_share']:.1f} %",
                f"{100 * r['halo_share']:.1f} %"]
        print('  '.join(str(v).ljust(w[i]) if i < 2 else str(v).rjust(w[i])
                        for i, v in enumerate(vals)))
    print(f'wrote {tsv} and {png}')
    if a.check:
        check(rows)
        print('checks: the all-reduce share is 0 on one core and above 0 with replicas; halo '
              'exchange only with spatial partitioning')


if __name__ == '__main__':
    main()
