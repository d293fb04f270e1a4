# A multiprocessing pool whose workers are forked after the interpreter
# started, each running work -> crunch, crunch hot. The ready line
# (pyfixture.Ready) names the workers' pids. Runs until killed or argv[1]
# seconds (default 120) have passed.
import json
import multiprocessing
import os
import sys
import time

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 120


def crunch(n):
    total = 0
    for i in range(n):
        total += (i * 7) % 13
    return total


def work(deadline):
    while time.monotonic() < deadline:
        crunch(20000)
    return os.getpid()


if __name__ == "__main__":
    ctx = multiprocessing.get_context("fork")
    deadline = time.monotonic() + SECONDS
    with ctx.Pool(2) as pool:
        pending = pool.map_async(work, [deadline, deadline])
        print(json.dumps({
            "pid": os.getpid(),
            "file": os.path.abspath(__file__),
            "codes": {f.__qualname__: id(f.__code__) for f in (crunch, work)},
            "workers": [p.pid for p in pool._pool],
        }), flush=True)
        pending.get()
