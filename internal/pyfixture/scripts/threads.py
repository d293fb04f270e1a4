# Three threads, each running its own chain of three functions, the last
# one hot: alpha -> alpha_mid -> alpha_leaf, and beta's and gamma's alike.
# The ready line (pyfixture.Ready) adds "tids": each chain's thread id.
# Runs until killed or argv[1] seconds (default 120) have passed.
import json
import os
import sys
import threading
import time

DEADLINE = time.monotonic() + (float(sys.argv[1]) if len(sys.argv) > 1 else 120)
tids = {}
started = threading.Barrier(4)


def spin(n):
    total = 0
    for i in range(n):
        total += i ^ (i >> 3)
    return total


def alpha_leaf():
    return spin(5000)


def alpha_mid():
    return alpha_leaf()


def alpha():
    tids["alpha"] = threading.get_native_id()
    started.wait()
    while time.monotonic() < DEADLINE:
        alpha_mid()


def beta_leaf():
    return spin(5000)


def beta_mid():
    return beta_leaf()


def beta():
    tids["beta"] = threading.get_native_id()
    started.wait()
    while time.monotonic() < DEADLINE:
        beta_mid()


def gamma_leaf():
    return spin(5000)


def gamma_mid():
    return gamma_leaf()


def gamma():
    tids["gamma"] = threading.get_native_id()
    started.wait()
    while time.monotonic() < DEADLINE:
        gamma_mid()


functions = (spin, alpha_leaf, alpha_mid, alpha, beta_leaf, beta_mid, beta,
             gamma_leaf, gamma_mid, gamma)
threads = [threading.Thread(target=f, name=f.__name__) for f in (alpha, beta, gamma)]
for t in threads:
    t.start()
started.wait()
print(json.dumps({
    "pid": os.getpid(),
    "file": os.path.abspath(__file__),
    "codes": {f.__qualname__: id(f.__code__) for f in functions},
    "tids": tids,
}), flush=True)
for t in threads:
    t.join()
