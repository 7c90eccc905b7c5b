#!/usr/bin/env python3
"""Writes configs/models/resnet50.json and configs/models/resnet_small.json, tpusim model files
(the format is in README.md here) in graph form: every layer named, residual blocks joined by
"add" layers that name their two inputs.

resnet50.json: ResNet-50 v1.5 at ImageNet shapes (224 x 224 x 3, 1000 classes), as in
TensorFlow's official models and MLPerf: a 7x7/2 stem conv, a 3x3/2 max pool, bottleneck
blocks [3, 4, 6, 3] of 64/128/256/512 filters (x4 at the block's output), the stride of a
stage on the block's 3x3 conv (v1.5; v1 has it on the first 1x1), a 1x1 projection
shortcut in each stage's first block, batch norm after every conv (so the convs have no
bias), global average pooling and a dense layer of 1000. Layer names follow Keras's
keras.applications.ResNet50 (conv2_block1_1_conv, ...).

resnet_small.json: the same construction at Fashion-MNIST scale (28 x 28 x 1, 10 classes):
a 3x3 stem conv of 16, three stages of two basic blocks (two 3x3 convs) of 16/32/64 filters,
stride 2 and a 1x1 projection shortcut at the start of the second and third stages; batch
norm's momentum 0.9, so that its moving statistics settle within a short run.

Deterministic: running it again writes the same bytes.

    python3 configs/models/gen_resnet50.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


class Model:
    def __init__(self, bn_momentum=None):
        self.layers = []
        self.bn = {'momentum': bn_momentum} if bn_momentum is not None else {}

    def add(self, name, type_, inputs=None, **kw):
        layer = {'name': name, 'type': type_}
        layer.update(kw)
        previous = self.layers[-1]['name'] if self.layers else 'input'
        if inputs is not None and inputs != [previous]:  # the default: the layer before
            layer['inputs'] = inputs
        self.layers.append(layer)
        return name

    def conv_bn(self, name, x, filters, k, stride=1, relu=True, bn_name=None):
        """conv2d (no bias: batch norm follows) -> batch_norm [-> relu]; reads tensor x."""
        kw = {'filters': filters, 'kernel_size': k}
        if stride != 1:
            kw['strides'] = stride
        kw.update({'padding': 'same', 'use_bias': False})
        self.add(name + '_conv', 'conv2d', [x], **kw)
        y = self.add(bn_name or name + '_bn', 'batch_norm', **self.bn)
        if relu:
            y = self.add(name + '_relu', 'relu')
        return y


def bottleneck(m, x, prefix, filters, stride, project):
    shortcut = x
    if project:
        shortcut = m.conv_bn(prefix + '_0', x, 4 * filters, 1, stride, relu=False)
    y = m.conv_bn(prefix + '_1', x, filters, 1)
    y = m.conv_bn(prefix + '_2', y, filters, 3, stride)  # v1.5: the stride on the 3x3
    y = m.conv_bn(prefix + '_3', y, 4 * filters, 1, relu=False)
    m.add(prefix + '_add', 'add', [y, shortcut])
    return m.add(prefix + '_out', 'relu')


def basic(m, x, prefix, filters, stride, project):
    shortcut = x
    if project:
        shortcut = m.conv_bn(prefix + '_0', x, filters, 1, stride, relu=False)
    y = m.conv_bn(prefix + '_1', x, filters, 3, stride)
    y = m.conv_bn(prefix + '_2', y, filters, 3, relu=False)
    m.add(prefix + '_add', 'add', [y, shortcut])
    return m.add(prefix + '_out', 'relu')


def resnet50():
    m = Model()
    m.add('conv1_conv', 'conv2d', ['input'], filters=64, kernel_size=7, strides=2,
          padding='same', use_bias=False)
    m.add('conv1_bn', 'batch_norm')
    m.add('conv1_relu', 'relu')
    x = m.add('pool1_pool', 'max_pool2d', pool_size=3, strides=2, padding='same')
    for stage, (filters, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for b in range(blocks):
            stride = 2 if stage > 0 and b == 0 else 1
            x = bottleneck(m, x, 'conv%d_block%d' % (stage + 2, b + 1), filters, stride,
                           project=b == 0)
    m.add('avg_pool', 'global_avg_pool2d', [x])
    m.add('predictions', 'dense', units=1000)
    return {
        'name': 'resnet50',
        'description': 'ResNet-50 v1.5 (bottleneck blocks [3, 4, 6, 3], stride on the 3x3 '
                       'conv), batch norm after every conv; made by gen_resnet50.py',
        'input': [224, 224, 3],
        'layers': m.layers,
        'output': 'predictions',
        'loss': 'softmax_cross_entropy',
    }


def resnet_small():
    # batch norm's momentum 0.9 (PyTorch's 0.1 in Keras's terms), not Keras's 0.99: evaluation
    # normalizes with the moving statistics, and over a run of a few hundred steps those of
    # 0.99 lag the weights so far that the evaluation is near chance (benchmarks/RESULTS.md)
    m = Model(bn_momentum=0.9)
    x = m.conv_bn('stem', 'input', 16, 3)
    for stage, filters in enumerate([16, 32, 64]):
        for b in range(2):
            stride = 2 if stage > 0 and b == 0 else 1
            x = basic(m, x, 'stage%d_block%d' % (stage + 1, b + 1), filters, stride,
                      project=stage > 0 and b == 0)
    m.add('avg_pool', 'global_avg_pool2d', [x])
    m.add('predictions', 'dense', units=10)
    return {
        'name': 'resnet_small',
        'description': 'a small ResNet for 28x28x1: 3 stages of 2 basic residual blocks '
                       '(16/32/64 filters), batch norm; made by gen_resnet50.py',
        'input': [28, 28, 1],
        'layers': m.layers,
        'output': 'predictions',
        'loss': 'softmax_cross_entropy',
    }


def write(path, model):
    """One key per line at the top, one layer per line, so messages' line numbers point at a
    layer."""
    lines = ['{']
    for key in ('name', 'description', 'input'):
        lines.append('  %s: %s,' % (json.dumps(key), json.dumps(model[key])))
    lines.append('  "layers": [')
    for i, layer in enumerate(model['layers']):
        sep = ',' if i + 1 < len(model['layers']) else ''
        lines.append('    ' + json.dumps(layer) + sep)
    lines.append('  ],')
    lines.append('  "output": %s,' % json.dumps(model['output']))
    lines.append('  "loss": %s' % json.dumps(model['loss']))
    lines.append('}')
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')


if __name__ == '__main__':
    write(os.path.join(HERE, 'resnet50.json'), resnet50())
    write(os.path.join(HERE, 'resnet_small.json'), resnet_small())
