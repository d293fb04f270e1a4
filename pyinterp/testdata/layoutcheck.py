# Reads this interpreter's own structures through the offsets given as JSON
# in argv[1] (a pyinterp.Layout) and prints, as JSON, each check made: what
# was read at the offset against what Python itself says it must be.
# Run by layout_test.go with each interpreter found.
import ctypes
import dis
import json
import sys
import threading

L = json.loads(sys.argv[1])
NO_OFFSET = 0xFFFFFFFF
NO_OWNER = 0xFF
checks = []


def check(name, got, want):
    checks.append({"name": name, "ok": got == want, "got": repr(got), "want": repr(want)})


def u64(a):
    return ctypes.c_uint64.from_address(a).value


def u32(a):
    return ctypes.c_uint32.from_address(a).value


def u8(a):
    return ctypes.c_uint8.from_address(a).value


api = ctypes.pythonapi
api.PyThreadState_Get.restype = ctypes.c_void_p
runtime = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))


def thread_state(tid):
    """The thread state whose native_thread_id is tid, found as the BPF
    program does: every interpreter's list of thread states."""
    interp = u64(runtime + L["runtime_interpreters_head"])
    while interp:
        ts = u64(interp + L["interp_threads_head"])
        while ts:
            if u64(ts + L["thread_native_id"]) == tid:
                return ts
            ts = u64(ts + L["thread_next"])
        interp = u64(interp + L["interp_next"])
    return 0


def chain():
    """The code objects of this thread's frames, innermost first, as the
    BPF program walks them: shim frames skipped (the frame above one is an
    entry frame), 3.11's is_entry read. Each item: (code, entry, offset)."""
    ts = thread_state(threading.get_native_id())
    if L["cframe_current_frame"] != NO_OFFSET:
        f = u64(u64(ts + L["thread_frame"]) + L["cframe_current_frame"])
    else:
        f = u64(ts + L["thread_frame"])
    out = []
    while f:
        owner = u8(f + L["frame_owner"])
        if L["owner_cstack"] != NO_OWNER and owner == L["owner_cstack"]:
            if out:
                out[-1] = (out[-1][0], True, out[-1][2])
            f = u64(f + L["frame_previous"])
            continue
        code = u64(f + L["frame_code"])
        entry = L["frame_is_entry"] != NO_OFFSET and u8(f + L["frame_is_entry"]) != 0
        instr = u64(f + L["frame_instr"])
        out.append((code, entry, instr - (code + L["code_adaptive"])))
        f = u64(f + L["frame_previous"])
    return out


# Thread states: this thread's, found by its native id.
for name, tid_of in [("main", None), ("thread", threading.Thread)]:
    got = {}

    def look():
        got["ts"] = thread_state(threading.get_native_id())
        got["want"] = api.PyThreadState_Get()

    if tid_of is None:
        look()
    else:
        t = tid_of(target=look)
        t.start()
        t.join()
    check(name + " thread state by native_thread_id", got["ts"], got["want"])


# Frames: module -> outer -> (through map, a C function) inner -> chain.
def inner(_):
    return chain()


def outer():
    return list(map(inner, [0]))[0]  # this line is firstlineno + 1


frames = outer()
# The innermost frame is u64's, the Python function that read the current
# frame.
codes = [c for c, _, _ in frames]
want = [id(u64.__code__), id(chain.__code__), id(inner.__code__), id(outer.__code__), id(sys._getframe().f_code)]
check("frame chain's code objects, innermost first, to the module's", codes, want)
# inner was called by map, from C: a new _PyEval_EvalFrameDefault call;
# the module's code too, by the interpreter's C code.
check("entry frames (u64, chain, inner, outer, module)", [e for _, e, _ in frames], [False, False, True, False, True])
# The instruction being run in outer is a CALL: its line is the call's.
off = frames[3][2] if len(frames) > 3 else -1
check("outer's instruction offset within its bytecode", 0 <= off < len(outer.__code__.co_code) and off % 2 == 0, True)
lines = {i.offset: i.positions.lineno for i in dis.get_instructions(outer.__code__, show_caches=True)}
check("outer's instruction is on its return line", lines.get(off), outer.__code__.co_firstlineno + 1)

# Code object fields.
code = outer.__code__
a = id(code)
check("co_qualname", u64(a + L["code_qualname"]), id(code.co_qualname))
check("co_name", u64(a + L["code_name"]), id(code.co_name))
check("co_filename", u64(a + L["code_filename"]), id(code.co_filename))
check("co_linetable", u64(a + L["code_linetable"]), id(code.co_linetable))
check("co_firstlineno", ctypes.c_int32.from_address(a + L["code_firstlineno"]).value, code.co_firstlineno)


def gen():
    yield 1


resume = [i.offset for i in dis.get_instructions(gen.__code__) if i.opname == "RESUME"][0]
check("_co_firsttraceable (a generator's RESUME)", u32(id(gen.__code__) + L["code_firsttraceable"]), resume // 2)
check("co_code_adaptive's first instruction", ctypes.string_at(id(gen.__code__) + L["code_adaptive"], 1), gen.__code__.co_code[:1])

# Strings and bytes.
ascii_s = "qualified_" + str(len(sys.argv))
s_id = id(ascii_s)
state = u32(s_id + L["unicode_state"])
check("ascii str: kind 1, compact, ascii", ((state >> 2) & 7, bool(state & 0x20), bool(state & 0x40)), (1, True, True))
check("ascii str: length", u64(s_id + L["unicode_length"]), len(ascii_s))
check("ascii str: data", ctypes.string_at(s_id + L["unicode_ascii_data"], len(ascii_s)), ascii_s.encode())
wide = "naïve_" + str(len(sys.argv))
w_id = id(wide)
state = u32(w_id + L["unicode_state"])
check("latin-1 str: kind 1, compact, not ascii", ((state >> 2) & 7, bool(state & 0x20), bool(state & 0x40)), (1, True, False))
check("latin-1 str: data", ctypes.string_at(w_id + L["unicode_compact_data"], len(wide)), wide.encode("latin-1"))
lt = code.co_linetable
check("bytes: ob_size", u64(id(lt) + L["bytes_size"]), len(lt))
check("bytes: data", ctypes.string_at(id(lt) + L["bytes_data"], len(lt)), lt)

print(json.dumps({"hexversion": sys.hexversion, "checks": checks}))
