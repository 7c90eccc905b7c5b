"""Checkpoints under faults, driven through the real `tpusim` binary as a user drives it:
a model_dir whose index was lost or damaged, steps that do not match, directories where files
belong, `kill -9` at random points of a run that checkpoints every step, a full disk and a
read-only model_dir. Each run is small (the tiny chip, one hidden layer of 16, batches of 16,
a 512-example IDX data set the test writes), so the whole file takes well under a minute.

The full-disk and read-only cases mount a tmpfs; they need root and are skipped, with the
reason printed, where mounting is not allowed.

    python3 test_faults.py path/to/tpusim"""
import contextlib
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

from cli_harness import Skip, TPUSIM, case, main, run, expect_error


def write_idx(d, n_train=512, n_test=64, seed=7):
    """Fashion-MNIST-shaped IDX files (uncompressed) of random pixels and labels."""
    rng = random.Random(seed)
    for name, n in (('train', n_train), ('t10k', n_test)):
        with open(os.path.join(d, f'{name}-images-idx3-ubyte'), 'wb') as f:
            f.write(struct.pack('>IIII', 0x803, n, 28, 28))
            f.write(bytes(rng.randrange(256) for _ in range(n * 784)))
        with open(os.path.join(d, f'{name}-labels-idx1-ubyte'), 'wb') as f:
            f.write(struct.pack('>II', 0x801, n))
            f.write(bytes(rng.randrange(10) for _ in range(n)))


