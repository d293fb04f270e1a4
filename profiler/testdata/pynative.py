# A Python program with a native thread Python does not know: the shared
# library in argv[1] starts a pthread that spins in C (start_native returns
# its thread id). The main thread runs native_top -> native_leaf. Prints one
# JSON line as testdata/pychains.py does, the native thread's id under
# "native", then runs until killed.
import ctypes
import json
import os
import sys
import threading

native = ctypes.CDLL(sys.argv[1]).start_native
native.restype = ctypes.c_long


def native_leaf(n):
    x = 0
    for i in range(n):
        x += i
    return x


def native_top():
    while True:
        native_leaf(20000)


tid = native()
print(json.dumps({
    "pid": os.getpid(),
    "version": "%d.%d" % sys.version_info[:2],
    "native": tid,
    "threads": [{"tid": threading.get_native_id(),
                 "chain": [id(native_leaf.__code__), id(native_top.__code__)]}],
}), flush=True)
native_top()
