# Prints, as JSON lines, the location table of every code object compiled
# from a few standard library modules and this file, with the line CPython
# gives each instruction (code.co_lines()), for the line-table decoder's
# test.
import json
import sys
import types


def codes(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from codes(const)


def weird(a, b):
    # Lines far apart, a negative jump back and columns past 127, to reach
    # the long and no-column forms.
    for i in range(a):
        if i % 2:                                                                                                                                               b += i
        else:
            b -= i




























    try:
        return b
    finally:
        a = None


sources = [__file__]
for name in ("json.decoder", "argparse", "asyncio.base_events", "typing"):
    module = __import__(name, fromlist=["_"])
    sources.append(module.__file__)

for path in sources:
    with open(path) as f:
        top = compile(f.read(), path, "exec")
    for code in codes(top):
        lines = [[start, end, line] for start, end, line in code.co_lines()]
        print(json.dumps({
            "name": code.co_qualname,
            "first": code.co_firstlineno,
            "table": code.co_linetable.hex(),
            "lines": lines,
        }))
