# A multiprocessing pool of one worker, forked after the interpreter
# started: the worker prints, as testdata/pychains.py does, its pid and its
# hot chain (pool_leaf, pool_mid, pool_top: code objects at the parent's
# addresses, copied by the fork), then runs it until killed.
import json
import multiprocessing
import os
import sys
import threading


def pool_leaf(n):
    x = 0
    for i in range(n):
        x += i
    return x


def pool_mid(n):
    return pool_leaf(n)


def pool_top(_):
    print(json.dumps({
        "pid": os.getpid(),
        "version": "%d.%d" % sys.version_info[:2],
        "threads": [{"tid": threading.get_native_id(),
                     "chain": [id(pool_leaf.__code__), id(pool_mid.__code__), id(pool_top.__code__)]}],
    }), flush=True)
    while True:
        pool_mid(20000)


if __name__ == "__main__":
    with multiprocessing.get_context("fork").Pool(1) as pool:
        pool.map(pool_top, [0])
