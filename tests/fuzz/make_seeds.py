#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora into tests/fuzz/seeds/<target>/ (kept in the tree).

Each seed is a small valid input, or one near a boundary the parser checks, so that fuzzing
starts from every branch a user's file can reach rather than from nothing. Deterministic:
running it again rewrites the same bytes. Regression inputs (crashes found by fuzzing) are
not made here; they live in tests/fuzz/regress/<target>/ and are added by hand.

    python3 tests/fuzz/make_seeds.py
"""
import gzip
import json
import os
import shutil
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEEDS = os.path.join(HERE, 'seeds')


def put(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


def copy_dir(target, src, exts):
    for name in sorted(os.listdir(src)):
        if name.endswith(exts):
            with open(os.path.join(src, name), 'rb') as f:
                put(target, name, f.read())


def gz(data):
    # mtime 0: the same bytes on every run
    return gzip.compress(data, mtime=0)


# ---- chip config -------------------------------------------------------------------------
def chip_config():
    copy_dir('chip_config', os.path.join(ROOT, 'configs'), ('.json',))
    copy_dir('chip_config', os.path.join(ROOT, 'tests', 'data', 'config'), ('.json',))


# ---- run config (first byte: 0 train, 1 evaluate, 2 predict; then the JSON) ----------------
def run_config():
    docs = [
        (0, {'learning_rate': 0.1, 'train_batch_size': 64, 'iterations_per_loop': 100,
             'steps': 200, 'optimizer': 'sgd', 'momentum': 0.9}),
        (0, {'chip': 'tiny', 'chips': 2, 'cores_per_replica': 2, 'layers': '32,16',
             'iterations_per_loop': '10s', 'per_host_input_for_training': 'PER_HOST_V2',
             'timing_only': True, 'json': True}),
        (0, {'epochs': 0.5, 'model_dir': 'runs/a', 'save_checkpoints_steps': 100,
             'keep_checkpoint_max': 3, 'log_step_count_steps': 50, 'strict_input': True,
             'host_time': 'measured', 'initial_infeed_sleep_secs': 0.5, 'passes': 3}),
        (1, {'model_dir': 'runs/a', 'eval_batch_size': 128,
             'eval_training_input_configuration': 'SLICED', 'verbose': 2}),
        (2, {'model_dir': 'runs/a', 'predict_batch_size': 100, 'limit': 10,
             'output': 'logits.npy'}),
        (0, {'no_eval': False}),
        (0, {'beta1': 0.9, 'beta2': 0.999, 'epsilon': 1e-7, 'l2': 0.0001, 'seed': 7,
             'host_call_every_n_steps': 10, 'max_steps': 1000, 'backend': 'native'}),
    ]
    for i, (cmd, doc) in enumerate(docs):
        put('run_config', 'config%d.json' % i, bytes([cmd]) + json.dumps(doc).encode())
    put('run_config', 'not_object.json', b'\x00[1, 2]')
    put('run_config', 'syntax.json', b'\x01{"steps": 10,}')


# ---- device program text ---------------------------------------------------------------------
PROGRAMS = {
    'vector.tpuprog': """program vector
param a: f32[4, 8]
param b: f32[4, 8]
temp  y: f32[4, 8]
temp  z: f32[4, 8]
temp  m: f32[4, 8]
temp  c: f32[4, 8]
temp  r: f32[4, 8]
temp  s: f32[4, 1]
temp  t: f32[4, 1]
temp  h: bf16[4, 8]
y = add a, b
z = mul y, a
m = max z, b
c = scale m alpha=0.5
r = relu c
s = reduce_sum r axis=1
t = reduce_max r axis=1
h = convert r
outfeed h
outfeed s
outfeed t
""",
    'loop.tpuprog': """program loop_step
var iterations
var step
param w: f32[8, 8]
param v: f32[8, 8]
temp x: bf16[8, 8]
temp y: f32[8, 8]
temp g: f32[8, 8]
loop iterations {
  x = infeed
  y = matmul x, w trans_b passes=3
  g = all_reduce y reduce=mean
  w, v = sgd_momentum g alpha=0.01 beta=0.9
  var_add step 1
  outfeed y
}
""",
    'train.tpuprog': """program train
