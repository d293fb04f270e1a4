# A Python program whose one thread recurses argv[1] calls deep, then runs
# a busy loop there until killed; prints its pid when there, as the other
# scripts do (no chain: the benchmark only counts frames).
import json
import os
import sys


def down(n):
    if n > 0:
        return down(n - 1)
    print(json.dumps({"pid": os.getpid(), "threads": []}), flush=True)
    while True:
        x = 0
        for i in range(20000):
            x += i


down(int(sys.argv[1]))
