"""Shared by the command-line tests (test_cli.py, test_cli_rtl.py): runs `tpusim` as a user
does, checks its one-line error messages, reads .npy files without numpy, and prints
CMocka-style summary lines so the suite's totals count each case.

The tpusim executable is the test script's first argument."""
import re
import struct
import subprocess
import sys
import traceback

TPUSIM = sys.argv[1] if len(sys.argv) > 1 else 'tpusim'
CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def run(*args, expect=0):
    p = subprocess.run([TPUSIM, *args], capture_output=True, text=True, timeout=240)
    if p.returncode != expect:
        raise AssertionError(f'tpusim {" ".join(args)}: exit {p.returncode}, expected {expect}\n'
                             f'stdout: {p.stdout}\nstderr: {p.stderr}')
    return p


def expect_error(args, code, *needles):
    p = run(*args, expect=code)
    err = p.stderr
    assert err.count('\n') == 1, f'error should be one line, got: {err!r}'
    assert re.match(r'tpusim( [a-z]+)*: error: ', err), err
    for n in needles:
        assert n in err, f'{n!r} not in {err!r}'
    assert p.stdout == '', f'nothing on stdout on error, got {p.stdout!r}'


def write_npy(path, rows, descr, fmt):
    r, c = len(rows), len(rows[0])
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }" % (descr, r, c)
    header += ' ' * ((64 - (10 + len(header) + 1) % 64) % 64) + '\n'
    with open(path, 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header)) + header.encode())
        for row in rows:
            f.write(struct.pack('<%d%s' % (c, fmt), *row))

def read_npy(path):
    with open(path, 'rb') as f:
        data = f.read()
    assert data[:6] == b'\x93NUMPY'
    hlen = struct.unpack('<H', data[8:10])[0]
    header = data[10:10 + hlen].decode()
    shape = header.split("'shape': (")[1].split(')')[0]
    r, c = (int(x) for x in shape.split(',')[:2])
    descr = header.split("'descr': '")[1].split("'")[0]
    fmt = {'<f4': 'f', '<i4': 'i', '|i1': 'b'}[descr]
    size = struct.calcsize(fmt)
    body = data[10 + hlen:]
    assert len(body) == r * c * size
    vals = struct.unpack('<%d%s' % (r * c, fmt), body)
    return descr, [list(vals[i * c:(i + 1) * c]) for i in range(r)]


# ---- cases ------------------------------------------------------------------------------------
class Skip(Exception):
    """Raised by a case that cannot run on this machine (say, not root for a mount): the case
    counts as skipped, with the reason printed, never as passed."""


def main():
    failed, skipped = [], []
    print(f'[==========] Running {len(CASES)} test(s).')
    for fn in CASES:
        print(f'[ RUN      ] {fn.__name__}', flush=True)
        try:
            fn()
            print(f'[       OK ] {fn.__name__}')
        except Skip as why:
            print(f'[  SKIPPED ] {fn.__name__}: {why}')
            skipped.append(fn.__name__)
        except Exception:  # noqa: BLE001 - every failure is reported, then counted
            traceback.print_exc(file=sys.stdout)
            print(f'[  FAILED  ] {fn.__name__}')
            failed.append(fn.__name__)
    print(f'[==========] {len(CASES)} test(s) run.')
    print(f'[  PASSED  ] {len(CASES) - len(failed) - len(skipped)} test(s).')
    if skipped:
        print(f'[  SKIPPED ] {len(skipped)} test(s), listed below:')
        for name in skipped:
            print(f'[  SKIPPED ] {name}')
    if failed:
        print(f'[  FAILED  ] {len(failed)} test(s), listed below:')
        for name in failed:
            print(f'[  FAILED  ] {name}')
    return 1 if failed else 0



# ---- small Fashion-MNIST-format data ---------------------------------------------------------
FASHION_DIR = '/usr/share/datasets/fashion-mnist'


def write_fashion_subset(dir_, n_train, n_test):
    """Writes the four Fashion-MNIST IDX files (uncompressed, the names tpusim looks for) into
    dir_, holding the first n_train training and n_test test images with their labels. They
    come from Debian's dataset-fashion-mnist when it is installed; otherwise they are made up
    (deterministic noise, labels 0..9 in turn), which trains and evaluates all the same."""
    import gzip
    import os
    import random
    os.makedirs(dir_, exist_ok=True)
    for prefix, n in (('train', n_train), ('t10k', n_test)):
        src = os.path.join(FASHION_DIR, f'{prefix}-images-idx3-ubyte.gz')
        if os.path.exists(src):
            with gzip.open(src, 'rb') as f:
                images = f.read(16 + n * 784)[16:]
            with gzip.open(os.path.join(FASHION_DIR, f'{prefix}-labels-idx1-ubyte.gz'), 'rb') as f:
                labels = f.read(8 + n)[8:]
            assert len(images) == n * 784 and len(labels) == n, f'{src} holds fewer than {n}'
        else:
            rnd = random.Random(n)
            images = bytes(rnd.randrange(256) for _ in range(n * 784))
            labels = bytes(i % 10 for i in range(n))
        with open(os.path.join(dir_, f'{prefix}-images-idx3-ubyte'), 'wb') as f:
            f.write(struct.pack('>IIII', 0x803, n, 28, 28) + images)
        with open(os.path.join(dir_, f'{prefix}-labels-idx1-ubyte'), 'wb') as f:
            f.write(struct.pack('>II', 0x801, n) + labels)
    return dir_
