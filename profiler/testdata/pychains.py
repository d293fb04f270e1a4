# A Python program with known hot chains, for the sampler's tests: the main
# thread runs <module> -> main_top -> (through map, a C function) main_mid
# -> main_leaf, a second thread its own thread_top -> thread_mid ->
# thread_leaf. When both run it prints one JSON line: its pid, and per
# thread its native id and the addresses (id) of its hot functions' code
# objects, innermost first. It runs until killed.
import json
import os
import sys
import threading


def main_leaf(n):
    x = 0
    for i in range(n):
        x += i
    return x


def main_mid(n):
    return main_leaf(n)


def main_top():
    while True:
        list(map(main_mid, [20000]))


def thread_leaf(n):
    x = 0
    for i in range(n):
        x += i
    return x


def thread_mid(n):
    return thread_leaf(n)


def thread_top(ready):
    ready.append(threading.get_native_id())
    while True:
        thread_mid(20000)


ready = []
t = threading.Thread(target=thread_top, args=(ready,), daemon=True)
t.start()
while not ready:
    pass
print(json.dumps({
    "pid": os.getpid(),
    "version": "%d.%d" % sys.version_info[:2],
    "threads": [
        {"tid": threading.get_native_id(),
         "chain": [id(main_leaf.__code__), id(main_mid.__code__), id(main_top.__code__)],
         "module": id(sys._getframe().f_code)},
        {"tid": ready[0],
         "chain": [id(thread_leaf.__code__), id(thread_mid.__code__), id(thread_top.__code__)]},
    ],
}), flush=True)
main_top()