class Env:
    """A temporary directory with the data set; `args` are the options every run shares."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix='tpusim-faults-')
        self.data = os.path.join(self.tmp, 'data')
        os.mkdir(self.data)
        write_idx(self.data)

    def args(self, model_dir, *extra):
        return ['--chip', 'tiny', '--layers', '16', '--train-batch-size', '16',
                '--eval-batch-size', '16', '--data', self.data, '--model-dir', model_dir,
                '--threads', '1', '--verbose', '0', *extra]

    def train(self, model_dir, *extra, expect=0):
        return run('train', *self.args(model_dir, '--iterations-per-loop', '1',
                                       '--save-checkpoints-steps', '1', '--no-eval', *extra),
                   expect=expect)

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def verify(path):
    """Checks a checkpoint as an outside reader would (structure, every CRC-32, the step
    against the name); returns (step, sha256 of the data section)."""
    with open(path, 'rb') as f:
        data = f.read()
    assert len(data) >= 8, f'{path}: {len(data)} bytes'
    n = struct.unpack('<Q', data[:8])[0]
    assert 8 + n <= len(data), f'{path}: header of {n} bytes in a file of {len(data)}'
    header = json.loads(data[8:8 + n])
    meta = header.pop('__metadata__')
    body = data[8 + n:]
    end = 0
    for name, t in header.items():
        b, e = t['data_offsets']
        got = zlib.crc32(body[b:e])
        assert got == int(meta['tpusim.crc32.' + name], 16), f'{path}: tensor {name} damaged'
        end = max(end, e)
    assert end == len(body), f'{path}: {len(body)} data bytes, tensors end at {end}'
    assert zlib.crc32(body) == int(meta['tpusim.data_crc32'], 16), f'{path}: data damaged'
    step = int(meta['tpusim.global_step'])
    assert os.path.basename(path) == f'ckpt-{step}.safetensors', (path, step)
    return step, hashlib.sha256(body).hexdigest()


def index(model_dir):
    with open(os.path.join(model_dir, 'checkpoint.json')) as f:
        return json.load(f)


def assert_consistent(model_dir):
    """The index parses, every checkpoint it names verifies; returns the latest step."""
    ix = index(model_dir)
    for e in ix['checkpoints']:
        step, _ = verify(os.path.join(model_dir, e['path']))
        assert step == e['global_step'], e
    assert ix['latest'] == ix['checkpoints'][-1], ix
    return ix['latest']['global_step']


def latest_step(model_dir):
    """The index's latest step, or -1 while there is no index (it is replaced atomically, so
    a reader sees the old or the new one, whole)."""
    try:
        return index(model_dir)['latest']['global_step']
    except FileNotFoundError:
        return -1


def ckpts(model_dir):
    return sorted(n for n in os.listdir(model_dir) if n.endswith('.safetensors'))


# ---- the index lost or damaged ------------------------------------------------------------

@case
def missing_index_resumes_from_files_and_deletes_nothing():
    env = Env()
    try:
        md = os.path.join(env.tmp, 'md')
        env.train(md, '--max-steps', '6', '--save-checkpoints-steps', '3')
        assert ckpts(md) == ['ckpt-0.safetensors', 'ckpt-3.safetensors',
                             'ckpt-6.safetensors'], ckpts(md)
        os.unlink(os.path.join(md, 'checkpoint.json'))
        # resumes at 6 (not 0), says why, and keep-checkpoint-max 1 spares the old files
        p = env.train(md, '--steps', '2', '--keep-checkpoint-max', '1')
        assert 'global step        8' in p.stdout, p.stdout
        assert "warning: '%s' has no checkpoint.json index; using ckpt-6.safetensors " \
               "(global step 6)" % md in p.stderr, p.stderr
        assert ckpts(md) == ['ckpt-0.safetensors', 'ckpt-3.safetensors',
                             'ckpt-6.safetensors', 'ckpt-8.safetensors'], ckpts(md)
        assert [e['global_step'] for e in index(md)['checkpoints']] == [8]
        # evaluate finds it without the index too, and says so
        os.unlink(os.path.join(md, 'checkpoint.json'))
        p = run('evaluate', *env.args(md))
        assert 'global step 8:' in p.stdout, p.stdout
        assert 'has no checkpoint.json index; using ckpt-8.safetensors' in p.stderr, p.stderr
        # a damaged index: a warning, the same latest, and a save moves it aside
        with open(os.path.join(md, 'checkpoint.json'), 'w') as f:
            f.write('{"format": "tpusim-checkpoint-index", "version" 1}')
        p = env.train(md, '--steps', '1')
        assert 'global step        9' in p.stdout, p.stdout
        assert 'checkpoint.json: is not a valid checkpoint index: its JSON is malformed at ' \
               'line 1' in p.stderr, p.stderr
        assert os.path.exists(os.path.join(md, 'checkpoint.json.damaged'))
        assert assert_consistent(md) == 9
        for name in ckpts(md):
            verify(os.path.join(md, name))
        # the latest file damaged: refused with the file and the way out, never step 0
        with open(os.path.join(md, 'ckpt-9.safetensors'), 'r+b') as f:
            f.seek(-2, os.SEEK_END)
            f.write(b'\x55')
        expect_error(['evaluate', *env.args(md)], 1, 'ckpt-9.safetensors, does not verify',
                     'fails its checksum', 'move it and checkpoint.json out of model_dir')
        expect_error(['train', *env.args(md, '--steps', '1')], 1,
                     'ckpt-9.safetensors, does not verify')
        assert 'ckpt-9.safetensors' in ckpts(md)
    finally:
        env.close()


def rewrite_step(src, dst, step):
    """Copies checkpoint src to dst with its header's global step changed."""
    with open(src, 'rb') as f:
        data = f.read()
    n = struct.unpack('<Q', data[:8])[0]
    header = json.loads(data[8:8 + n])
    header['__metadata__']['tpusim.global_step'] = str(step)
    text = json.dumps(header, separators=(',', ':'))
    text += ' ' * ((8 - len(text) % 8) % 8)
    with open(dst, 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text.encode() + data[8 + n:])


@case
def step_is_checked_against_name_and_range():
    env = Env()
    try:
        md = os.path.join(env.tmp, 'md')
        env.train(md, '--max-steps', '2')
        src = os.path.join(md, 'ckpt-2.safetensors')
        # the step, in a file of that name, as the only checkpoint
        huge = 9223372036854775806
        bad = os.path.join(env.tmp, 'bad')
        os.mkdir(bad)
        rewrite_step(src, os.path.join(bad, f'ckpt-{huge}.safetensors'), huge)
        expect_error(['train', *env.args(bad, '--steps', '1')], 1,
                     f'tpusim.global_step is {huge}, beyond 9007199254740991 (2^53 - 1)')
        # a file renamed to another step
        moved = os.path.join(env.tmp, 'moved')
        os.mkdir(moved)
        shutil.copy(src, os.path.join(moved, 'ckpt-600.safetensors'))
        expect_error(['evaluate', *env.args(moved)], 1,
                     'its header says global step 2 but its name says step 600',
                     'rename it to ckpt-2.safetensors')
    finally:
        env.close()


