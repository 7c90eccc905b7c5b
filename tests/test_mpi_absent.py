#!/usr/bin/env python3
"""A tpusim built without MPI (-Dmpi=disabled, or no libopenmpi-dev) under mpirun: a world of
several ranks is refused, since each rank would run the whole job alone, with the way to build
it with MPI, and so is a process another parallel launcher (PMI_SIZE) started as one of
several; a world of one rank runs as usual. mpirun itself is not needed: it tells a
process its world through OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_RANK, which this sets.
(Registered in builds without MPI only: with MPI, those variables would start MPI.)

usage: test_mpi_absent.py PATH/TO/tpusim"""
import os
import subprocess
import sys

from cli_harness import TPUSIM, case, main


def run_as_rank(size, rank, *args):
    env = dict(os.environ, OMPI_COMM_WORLD_SIZE=str(size), OMPI_COMM_WORLD_RANK=str(rank))
    return subprocess.run([TPUSIM, *args], capture_output=True, text=True, timeout=120,
                          env=env)


@case
def several_ranks_refused_without_mpi():
    for rank in (0, 1):
        p = run_as_rank(2, rank, 'train', '--chip', 'tiny', '--hosts', '2')
        assert p.returncode == 2, (p.returncode, p.stderr)
        assert p.stdout == '', p.stdout
        assert p.stderr.count('\n') == 1, p.stderr
        assert p.stderr.startswith(f'rank {rank}: tpusim train: error: mpirun started 2 '
                                   'ranks, and this tpusim was built without MPI'), p.stderr
        assert 'meson configure -Dmpi=enabled' in p.stderr, p.stderr
        assert 'apt-get install libopenmpi-dev' in p.stderr, p.stderr


@case
def other_launchers_refused_without_mpi():
    """srun or another PMI launcher (no OMPI_ variables): refused, with how to build MPI."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('OMPI_')}
    env['PMI_SIZE'] = '2'
    p = subprocess.run([TPUSIM, 'train', '--chip', 'tiny', '--hosts', '2'], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == '', (p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith('tpusim train: error: this process was started by a parallel '
                               "launcher that is not Open MPI's mpirun (PMI_SIZE=2 in its "
                               'environment)'), p.stderr
    assert 'meson configure -Dmpi=enabled' in p.stderr, p.stderr


@case
def one_rank_runs_as_usual():
    p = run_as_rank(1, 0, 'config', 'show', 'tiny')
    plain = subprocess.run([TPUSIM, 'config', 'show', 'tiny'], capture_output=True, text=True,
                           timeout=120)
    assert p.returncode == 0 and p.stdout == plain.stdout and p.stdout, (p.stdout, p.stderr)


if __name__ == '__main__':
    sys.exit(main())
