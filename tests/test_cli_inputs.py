#!/usr/bin/env python3
"""The `tpusim` command line with input and output files that are wrong or unusual: the wrong
kind of file (a directory, a device, a huge or binary one), damaged data, odd names, and
output paths that are symbolic links, devices or FIFOs.

usage: test_cli_inputs.py PATH/TO/tpusim
Prints CMocka-style summary lines so the suite's totals count each case.
"""
import gzip
import json
import os
import stat
import struct
import subprocess
import sys
import tempfile
import threading

from cli_harness import case, expect_error, main, read_npy, run, write_npy

PROGRAM = """program p
temp x: f32[8, 8]
temp y: f32[8, 8]
x = infeed
y = relu x
outfeed y
"""


def write_idx(d, prefix, n, rows, cols):
    with open(os.path.join(d, prefix + '-images-idx3-ubyte'), 'wb') as f:
        f.write(struct.pack('>IIII', 0x803, n, rows, cols) + bytes(n * rows * cols))
    with open(os.path.join(d, prefix + '-labels-idx1-ubyte'), 'wb') as f:
        f.write(struct.pack('>II', 0x801, n) + bytes(i % 10 for i in range(n)))


# ---- data files -------------------------------------------------------------------------------
@case
def data_images_not_28x28():
    """29x28 images overflowed the 784-float batch rows; 5x5 ones trained on wrong data."""
    with tempfile.TemporaryDirectory() as d:
        for rows, cols in ((29, 28), (5, 5)):
            write_idx(d, 'train', 4, rows, cols)
            write_idx(d, 't10k', 4, 28, 28)
            expect_error(['train', '--data', d, '--steps', '1'], 1,
                         f'{d}/train-images-idx3-ubyte: holds images of {rows}x{cols} pixels '
                         '(bytes 8-15 of the header), but 28x28 images are needed (784 input '
                         "features per example); Fashion-MNIST's images are 28x28")


@case
def data_gzip_trailer_cut_or_garbage_after():
    with tempfile.TemporaryDirectory() as d:
        write_idx(d, 't10k', 2000, 28, 28)
        write_idx(d, 'train', 2000, 28, 28)
        name = os.path.join(d, 'train-images-idx3-ubyte')
        with open(name, 'rb') as f:
            raw = f.read()
        os.unlink(name)
        packed = gzip.compress(raw)
        with open(name + '.gz', 'wb') as f:
            f.write(packed[:-8])
        expect_error(['train', '--data', d, '--steps', '1'], 1,
                     'train-images-idx3-ubyte.gz: the gzip data is cut short: the file ends '
                     f'after {len(packed) - 8} bytes, inside the compressed stream or its '
                     'trailer (CRC-32 and length)')
        with open(name + '.gz', 'wb') as f:
            f.write(packed + b'junk')
        expect_error(['train', '--data', d, '--steps', '1'], 1,
                     'train-images-idx3-ubyte.gz: has 4 bytes after the end of the gzip data '
                     f'(at byte offset {len(packed)} of the file)')


# ---- .npy -------------------------------------------------------------------------------------
@case
def npy_huge_shape_small_file():
    with tempfile.TemporaryDirectory() as d:
        pa, pb = os.path.join(d, 'a.npy'), os.path.join(d, 'b.npy')
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 2097152), }"
        header += ' ' * ((64 - (10 + len(header) + 1) % 64) % 64) + '\n'
        with open(pa, 'wb') as f:
            f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header)) + header.encode())
            f.write(bytes(16))
        write_npy(pb, [[1.0]], '<f4', 'f')
        expect_error(['gemm', '--a', pa, '--b', pb, '--chip', 'tiny'], 1,
                     f'{pa}: is truncated: shape (1048576, 2097152) of float32 needs '
                     '8796093022208 data bytes after the 128-byte header, the file has 16')
        expect_error(['gemm', '--a', d, '--b', pb, '--chip', 'tiny'], 1,
                     f"'{d}' is a directory; give a NumPy .npy file")


# ---- output files -----------------------------------------------------------------------------
def gemm_dump(path):
    return run('gemm', '-m', '4', '-k', '4', '-n', '4', '--chip', 'tiny', '--dump', path)


