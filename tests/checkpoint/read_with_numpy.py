#!/usr/bin/env python3
"""Reads a dynemb checkpoint with numpy alone, as docs/checkpoint_format.md describes, and checks
every file's size and CRC32C against the manifest.

Usage: python3 tests/checkpoint/read_with_numpy.py CHECKPOINT_DIR
Prints each table's shape and the first rows; exit status 1 if a file does not verify.
"""
import json
import sys

import numpy as np

_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli), a table-driven pure-Python version (slow on large files)."""
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def manifest_checksum_ok(text: bytes) -> bool:
    """The manifest's own checksum: CRC32C of every byte before its last key, manifest_crc32c."""
    key = b'"manifest_crc32c"'
    at = text.rfind(key)
    if at < 0:
        return False
    rest = text[at + len(key):].strip()
    if not rest.startswith(b":") or not rest.endswith(b"}"):
        return False
    value = rest[1:-1].strip()
    return value.isdigit() and crc32c(text[:at]) == int(value)


def main(ckpt: str) -> int:
    text = open(f"{ckpt}/manifest.json", "rb").read()
    m = json.loads(text)
    ok = manifest_checksum_ok(text)
    if not ok:
        print("manifest.json: its own checksum (manifest_crc32c) does NOT verify")
    print(f"{m['kind']} checkpoint, format {m['format_version']}, world size {m['world_size']}")
    for t in m["tables"]:
        key_dtype = "<i8" if t["key_dtype"] == "int64" else "<u8"
        for shard in t["shards"]:
            files = shard["files"]

            def data(entry, dtype, width):
                a = np.fromfile(f"{ckpt}/{entry['path']}", dtype=dtype, offset=64)
                return a.reshape(-1, width) if width > 1 else a

            keys = data(files["keys"], key_dtype, 1)
            values = data(files["values"], "<f4", t["dim"])
            scores = data(files["scores"], "<u8", 1)
            print(f"  {t['name']} rank {shard['rank']}: keys {keys.shape}, values {values.shape}, "
                  f"scores {scores.shape}")
            if "optimizer_state" in files:
                state = data(files["optimizer_state"], "<f4", t["optimizer_state_dim"])
                print(f"    optimizer_state ({t['optimizer']}) {state.shape}")
            for i in range(min(2, len(keys))):
                print(f"    key {keys[i]} score {scores[i]} values {values[i][:4]}")
            for name, entry in files.items():
                raw = open(f"{ckpt}/{entry['path']}", "rb").read()
                good = len(raw) == entry["bytes"] and crc32c(raw[64:]) == entry["crc32c"]
                ok = ok and good
                if not good:
                    print(f"    {entry['path']}: does NOT verify")
    print("verified" if ok else "NOT verified")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