@case
def directories_where_files_belong():
    env = Env()
    try:
        md = os.path.join(env.tmp, 'md')
        env.train(md, '--max-steps', '2')
        # the index is a directory: a warning, and the run goes on from the files
        os.unlink(os.path.join(md, 'checkpoint.json'))
        os.mkdir(os.path.join(md, 'checkpoint.json'))
        p = run('evaluate', *env.args(md))
        assert 'checkpoint.json: is not a valid checkpoint index: it is a directory' \
               in p.stderr, p.stderr
        assert 'global step 2:' in p.stdout, p.stdout
        os.rmdir(os.path.join(md, 'checkpoint.json'))
        # a directory named like the latest checkpoint
        os.mkdir(os.path.join(md, 'ckpt-7.safetensors'))
        expect_error(['evaluate', *env.args(md)], 1, 'ckpt-7.safetensors',
                     'is a directory, not a checkpoint file')
        # model_dir is a file
        f = os.path.join(env.tmp, 'file')
        open(f, 'w').close()
        # the command line refuses it before any work; the library says the same (test_checkpoint)
        expect_error(['evaluate', *env.args(f)], 2, f"--model-dir '{f}' is a file, not a "
                     "directory")
    finally:
        env.close()


# ---- kill -9 ------------------------------------------------------------------------------

KILLS = 50


@case
def kill_9_at_random_points_then_resume_bit_identical():
    env = Env()
    rng = random.Random(2024)
    try:
        md = os.path.join(env.tmp, 'md')
        base = env.args(md, '--iterations-per-loop', '1', '--save-checkpoints-steps', '1',
                        '--keep-checkpoint-max', '3', '--no-eval', '--json')
        kills = mid_write = 0
        latest = -1
        t0 = time.monotonic()
        while kills < KILLS:
            p = subprocess.Popen([TPUSIM, 'train', *base, '--max-steps', '100000'],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            # let this run commit a checkpoint (however slow the machine or the build), then
            # kill it at a random point of the next few steps and saves
            deadline = time.monotonic() + 60
            while (latest_step(md) <= latest and p.poll() is None and
                   time.monotonic() < deadline):
                time.sleep(0.001)
            time.sleep(rng.uniform(0.0, 0.03))
            p.kill()  # SIGKILL
            p.wait()
            assert p.returncode == -9, (p.returncode, p.stderr.read())
            p.stderr.close()
            kills += 1
            if not os.path.exists(os.path.join(md, 'checkpoint.json')):
                # killed before the first checkpoint was committed: a file renamed into
                # place before its index is complete all the same
                for name in ckpts(md) if os.path.isdir(md) else []:
                    verify(os.path.join(md, name))
                continue
            mid_write += any(n.endswith('.tmp') for n in os.listdir(md))
            # never a corrupt or half-written checkpoint; the step never goes back
            step = assert_consistent(md)
            assert step >= latest, (step, latest)
            latest = step
            if kills % 10 == 0:
                ev = json.loads(run('evaluate', *env.args(md, '--json')).stdout)
                assert ev['global_step'] == step, (ev, step)
        assert latest > 0, 'no checkpoint was ever committed: the kills came too early'
        # resume to a fixed step past the last kill, and run the same job uninterrupted
        final = latest + 5
        run('train', *base, '--max-steps', str(final))
        assert assert_consistent(md) == final
        ev = json.loads(run('evaluate', *env.args(md, '--json')).stdout)
        ref = os.path.join(env.tmp, 'ref')
        run('train', *env.args(ref, '--iterations-per-loop', '1', '--save-checkpoints-steps',
                               '1', '--keep-checkpoint-max', '3', '--no-eval', '--json'),
            '--max-steps', str(final))
        ev_ref = json.loads(run('evaluate', *env.args(ref, '--json')).stdout)
        got = verify(os.path.join(md, f'ckpt-{final}.safetensors'))
        want = verify(os.path.join(ref, f'ckpt-{final}.safetensors'))
        assert got == want, f'resumed run differs from the uninterrupted one: {got} != {want}'
        assert ev == ev_ref, (ev, ev_ref)
        # whatever a kill left behind is either a checkpoint that verifies or gone
        for name in ckpts(md):
            verify(os.path.join(md, name))
        print(f'{kills} kills in {time.monotonic() - t0:.1f} s, {mid_write} of them left a '
              f'temporary file (killed mid-write); resumed to step {final}, bit-identical')
    finally:
        env.close()


# ---- a full disk and a read-only model_dir (tmpfs mounts) ---------------------------------

@contextlib.contextmanager
def tmpfs(size):
    """A fresh Env and a tmpfs of `size` mounted in it; yields (env, mount point). Skips the
    case when it cannot mount (not root, or no permission); always unmounts and cleans up."""
    env = Env()
    mnt = os.path.join(env.tmp, 'mnt')
    os.mkdir(mnt)
    why = 'not root' if os.geteuid() != 0 else None
    if not why:
        p = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', mnt],
                           capture_output=True, text=True)
        why = None if p.returncode == 0 else f'mount failed: {p.stderr.strip()}'
    if why:
        env.close()
        raise Skip(why)
    try:
        yield env, mnt
    finally:
        subprocess.run(['umount', mnt])
        env.close()


