#!/usr/bin/python3
"""Issue #16, item 5: the hosts of a pod slice as MPI ranks, measured on this machine.

1. The same functional job on 1, 2 and 4 ranks: the MLP 784-512-256-10 on Fashion-MNIST,
   Adam, global batch 1024, 8 tpu-v2 cores (one replica a core) split over the ranks as
   1 host x 4 chips, 2 hosts x 2 chips, 4 hosts x 1 chip (`mpirun -np N tpusim train
   --hosts N --chips 4/N`). Per run: the host (wall) time per training step (rank 0's
   training wall time over its steps), the peak memory of each rank (ru_maxrss), the
   simulated step time, the last loss. Each split is also run in one process (`tpusim train
   --hosts N`): the ranks' checkpoint must be the same bytes (it is checked).
2. A timing-only pod slice of 1024 tpu-v4 chips (4 hosts x 256 chips, 2048 cores) on 4
   ranks, with the simulated step time and the all-reduce share of it (--step-shares: the
   per-op statistics of the steps after the first loop, summed over every rank's cores),
   against the same slice in one process (the same figures, checked).

Each rank runs under a small wrapper (this script with --wrap) that waits for it and
records its peak resident set (RUSAGE_CHILDREN's ru_maxrss), since mpirun reports none.

usage: python3 benchmarks/pod_scaling.py [--tpusim BUILD/cli/tpusim] [--steps N]
                                         [--mpirun mpirun]
Prints the tables. As root, set OMPI_ALLOW_RUN_AS_ROOT=1 and
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (the script sets them when it runs as root)."""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def wrap(prefix, cmd):
    """Runs cmd (one rank), then writes its peak RSS in KB to prefix.<rank>."""
    rc = subprocess.call(cmd)
    rank = os.environ.get('OMPI_COMM_WORLD_RANK', '0')
    with open(f'{prefix}.{rank}', 'w') as f:
        f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
    return rc


def run(args, cmd, ranks, tmp, tag):
    """cmd (tpusim's arguments) on `ranks` ranks (0: one process without mpirun). Returns
    (the JSON summary, [peak RSS KB per rank], process wall seconds)."""
    prefix = os.path.join(tmp, f'rss-{tag}')
    inner = [sys.executable, os.path.abspath(__file__), '--wrap', prefix, '--',
             args.tpusim, *cmd]
    full = inner if ranks == 0 else [args.mpirun, '--oversubscribe', '-np', str(ranks),
                                     *inner]
    t0 = time.monotonic()
    p = subprocess.run(full, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f'failed: {" ".join(full)}\n{p.stdout}\n{p.stderr}')
    rss = []
    for r in range(max(ranks, 1)):
        with open(f'{prefix}.{r}') as f:
            rss.append(int(f.read()))
    return json.loads(p.stdout), rss, wall


def ckpt(model_dir, step):
    with open(os.path.join(model_dir, f'ckpt-{step}.safetensors'), 'rb') as f:
        return f.read()


