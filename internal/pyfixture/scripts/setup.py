# Functions whose frames run set-up instructions before their first
# traceable one (RESUME): one with a cell (MAKE_CELL), a closure
# (COPY_FREE_VARS), a generator (RETURN_GENERATOR), and a plain one with
# none. Prints their code objects' addresses and, by qualified name, the
# code unit of each one's first RESUME (CPython's _co_firsttraceable),
# then sleeps argv[1] seconds (default 120).
import dis
import json
import os
import sys
import time


def plain():
    return 1


def with_cell():
    x = 1

    def closure():
        return x
    return closure


def generator():
    yield 1


closure = with_cell()
funcs = (plain, with_cell, closure, generator)


def first_resume(code):
    for ins in dis.get_instructions(code):
        if ins.opname == "RESUME":
            return ins.offset // 2
    raise SystemExit(f"no RESUME in {code.co_qualname}")


print(json.dumps({
    "pid": os.getpid(),
    "file": os.path.abspath(__file__),
    "codes": {f.__qualname__: id(f.__code__) for f in funcs},
    "traceable": {f.__qualname__: first_resume(f.__code__) for f in funcs},
}), flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 120)