var step
param w: f32[8, 4]
param m: f32[8, 4]
param s: f32[8, 4]
temp x: f32[2, 8]
temp labels: int32[2, 1]
temp logits: f32[2, 4]
temp e: f32[2, 4]
temp p: f32[2, 4]
temp loss: f32[1, 1]
temp dlogits: f32[2, 4]
temp counts: f32[1, 2]
temp g: f32[8, 4]
temp g2: f32[8, 4]
x = infeed
labels = infeed
logits = matmul x, w
e = exp logits
p = relu_grad e, logits
loss, dlogits = softmax_xent logits, labels alpha=0.5
counts = classify_count logits, labels
g = matmul x, dlogits trans_a
g = matmul x, p trans_a accumulate
g2 = collective_permute g shift=1 group=replica_cores
var_add step 1
w, m, s = adam g2 var=step alpha=0.001 beta=0.9 gamma=0.999 delta=0x1p-7 eps=1e-7
outfeed loss
outfeed counts
""",
    'int8.tpuprog': """program int8_gemm
param a: int8[16, 8]
param b: int8[8, 16]
temp y: int32[16, 16]
y = matmul a, b   # int8 x int8 into int32
outfeed y
""",
    'window.tpuprog': """program window
param k: f32[18, 4]
temp  x: f32[2, 50]
temp  cols: f32[18, 18]
temp  y: f32[18, 4]
temp  m: f32[8, 4]
temp  a: f32[8, 4]
temp  dm: f32[18, 4]
temp  da: f32[18, 4]
temp  dcols: f32[18, 18]
temp  dx: f32[2, 50]
temp  r: f32[4, 81]
x = infeed
cols = im2col x h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3
y = matmul cols, k
m = max_pool y h=3 w=3 c=4 kh=2 kw=2 sh=2 sw=2 pt=0 pl=0 ho=2 wo=2
a = avg_pool y h=3 w=3 c=4 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=2 wo=2
dm = max_pool_grad m, y h=3 w=3 c=4 kh=2 kw=2 sh=2 sw=2 pt=0 pl=0 ho=2 wo=2
da = avg_pool_grad a h=3 w=3 c=4 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=2 wo=2
dcols = matmul dm, k trans_b
dx = col2im dcols h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3
r = reshape dcols
outfeed dx
outfeed da
outfeed r
""",
    'conv.tpuprog': """program conv
param k: bf16[18, 4]
param dk: f32[18, 4]
temp  x: f32[2, 50]
temp  y: f32[18, 4]
temp  dx: f32[2, 50]
x = infeed
y = conv2d x, k h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3
dk = conv2d_grad_filter x, y h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3 passes=6
dk = conv2d_grad_filter x, y h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3 accumulate
dx = conv2d_grad_input y, k h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3
outfeed dx
""",
    'partition.tpuprog': """program partition
var step
param xl: f32[4, 8]
param w: f32[18, 3]
temp  x: f32[4, 8]
temp  xe: f32[6, 8]
temp  y: f32[16, 3]
temp  m: f32[4, 8]
temp  d: f32[4, 8]
temp  dxe: f32[6, 8]
temp  dx: f32[4, 8]
x = infeed core0
xl = all_reduce x reduce=sum group=replica_cores
xe = halo xl h=8 w=4 c=2 kh=3 kw=3 sh=1 sw=1 pt=1 pl=1 ho=8 wo=4 parts=2
y = conv2d xe, w h=8 w=4 c=2 kh=3 kw=3 sh=1 sw=1 pt=1 pl=1 ho=8 wo=4 parts=2
m = row_mask h=8 w=4 c=2 kh=1 kw=1 sh=1 sw=1 pt=0 pl=0 ho=8 wo=4 parts=2
d = dropout_mask var=step imm=7 alpha=0.5 h=8 w=4 c=2 parts=2
dxe = conv2d_grad_input y, w h=8 w=4 c=2 kh=3 kw=3 sh=1 sw=1 pt=1 pl=1 ho=8 wo=4 parts=2
dx = halo_grad dxe h=8 w=4 c=2 kh=3 kw=3 sh=1 sw=1 pt=1 pl=1 ho=8 wo=4 parts=2
outfeed dx
""",
    'weighted.tpuprog': """program weighted