def functional(args, tmp):
    print(f'## 1. The same functional job on 1, 2 and 4 ranks ({args.steps} steps)\n')
    rows = []
    for ranks in (1, 2, 4):
        chips = 4 // ranks
        common = ['train', '--chip', 'tpu-v2', '--hosts', str(ranks), '--chips', str(chips),
                  '--layers', '512,256', '--train-batch-size', '1024', '--steps',
                  str(args.steps), '--iterations-per-loop', '10', '--no-eval', '--json',
                  '--verbose', '0', '--threads', '2']
        md_ranks, md_one = os.path.join(tmp, f'r{ranks}'), os.path.join(tmp, f'o{ranks}')
        cmd = common + ['--model-dir', md_ranks]
        print('   mpirun --oversubscribe -np', ranks, 'tpusim', ' '.join(cmd))
        out, rss, wall = run(args, cmd, ranks, tmp, f'f{ranks}')
        one, rss1, wall1 = run(args, common + ['--model-dir', md_one], 0, tmp, f'o{ranks}')
        same = ckpt(md_ranks, args.steps) == ckpt(md_one, args.steps)
        if not same:
            sys.exit(f'{ranks} ranks: the checkpoint differs from one process with --hosts '
                     f'{ranks}')
        rows.append((ranks, out, rss, wall, one, rss1, wall1))
    print()
    print('ranks  hosts x chips  host s/step  peak RSS per rank (MB)   simulated step  '
          'loss      one process: host s/step, peak RSS (MB)  same checkpoint')
    for ranks, out, rss, wall, one, rss1, wall1 in rows:
        print(f'{ranks:5}  {ranks:5} x {4 // ranks:<5}  {out["wall_seconds"] / args.steps:11.4f}'
              f'  {" ".join(f"{r / 1024:.0f}" for r in rss):23}  '
              f'{out["step_time_s"] * 1e6:10.1f} us  {out["loss"]:.6f}  '
              f'{one["wall_seconds"] / args.steps:.4f}, {rss1[0] / 1024:.0f}'
              f'{"":27}yes')
    print('\n(host s/step: rank 0\'s training wall time over the steps; the process wall '
          'times, mpirun included:',
          ', '.join(f'{r[0]} ranks {r[3]:.1f} s' for r in rows) + ')\n')


def pod_slice(args, tmp):
    print('## 2. A timing-only pod slice of 1024 tpu-v4 chips on 4 ranks\n')
    cmd = ['train', '--chip', 'tpu-v4', '--hosts', '4', '--chips', '256', '--timing-only',
           '--steps', '6', '--iterations-per-loop', '2', '--train-batch-size', '262144',
           '--layers', '512,256', '--step-shares', '--json', '--verbose', '0']
    print('   mpirun --oversubscribe -np 4 tpusim', ' '.join(cmd))
    out, rss, wall = run(args, cmd, 4, tmp, 'pod')
    one, rss1, wall1 = run(args, cmd, 0, tmp, 'pod1')
    for k in ('step_time_s', 'steady_step_time_s', 'all_reduce_share', 'mxu_utilization',
              'infeed_stall_share', 'simulated_seconds'):
        if out[k] != one[k]:
            sys.exit(f'{k}: 4 ranks {out[k]} against one process {one[k]}')
    print()
    print(f'chips 1024 (4 hosts x 256), cores {out["replicas"]}, global batch '
          f'{out["train_batch_size"]} ({out["train_batch_size"] // out["replicas"]} a replica)')
    print(f'simulated step {out["step_time_s"] * 1e6:.1f} us (steady '
          f'{out["steady_step_time_s"] * 1e6:.1f} us); all-reduce '
          f'{100 * out["all_reduce_share"]:.1f} % of the steady step; MXU '
          f'{100 * out["mxu_utilization"]:.3f} % utilized; infeed stall '
          f'{100 * out["infeed_stall_share"]:.1f} %')
    print(f'4 ranks: wall {wall:.1f} s, peak RSS per rank (MB) '
          f'{" ".join(f"{r / 1024:.0f}" for r in rss)}; one process: wall {wall1:.1f} s, '
          f'peak RSS {rss1[0] / 1024:.0f} MB; the same figures: yes')


def main():
    if len(sys.argv) > 2 and sys.argv[1] == '--wrap':
        return wrap(sys.argv[2], sys.argv[4:])
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--tpusim', default=os.path.join(ROOT, 'build', 'cli', 'tpusim'))
    ap.add_argument('--mpirun', default='mpirun')
    ap.add_argument('--steps', type=int, default=50)
    args = ap.parse_args()
    args.tpusim = os.path.abspath(args.tpusim)
    if os.geteuid() == 0:
        os.environ.setdefault('OMPI_ALLOW_RUN_AS_ROOT', '1')
        os.environ.setdefault('OMPI_ALLOW_RUN_AS_ROOT_CONFIRM', '1')
    tmp = tempfile.mkdtemp(prefix='tpusim-pod-scaling-')
    try:
        functional(args, tmp)
        pod_slice(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