@case
def output_through_symlink_device_fifo():
    with tempfile.TemporaryDirectory() as d:
        target, link = os.path.join(d, 'y.npy'), os.path.join(d, 'link.npy')
        # a regular file is replaced, keeping its mode
        gemm_dump(target)
        os.chmod(target, 0o640)
        gemm_dump(target)
        assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
        # a symlink stays a link; the file it points to gets the result
        os.unlink(target)
        os.symlink('y.npy', link)
        gemm_dump(link)
        assert os.path.islink(link), 'the link was replaced'
        descr, rows = read_npy(target)
        assert descr == '<f4' and len(rows) == 4
        # a device is written through, not replaced
        gemm_dump('/dev/null')
        assert stat.S_ISCHR(os.stat('/dev/null').st_mode)
        # a FIFO: a reader gets the whole file, the FIFO stays
        fifo = os.path.join(d, 'fifo')
        os.mkfifo(fifo)
        got = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, 'rb').read()), daemon=True)
        reader.start()
        gemm_dump(fifo)
        reader.join(60)
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
        assert len(got) == 1 and got[0][:6] == b'\x93NUMPY' and len(got[0]) == 128 + 64, got
        # /dev/stdout redirected to a file (>> here, so that the summary printed after the
        # dump does not overwrite it): the shell's file is written, not replaced
        out = os.path.join(d, 'stdout.bin')
        with open(out, 'ab') as f:
            ino = os.fstat(f.fileno()).st_ino
            p = subprocess.run([sys.argv[1], 'gemm', '-m', '4', '-k', '4', '-n', '4', '--chip',
                                'tiny', '--dump', '/dev/stdout', '--json'], stdout=f,
                               stderr=subprocess.PIPE, timeout=240)
        assert p.returncode == 0, p.stderr
        assert os.stat(out).st_ino == ino, 'the redirected file was replaced'
        with open(out, 'rb') as f:
            data = f.read()
        assert data.startswith(b'\x93NUMPY') and b'"chip": "tiny"' in data, data[:200]
        # a directory is refused with a sentence
        expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--chip', 'tiny', '--dump', d],
                     1, f"cannot write '{d}': it is a directory; give a file name")


# ---- device programs --------------------------------------------------------------------------
@case
def program_size_directory_nul():
    expect_error(['program', 'check', '/dev/zero'], 1,
                 "'/dev/zero' is larger than 16 MiB (16777216 bytes), the limit for a program "
                 'text')
    with tempfile.TemporaryDirectory() as d:
        expect_error(['program', 'check', d], 1, f"'{d}' is a directory; give a program text "
                     'file')
        path = os.path.join(d, 'p.txt')
        with open(path, 'w') as f:
            f.write(PROGRAM)
        run('program', 'check', path)
        expect_error(['program', 'check', '/dev/null'], 1,
                     "'/dev/null' is empty; a program text starts with 'program <name>'")
        with open(path, 'wb') as f:
            f.write(b'program p\nvar \0n\nfrob\n')
        expect_error(['program', 'check', path], 1, f'{path}:2:5: a NUL byte (\\x00)')


# ---- chip configurations ----------------------------------------------------------------------
@case
def config_directory_and_odd_names():
    with tempfile.TemporaryDirectory() as d:
        expect_error(['config', 'check', d], 1,
                     f"'{d}' is a directory; give a chip configuration JSON file")
        expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--chip', d], 1,
                     f"'{d}' is a directory")
        path = os.path.join(d, 'chip.json')
        with open(path, 'w') as f:
            f.write(run('config', 'show', 'tiny', '--json').stdout)
        cfg = json.loads(open(path).read())['config']
        cfg['name'] = 'my\nchip\x1b[2J'
        with open(path, 'w') as f:
            json.dump(cfg, f)
        expect_error(['config', 'check', path], 1,
                     "field 'name' is \"my\\x0Achip\\x1B[2J\", which contains '\\x0A'")
    # '\udcff' is the byte 0xff on the command line (not UTF-8)
    expect_error(['gemm', '-m', '4', '-k', '4', '-n', '4', '--chip', 'tpu\nv4\udcff'], 1,
                 "'tpu\\x0Av4\\xFF' is neither a built-in chip preset")


@case
def program_var_out_of_range_and_odd_options():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, 'p.txt')
        with open(path, 'w') as f:
            f.write(PROGRAM)
        expect_error(['program', 'run', path, '--var', 'n=99999999999999999999'], 2,
                     "--var 'n=99999999999999999999': the value is out of range")
        expect_error(['program', 'run', path, '--bogus\x1b', '1'], 2,
                     "unknown option '--bogus\\x1B'")


@case
def config_show_from_a_pipe():
    """A pipe can be read once: show used to read it a second time and find it empty."""
    text = run('config', 'show', 'tiny', '--json').stdout
    cfg = json.dumps(json.loads(text)['config'])
    p = subprocess.run([sys.argv[1], 'config', 'show', '/dev/stdin', '--json'], input=cfg,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)['config']['name'] == 'tiny'
    p = subprocess.run([sys.argv[1], 'config', 'show', '/dev/stdin'], input='{}\0x',
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 1 and "holds a NUL byte at byte offset 2" in p.stderr, p.stderr


# ---- SCALE-Sim topologies ---------------------------------------------------------------------
@case
def topology_directory_and_odd_fields():
    with tempfile.TemporaryDirectory() as d:
        expect_error(['gemm', '--topology', d, '--chip', 'tiny'], 1,
                     f"'{d}' is a directory; give a SCALE-Sim topology file")
        path = os.path.join(d, 'layers.csv')
        with open(path, 'wb') as f:
            f.write(b'Layer, M, N, K,\nfc1, 1\x1b[2J, 2, 3,\n')
        expect_error(['gemm', '--topology', path, '--chip', 'tiny'], 1,
                     f"{path}:2: column 'M' is '1\\x1B[2J', not a whole number >= 1")


if __name__ == '__main__':
    sys.exit(main())