@case
def full_disk_gives_a_clear_error_and_keeps_the_last_checkpoint():
    with tmpfs('1m') as (env, mnt):
        md = os.path.join(mnt, 'md')
        env.train(md, '--max-steps', '3', '--keep-checkpoint-max', '1')
        before = verify(os.path.join(md, 'ckpt-3.safetensors'))
        # leave less room than one checkpoint (154 KB)
        st = os.statvfs(mnt)
        free = st.f_bavail * st.f_frsize
        with open(os.path.join(mnt, 'filler'), 'wb') as f:
            f.write(b'\0' * (free - 64 * 1024))
        expect_error(['train', *env.args(md, '--iterations-per-loop', '1',
                                         '--save-checkpoints-steps', '1', '--no-eval',
                                         '--max-steps', '6')], 1,
                     f"cannot write '{md}/ckpt-4.safetensors'", 'No space left on device',
                     'the file system is full: free space there or choose another model_dir')
        # the last checkpoint is intact and still the latest; no temporary file is left
        assert assert_consistent(md) == 3
        assert verify(os.path.join(md, 'ckpt-3.safetensors')) == before
        assert not [n for n in os.listdir(md) if n.endswith('.tmp')], os.listdir(md)
        ev = json.loads(run('evaluate', *env.args(md, '--json')).stdout)
        assert ev['global_step'] == 3, ev
        # with room again, training resumes from it
        os.unlink(os.path.join(mnt, 'filler'))
        env.train(md, '--max-steps', '6', '--keep-checkpoint-max', '1')
        assert assert_consistent(md) == 6


@case
def read_only_model_dir_gives_a_clear_error_and_keeps_the_last_checkpoint():
    with tmpfs('4m') as (env, mnt):
        md = os.path.join(mnt, 'md')
        env.train(md, '--max-steps', '3')
        before = verify(os.path.join(md, 'ckpt-3.safetensors'))
        p = subprocess.run(['mount', '-o', 'remount,ro', mnt], capture_output=True, text=True)
        if p.returncode != 0:
            raise Skip(f'remount read-only failed: {p.stderr.strip()}')
        # refused before any work, naming the reason (a model_dir that turns read-only during
        # a run is the library's case: test_checkpoint's write-error tests)
        expect_error(['train', *env.args(md, '--iterations-per-loop', '1',
                                         '--save-checkpoints-steps', '1', '--no-eval',
                                         '--max-steps', '6')], 2,
                     f"--model-dir '{md}': the directory '{md}' is not writable (Read-only "
                     "file system)")
        assert assert_consistent(md) == 3
        # a model_dir that turns read-only during the run: the save fails with its reason
        subprocess.run(['mount', '-o', 'remount,rw', mnt], check=True)
        proc = subprocess.Popen([TPUSIM, 'train', *env.args(
            md, '--iterations-per-loop', '1', '--save-checkpoints-steps', '1', '--no-eval',
            '--max-steps', '6', '--initial-infeed-sleep-secs', '3')],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1)
        subprocess.run(['mount', '-o', 'remount,ro', mnt], check=True)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, (proc.returncode, err)
        for n in (f"cannot create '{md}/ckpt-4.safetensors'", 'Read-only file system',
                  'model_dir must be writable'):
            assert n in err, (n, err)
        assert assert_consistent(md) == 3
        assert verify(os.path.join(md, 'ckpt-3.safetensors')) == before
        # reading needs no writes: evaluate works
        ev = json.loads(run('evaluate', *env.args(md, '--json')).stdout)
        assert ev['global_step'] == 3, ev


if __name__ == '__main__':
    sys.exit(main())
