#!/usr/bin/env python3
"""Reads a safetensors file with the Python standard library only, as an outside tool would,
and prints what it holds: one line per tensor in data order (name, dtype, shape, the first
three values and their bit patterns), the global step, the caller's metadata, and whether
tpusim's CRC-32 checksums (zlib.crc32) match.

It checks the format independently of tpusim's reader: 8-byte little-endian header length,
a JSON object starting with '{' (duplicate keys rejected), string-to-string __metadata__,
data_offsets relative to the data section that tile it exactly, sizes that match dtype and
shape, and tpusim's own convention of a header padded with spaces to a multiple of 8.
Exits 1 with a message on the first problem.

    python3 read_safetensors.py FILE
"""
import json
import struct
import sys
import zlib

SIZES = {"F32": 4, "BF16": 2, "I8": 1, "I32": 4}


def fail(msg):
    print("error: " + msg)
    sys.exit(1)


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        fail("duplicate key in the header")
    return dict(pairs)


def values(dtype, raw, count):
    if dtype == "F32":
        bits = struct.unpack("<%dI" % count, raw[: 4 * count])
        vals = struct.unpack("<%df" % count, raw[: 4 * count])
        return [repr(v) for v in vals], ["%08x" % b for b in bits]
    if dtype == "BF16":
        bits = struct.unpack("<%dH" % count, raw[: 2 * count])
        vals = [struct.unpack("<f", struct.pack("<I", b << 16))[0] for b in bits]
        return [repr(v) for v in vals], ["%04x" % b for b in bits]
    fmt = "<%db" % count if dtype == "I8" else "<%di" % count
    vals = struct.unpack(fmt, raw[: SIZES[dtype] * count])
    return [str(v) for v in vals], []


def main():
    if len(sys.argv) != 2:
        fail("usage: read_safetensors.py FILE")
    with open(sys.argv[1], "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail("shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        fail("header length %d exceeds the file" % n)
    text = blob[8 : 8 + n].decode("utf-8")
    if not text.startswith("{"):
        fail("header does not start with '{'")
    if n % 8 != 0:
        fail("header length %d is not a multiple of 8" % n)
    header = json.loads(text, object_pairs_hook=no_duplicates)
    meta = header.pop("__metadata__", {})
    for k, v in meta.items():
        if not isinstance(v, str):
            fail("metadata value of %s is not a string" % k)
    data = blob[8 + n :]
    tensors = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"])
    at = 0
    crc_ok = True
    for name, info in tensors:
        begin, end = info["data_offsets"]
        rows, cols = info["shape"]
        size = SIZES[info["dtype"]]
        if begin != at or end - begin != rows * cols * size:
            fail("tensor %s: data_offsets %s do not follow on at %d with %d bytes"
                 % (name, info["data_offsets"], at, rows * cols * size))
        if begin % size != 0:
            fail("tensor %s is not aligned to its element size" % name)
        raw = data[begin:end]
        if "%08x" % zlib.crc32(raw) != meta.get("tpusim.crc32." + name):
            crc_ok = False
        vals, bits = values(info["dtype"], raw, min(3, rows * cols))
        line = "%s %s [%d, %d] %s" % (name, info["dtype"], rows, cols, " ".join(vals))
        if bits:
            line += " | " + " ".join(bits)
        print(line)
        at = end
    if at != len(data):
        fail("the data section is %d bytes, the tensors cover %d" % (len(data), at))
    if "%08x" % zlib.crc32(data) != meta.get("tpusim.data_crc32"):
        crc_ok = False
    print("global_step " + meta.get("tpusim.global_step", "?"))
    for k in sorted(meta):
        if not k.startswith("tpusim."):
            print("meta %s=%s" % (k, meta[k]))
    print("checksums " + ("ok" if crc_ok else "MISMATCH"))


if __name__ == "__main__":
    main()