var step
var learning_rate
param w: f32[8, 4]
param v: f32[8, 4]
temp x: f32[2, 8]
temp labels: int32[2, 1]
temp weights: f32[2, 1]
temp logits: f32[2, 4]
temp loss: f32[1, 1]
temp dlogits: f32[2, 4]
temp loss2: f32[1, 1]
temp dpred: f32[2, 4]
temp g: f32[8, 4]
x = infeed
labels = infeed
weights = infeed
logits = matmul x, w
loss, dlogits = softmax_xent_w logits, labels, weights
loss2, dpred = mse_w logits, logits, labels, weights
g = matmul x, dlogits trans_a
var_add step 1
w, v = sgd_momentum g alpha=0.1 beta=0.9 schedule=host lr_var=learning_rate
outfeed loss
""",
    'bad_syntax.tpuprog': """program bad
param a: f32[4, 0]
y = frobnicate a
""",
    'nan.tpuprog': """program nan
param a: f32[1, 1]
temp y: f32[1, 1]
y = scale a alpha=nan:0x7fc00001
""",
}


def program():
    put('program', 'mlp_step.tpuprog',
        open(os.path.join(ROOT, 'tests', 'data', 'program', 'mlp_step.tpuprog'), 'rb').read())
    for name, text in PROGRAMS.items():
        put('program', name, text)


# ---- SCALE-Sim topology CSV ---------------------------------------------------------------
def topology():
    copy_dir('topology', os.path.join(ROOT, 'tests', 'data', 'topology'), ('.csv',))
    put('topology', 'conv.csv',
        'Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, '
        'Num Filter, Strides,\nConv1, 8, 8, 3, 3, 2, 4, 1,\nDW, 8, 8, 3, 3, 4, 4, 1,\n')
    put('topology', 'sparse.csv', 'Layer, M, N, K, Sparsity\nfc, 4, 4, 8, 2:4\n')
    put('topology', 'crlf.csv', 'Layer, M, N, K,\r\nfc1, 1, 1, 1,\r\n')


# ---- .npy --------------------------------------------------------------------------------
def npy(descr, shape, payload, version=1, fortran=False):
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (
        descr, 'True' if fortran else 'False', ', '.join(str(s) for s in shape) +
        (',' if len(shape) == 1 else ''))
    pre = 10 if version == 1 else 12
    hlen = len(d) + 1
    hlen += (64 - (pre + hlen) % 64) % 64
    head = d.encode() + b' ' * (hlen - len(d) - 1) + b'\n'
    if version == 1:
        magic = b'\x93NUMPY\x01\x00' + struct.pack('<H', hlen)
    else:
        magic = b'\x93NUMPY' + bytes([version, 0]) + struct.pack('<I', hlen)
    return magic + head + payload


def npy_seeds():
    put('npy', 'f32_2x3.npy', npy('<f4', (2, 3), struct.pack('<6f', 1, -2, 0.5, 3, 4, 1e-3)))
    put('npy', 'i8_3x2.npy', npy('|i1', (3, 2), bytes([1, 255, 2, 128, 0, 127])))
    put('npy', 'i8_lt.npy', npy('<i1', (1, 1), b'\x05'))
    put('npy', 'i32_2x2.npy', npy('<i4', (2, 2), struct.pack('<4i', 1, -1, 2 ** 31 - 1, 0)))
    put('npy', 'v2.npy', npy('<f4', (1, 2), struct.pack('<2f', 1, 2), version=2))
    put('npy', 'v3.npy', npy('<f4', (2, 1), struct.pack('<2f', 1, 2), version=3))
    put('npy', 'fortran.npy', npy('<f4', (1, 1), struct.pack('<f', 1), fortran=True))
    put('npy', 'big_endian.npy', npy('>f4', (1, 1), struct.pack('>f', 1)))
    put('npy', 'three_d.npy', npy('<f4', (1, 1, 1), struct.pack('<f', 1)))
    put('npy', 'truncated.npy', npy('<f4', (4, 4), struct.pack('<2f', 1, 2)))
    # dataset arrays (tpu_npy_read_array, tpu_dataset_load_npy): more dtypes and ranks
    put('npy', 'u8_3x2x2.npy', npy('|u1', (3, 2, 2), bytes([0, 1, 2, 255] * 3)))
    put('npy', 'i64_labels_4x1.npy', npy('<i8', (4, 1), struct.pack('<4q', 0, 3, 1, 2)))
    put('npy', 'i16_labels_3.npy', npy('<i2', (3,), struct.pack('<3h', 2, 0, 1)))
    put('npy', 'f64_targets_2x2.npy', npy('<f8', (2, 2), struct.pack('<4d', 0.5, -1, 2, 1e300)))
    put('npy', 'f32_4d.npy', npy('<f4', (1, 2, 2, 2), struct.pack('<8f', *range(8))))
    put('npy', 'negative_label.npy', npy('|i1', (2, 1), bytes([1, 0xff])))
    put('npy', 'eight_d.npy', npy('<i4', (1, 1, 1, 1, 1, 1, 1, 1), struct.pack('<i', 7)))


# ---- IDX (2 bytes: label file length, little-endian; the label file; the image file) -------
def idx_images(n, rows, cols, seed=1):
    data = bytes((i * 37 + seed) % 256 for i in range(n * rows * cols))
    return struct.pack('>IIII', 0x803, n, rows, cols) + data


def idx_labels(labels):
    return struct.pack('>II', 0x801, len(labels)) + bytes(labels)


def idx_pair(labels, images):
    return struct.pack('<H', len(labels)) + labels + images


def idx_seeds():
    lab = idx_labels([3, 0, 9])
    img = idx_images(3, 4, 4)
    put('idx', 'plain.bin', idx_pair(lab, img))
    put('idx', 'gzip.bin', idx_pair(gz(lab), gz(img)))
    put('idx', 'gzip_images_only.bin', idx_pair(lab, gz(img)))
    put('idx', 'one_28x28.bin', idx_pair(gz(idx_labels([7])), gz(idx_images(1, 28, 28))))
    put('idx', 'label_10.bin', idx_pair(idx_labels([10]), idx_images(1, 2, 2)))
    put('idx', 'count_mismatch.bin', idx_pair(idx_labels([1, 2]), idx_images(3, 2, 2)))
    put('idx', 'extra_bytes.bin', idx_pair(lab + b'\x00', img))
    put('idx', 'truncated_gzip.bin', idx_pair(gz(lab), gz(img)[:-6]))
    put('idx', 'swapped.bin', idx_pair(img, lab))
    # any MNIST-format set (tpu_dataset_load_dir): every data type, 2 to 4 dimensions
    def typed(type_byte, dims, fmt, values):
        head = struct.pack('>I', type_byte << 8 | len(dims)) + struct.pack('>%dI' % len(dims), *dims)
        return head + struct.pack('>%d%s' % (len(values), fmt), *values)
    put('idx', 'f32_4d_i16_labels.bin', idx_pair(typed(0x0B, (2,), 'h', [1, 0]),
                                                 typed(0x0D, (2, 2, 1, 2), 'f', [0.5] * 8)))
    put('idx', 'f64_flat_i32_labels.bin', idx_pair(typed(0x0C, (2,), 'i', [4, 2]),
                                                   typed(0x0E, (2, 3), 'd', [1, 2, 3, 4, 5, 1e300])))
    put('idx', 'sbyte_negative_label.bin', idx_pair(typed(0x09, (2,), 'b', [1, -1]),
                                                    typed(0x09, (2, 2, 2), 'b', [-5, 5] * 4)))
    put('idx', 'i16_gzip.bin', idx_pair(gz(typed(0x08, (1,), 'B', [3])),
                                        gz(typed(0x0B, (1, 2, 2), 'h', [-300, 300, 0, 7]))))
    put('idx', 'float_labels.bin', idx_pair(typed(0x0D, (1,), 'f', [1.0]),
                                            typed(0x08, (1, 2, 2), 'B', [1, 2, 3, 4])))


# ---- safetensors checkpoint --------------------------------------------------------------
def safetensors(tensors, step=1, meta=None, pad=True):
    """tensors: list of (name, dtype, rows, cols, bytes), written in order."""
    header = {}
    data = b''
    m = {'tpusim.format': 'tpusim-checkpoint-v1', 'tpusim.global_step': str(step)}
    for name, dtype, rows, cols, raw in tensors:
        header[name] = {'dtype': dtype, 'shape': [rows, cols],
                        'data_offsets': [len(data), len(data) + len(raw)]}
        m['tpusim.crc32.' + name] = '%08x' % zlib.crc32(raw)
        data += raw
    m['tpusim.data_crc32'] = '%08x' % zlib.crc32(data)
    m.update(meta or {})
    header['__metadata__'] = m
    text = json.dumps(header, separators=(',', ':')).encode()
    if pad:
        text += b' ' * ((8 - len(text) % 8) % 8)
    return struct.pack('<Q', len(text)) + text + data


def safetensors_seeds():
    f32 = struct.pack('<6f', 1, 2, 3, -4, 0.5, 1e-3)
    put('safetensors', 'f32.safetensors', safetensors([('w', 'F32', 2, 3, f32)], step=300))
    put('safetensors', 'mixed.safetensors', safetensors([
        ('dense/w', 'F32', 2, 2, struct.pack('<4f', 1, 2, 3, 4)),
        ('acc', 'I32', 1, 2, struct.pack('<2i', -1, 7)),
        ('h', 'BF16', 1, 3, struct.pack('<3H', 0x3f80, 0x4000, 0xbf80)),
        ('q', 'I8', 2, 1, b'\x01\xff'),
    ], step=12, meta={'run.fingerprint': 'abc123'}))
    put('safetensors', 'empty.safetensors', safetensors([], step=0))
    put('safetensors', 'bad_crc.safetensors',
        safetensors([('w', 'F32', 1, 1, struct.pack('<f', 1))])[:-4] + struct.pack('<f', 2))
    put('safetensors', 'no_meta.safetensors',
        struct.pack('<Q', 8) + b'{}      ')
    put('safetensors', 'newer.safetensors', safetensors(
        [('w', 'I8', 1, 1, b'\x00')], meta={'tpusim.format': 'tpusim-checkpoint-v2'}))


# ---- checkpoint index --------------------------------------------------------------------
def index(steps, latest=None, fmt='tpusim-checkpoint-index', version=1):
    entries = [{'path': 'ckpt-%d.safetensors' % s, 'global_step': s} for s in steps]
    doc = {'format': fmt, 'version': version,
           'latest': entries[-1] if latest is None else latest, 'checkpoints': entries}
    return json.dumps(doc, indent=2)


def ckpt_index_seeds():
    put('ckpt_index', 'one.json', index([300]))
    put('ckpt_index', 'three.json', index([100, 200, 300]))
    put('ckpt_index', 'latest_not_last.json',
        index([100, 200], latest={'path': 'ckpt-100.safetensors', 'global_step': 100}))
    put('ckpt_index', 'step_mismatch.json',
        index([5], latest={'path': 'ckpt-5.safetensors', 'global_step': 6}))
    put('ckpt_index', 'version2.json', index([1], version=2))
    put('ckpt_index', 'duplicate.json', index([7, 7]))
    put('ckpt_index', 'big_step.json', index([9223372036854775807]))


# ---- model files (train --model FILE; configs/models/README.md) ----------------------------
def model_file_seeds():
    copy_dir('model_file', os.path.join(ROOT, 'configs', 'models'), ('.json',))

    def model(layers, inp=(8, 8, 2), loss='softmax_cross_entropy', **top):
        doc = {'input': list(inp), 'layers': layers, 'loss': loss}
        doc.update(top)
        return json.dumps(doc, indent=1)
    put('model_file', 'every_key.json', model([
        {'type': 'conv2d', 'filters': 4, 'kernel_size': [3, 1], 'strides': [2, 1],
         'padding': 'same', 'activation': 'relu', 'use_bias': False, 'name': 'c'},
        {'type': 'batch_norm', 'momentum': 0.9, 'epsilon': 1e-5, 'cross_replica': True},
        {'type': 'max_pool2d', 'pool_size': 2, 'strides': 1, 'padding': 'valid'},
        {'type': 'avg_pool2d', 'pool_size': [1, 2], 'padding': 'same'},
        {'type': 'dropout', 'rate': 0.25},
        {'type': 'reshape', 'target_shape': [1, 1, 12], 'name': 'r'},
        {'type': 'relu'},
        {'type': 'dense', 'units': 12, 'activation': 'linear'},
        {'type': 'add', 'inputs': ['dense', 'r']},
        {'type': 'global_avg_pool2d', 'inputs': ['c']},
        {'type': 'flatten'},
        {'type': 'dense', 'units': 3}], name='every_key', description='seed'))
    put('model_file', 'mse_vector.json',
        model([{'type': 'dense', 'units': 4}], inp=(16,), loss='mean_squared_error',
              output='dense'))
    put('model_file', 'forward_reference.json', model([
        {'type': 'relu', 'name': 'a', 'inputs': ['b']}, {'type': 'relu', 'name': 'b'}]))
    put('model_file', 'shape_error.json', model([
        {'type': 'conv2d', 'filters': 2, 'kernel_size': 9}, {'type': 'flatten'}]))
    put('model_file', 'unknown_key.json', model([{'type': 'dense', 'unit': 3}]))
    put('model_file', 'escapes_crlf.json',
        '{"input": [4],\r\n "layers": [{"type": "d\\u0065nse", "units": 2,'
        ' "name": "caf\\u00e9"}],\r\n "loss": "softmax_cross_entropy"}\r\n')


def partition_dims_seeds():
    # input_partition_dims text: the forms a user writes, and each error's neighbourhood
    for name, text in [
            ('features.txt', '[[1, 4, 1, 1]]'),
            ('features_labels.txt', '[[1, 2, 2, 1], None]'),
            ('tuples.txt', '( (1, 2) , (2, 1), )'),
            ('null_none.txt', '[[8], null]\n'),
            ('uneven.txt', '[[2, 4]]'),
            ('batch_split.txt', '[[4, 1, 2, 1, 1, 1, 1, 1]]'),
            ('plus.txt', '[[+2, 1]]'),
            ('zero.txt', '[[1, 0]]'),
            ('negative.txt', '[[1, -2]]'),
            ('huge.txt', '[[1, 99999999999999999999]]'),
            ('third.txt', '[[1], [1], [1]]'),
            ('features_none.txt', '[None, [1, 2]]'),
            ('empty_list.txt', '[]'),
            ('empty_entry.txt', '[[]]'),
            ('nine_counts.txt', '[[1, 1, 1, 1, 1, 1, 1, 1, 2]]'),
            ('float.txt', '[[1, 2.0]]'),
            ('mismatched.txt', '[[1, 2)]'),
            ('dict.txt', "[{'x': [1, 2]}]"),
            ('trailing.txt', '[[1, 2]] x')]:
        put('partition_dims', name, text)


def fit_options_seeds():
    # `tpusim fit` option values; the first byte picks the parser (byte % 5: 0 --class-weight
    # against 1 + (byte // 5) % 16 classes, 1 --validation-freq, 2 --early-stopping,
    # 3 --checkpoint-freq, 4 the ModelCheckpoint filepath, into 1 + (byte // 5) % 128 bytes
    # and 4096), then the text: the forms a user writes and each error's neighbourhood
    def cw(classes, text):
        return bytes([5 * (classes - 1)]) + text.encode()
    for name, data in [
            ('cw_two.txt', cw(2, '0:1,1:2.5')),
            ('cw_three_order.txt', cw(3, '2:0.5,0:1,1:1e1')),
            ('cw_twice.txt', cw(2, '0:1,0:2')),
            ('cw_missing.txt', cw(3, '0:1,2:1')),
            ('cw_negative.txt', cw(2, '0:1,1:-1')),
            ('cw_inf.txt', cw(2, '0:inf,1:nan')),
            ('cw_big_class.txt', cw(1, '65536:1')),
            ('cw_trailing.txt', cw(2, '0:1,1:2,')),
            ('vf_int.txt', b'\x01' + b'2'),
            ('vf_list.txt', b'\x01' + b'1,5,10,5'),
            ('vf_bracket.txt', b'\x01' + b'[3]'),
            ('vf_one_comma.txt', b'\x01' + b'3,'),
            ('vf_empty_bracket.txt', b'\x01' + b'[]'),
            ('vf_zero.txt', b'\x01' + b'0'),
            ('vf_too_many.txt', b'\x01' + ','.join(['1'] * 65).encode()),
            ('vf_huge.txt', b'\x01' + b'99999999999999999999999'),
            ('es_all.txt', b'\x02' + b'monitor=val_accuracy,min_delta=0.01,patience=3,mode=max,'
             b'baseline=0.5,restore_best_weights=true,start_from_epoch=2'),
            ('es_flag.txt', b'\x02' + b'restore_best_weights,patience=0'),
            ('es_unknown.txt', b'\x02' + b'verbose=1'),
            ('es_no_value.txt', b'\x02' + b'patience'),
            ('es_nan.txt', b'\x02' + b'min_delta=nan,baseline=inf'),
            ('es_long_monitor.txt', b'\x02' + b'monitor=' + b'm' * 80),
            ('es_empty.txt', b'\x02' + b',,='),
            ('ckf_epoch.txt', b'\x03' + b'epoch'),
            ('ckf_n.txt', b'\x03' + b'100'),
            ('ckf_max.txt', b'\x03' + b'1099511627776'),
            ('ckf_over.txt', b'\x03' + b'1099511627777'),
            ('ckf_sign.txt', b'\x03' + b'-5'),
            ('fp_keras.txt', bytes([254]) + b'ckpt/{epoch:02d}-{val_loss:.2f}'),
            ('fp_batch.txt', bytes([4]) + b'w.{epoch:03d}.{batch}.{loss:.4f}'),
            ('fp_escape.txt', bytes([9]) + b'{{literal}}/{accuracy:e}-{lr}'),
            ('fp_unknown.txt', bytes([14]) + b'{nothing}'),
            ('fp_open.txt', bytes([19]) + b'ckpt/{epoch'),
            ('fp_close.txt', bytes([24]) + b'ckpt/}x'),
            ('fp_spec.txt', bytes([29]) + b'{val_accuracy:>+020.3g}{epoch:x}{loss!r}'),
            ('fp_width.txt', bytes([34]) + b'{epoch:99999999999d}')]:
        put('fit_options', name, data)


def main():
    if os.path.isdir(SEEDS):
        shutil.rmtree(SEEDS)
    chip_config()
    run_config()
    program()
    topology()
    npy_seeds()
    idx_seeds()
    safetensors_seeds()
    ckpt_index_seeds()
    model_file_seeds()
    partition_dims_seeds()
    fit_options_seeds()
    for target in sorted(os.listdir(SEEDS)):
        print('%-12s %d seeds' % (target, len(os.listdir(os.path.join(SEEDS, target)))))


if __name__ == '__main__':
    main()
