# A C extension's hot loop called from Python: argv[1] "zlib" runs
# compress_loop -> zlib.compress on a 4 MiB buffer, "sha256" runs hash_loop
# -> hashlib.sha256 over it. Prints its ready line (pyfixture.Ready), then
# loops until killed or argv[2] seconds (default 120) have passed.
import hashlib
import json
import os
import random
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "zlib"
DEADLINE = time.monotonic() + (float(sys.argv[2]) if len(sys.argv) > 2 else 120)
# Compressible but not trivially: random letters from a small alphabet,
# made in C (a loop in Python takes seconds on a busy machine).
ALPHABET = bytes(b"abcdefgh "[i % 9] for i in range(256))
BUF = random.Random(42).randbytes(4 << 20).translate(ALPHABET)


def compress_loop():
    import zlib
    while time.monotonic() < DEADLINE:
        zlib.compress(BUF, 9)


def hash_loop():
    while time.monotonic() < DEADLINE:
        hashlib.sha256(BUF).digest()


def main():
    loop = {"zlib": compress_loop, "sha256": hash_loop}[MODE]
    print(json.dumps({
        "pid": os.getpid(),
        "file": os.path.abspath(__file__),
        "codes": {f.__qualname__: id(f.__code__) for f in (compress_loop, hash_loop, main)},
    }), flush=True)
    loop()


main()
