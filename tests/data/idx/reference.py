#!/usr/bin/env python3
"""Reference values pinned in tests/test_dataset.c, computed here independently of the C code.

1. Fashion-MNIST, read with Python's gzip module from the Debian package
   dataset-fashion-mnist (or the directory given as the first argument): counts, first labels,
   byte sums of the first image and of all images.
2. tpu_dataset_shuffle's documented generator (SplitMix64 started at
   seed ^ first_output(epoch), Fisher-Yates from the top with rejection sampling), written
   from the description in include/tpusim/dataset.h.

Run: python3 tests/data/idx/reference.py [DIR]
"""
import gzip
import os
import struct
import sys

MASK = (1 << 64) - 1


def splitmix64(state):
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        yield z ^ (z >> 31)


def shuffle(n, seed, epoch):
    gen = splitmix64(seed ^ next(splitmix64(epoch)))
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        bound = i + 1
        while True:
            r = next(gen)
            if r < (1 << 64) - (1 << 64) % bound:
                break
        j = r % bound
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def fashion(directory):
    for part in ("train", "t10k"):
        with gzip.open(os.path.join(directory, part + "-images-idx3-ubyte.gz")) as f:
            images = f.read()
        with gzip.open(os.path.join(directory, part + "-labels-idx1-ubyte.gz")) as f:
            labels = f.read()
        magic, n, rows, cols = struct.unpack(">IIII", images[:16])
        print(f"{part}: magic 0x{magic:08x}, {n} images of {rows}x{cols}, "
              f"{len(labels) - 8} labels")
        print(f"  first labels {list(labels[8:18])}")
        print(f"  byte sum of image 0: {sum(images[16:16 + rows * cols])}")
        print(f"  byte sum of all images: {sum(images[16:])}")
        print(f"  sum of all labels: {sum(labels[8:])}")


if __name__ == "__main__":
    directory = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"
    if os.path.isdir(directory):
        fashion(directory)
    print("shuffle(60000, seed 42, epoch 0)[:10]:", shuffle(60000, 42, 0)[:10])
    print("shuffle(60000, seed 42, epoch 1)[:10]:", shuffle(60000, 42, 1)[:10])
    print("shuffle(10, seed 42, epoch 0):", shuffle(10, 42, 0))
    print("split: validation of 3 from 10, seed 7:", sorted(shuffle(10, 7, MASK)[:3]))
