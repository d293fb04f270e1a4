# Functions whose names take each kind of compact str: ASCII, Latin-1
# (one byte a character), UCS-2 and UCS-4, and a long qualified name.
# Prints its ready line (pyfixture.Ready) and sleeps until killed or
# argv[1] seconds (default 120) have passed.
import json
import os
import sys
import time


def plain():
    pass


def größe():
    pass


def 函数():
    pass


def 𐀀𐀁():
    pass


class Outer:
    class Inner:
        class Deeper:
            def method_with_a_rather_long_name_to_cross_the_first_read_of_a_string_object_that_the_reader_makes_at_its_address_so_that_a_second_read_brings_the_characters_that_follow_it(self):
                pass


deep = Outer.Inner.Deeper.method_with_a_rather_long_name_to_cross_the_first_read_of_a_string_object_that_the_reader_makes_at_its_address_so_that_a_second_read_brings_the_characters_that_follow_it
print(json.dumps({
    "pid": os.getpid(),
    "file": os.path.abspath(__file__),
    "codes": {f.__qualname__: id(f.__code__) for f in (plain, größe, 函数, 𐀀𐀁, deep)},
}), flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 120)
