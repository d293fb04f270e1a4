# A pure-Python busy loop three calls deep: outer -> middle -> inner, inner
# hot. Prints its ready line (pyfixture.Ready) once the loop runs, then
# loops until killed or argv[1] seconds (default 120) have passed.
import json
import os
import sys
import time

DEADLINE = time.monotonic() + (float(sys.argv[1]) if len(sys.argv) > 1 else 120)
seen = []


def inner(n, probe=False):
    if probe:
        frame = sys._getframe()
        while frame is not None and frame.f_code.co_name != "<module>":
            # One line: the running frame's f_lasti and f_lineno are read
            # at two instructions, which must be of one line.
            lasti, line = frame.f_lasti, frame.f_lineno
            seen.append({"code": id(frame.f_code), "lasti": lasti, "line": line,
                         "func": frame.f_code.co_qualname})
            frame = frame.f_back
    total = 0
    for i in range(n):
        total += i * i
    return total


def middle(n, probe=False):
    return inner(n, probe) + 1


def outer():
    middle(10, probe=True)
    print(json.dumps({
        "pid": os.getpid(),
        "file": os.path.abspath(__file__),
        "codes": {f.__qualname__: id(f.__code__) for f in (inner, middle, outer)},
        "lines": seen,
    }), flush=True)
    while time.monotonic() < DEADLINE:
        middle(20000)


outer()
