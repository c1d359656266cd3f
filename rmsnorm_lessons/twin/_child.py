"""The child process that runs a kernel on the CPU twin: ``python _child.py PROGRAM RESULT``.

It imports nothing of the package (only NumPy-free standard modules): a learner's kernel that
crashes takes this process down, never the notebook. PROGRAM is a pickled dict (made by
:mod:`rmsnorm_lessons.twin.execute`): the library, the buffers with their first contents, the
launches, the calls, the seed and the time limit. RESULT receives the buffers named in ``read``,
the runtime's reports, each launch's block order and the accesses to the buffers named in
``trace`` (twin_trace.cpp). The runtime's watchdog (a timer signal) and
its crash handler write where each was to ``watch`` and end the process.
"""
import ctypes
import os
import pickle
import sys

POINTER, INT32, INT64, FLOAT, DOUBLE = "p", "i", "l", "f", "d"
TRACE_RECORD = 28  # bytes of one access of the trace (twin_trace.cpp: seven 32-bit words)


def main(program_file: str, result_file: str) -> int:
    with open(program_file, "rb") as f:
        prog = pickle.load(f)
    lib = ctypes.CDLL(prog["library"], mode=ctypes.RTLD_LOCAL)
    lib.twin_alloc.restype = ctypes.c_void_p
    lib.twin_alloc.argtypes = [ctypes.c_size_t, ctypes.c_char_p, ctypes.c_uint32]
    lib.twin_alloc_shared.restype = ctypes.c_void_p
    lib.twin_alloc_shared.argtypes = [ctypes.c_size_t]
    lib.twin_reports.restype = ctypes.c_char_p
    lib.twin_set_limit.argtypes = [ctypes.c_double, ctypes.c_int]
    lib.twin_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32,
                                ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int,
                                ctypes.c_void_p]
    watch = os.open(prog["watch"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    lib.twin_set_limit(float(prog["limit"]), watch)
    buffers = {}
    for b in prog["buffers"]:
        address = lib.twin_alloc(b["nbytes"], b["label"].encode(), b["elem"])
        if not address:
            raise MemoryError(f"the twin could not allocate {b['nbytes']} bytes for {b['name']}")
        buffers[b["name"]] = address
    lib.twin_trace_buffer.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    for k, name in enumerate(prog.get("trace", ())):  # their accesses are logged, by number k
        lib.twin_trace_buffer(buffers[name], k)
    entries = {}
    for kernel in {launch["kernel"] for launch in prog["launches"]}:
        sig = getattr(lib, f"twin_sig_{kernel}")
        sig.restype = ctypes.c_char_p
        entries[kernel] = (ctypes.cast(getattr(lib, f"twin_entry_{kernel}"), ctypes.c_void_p),
                           sig().decode())
    orders, status = [], 0
    for call in range(prog["calls"]):
        for b in prog["buffers"]:
            fill = b["fill"][call] if call < len(b["fill"]) else None
            if fill is not None:
                ctypes.memmove(buffers[b["name"]], fill, b["nbytes"])
        for k, launch in enumerate(prog["launches"]):
            status = _launch(lib, launch, entries[launch["kernel"]], buffers,
                             prog["seed"] + 7919 * k + 104729 * call, prog["hazards"], orders)
            if status:
                break
        if status:
            break
    lib.twin_switches.restype = ctypes.c_uint64
    result = {"status": status, "reports": lib.twin_reports().decode(errors="replace"),
              "orders": orders, "buffers": {}, "switches": lib.twin_switches()}
    if prog.get("trace"):
        for fn, kind in (("twin_trace_count", ctypes.c_size_t),
                         ("twin_trace_dropped", ctypes.c_size_t),
                         ("twin_trace_data", ctypes.c_void_p)):
            getattr(lib, fn).restype = kind
        count = lib.twin_trace_count()
        result["trace"] = ctypes.string_at(lib.twin_trace_data(), count * TRACE_RECORD) \
            if count else b""
        result["trace_dropped"] = lib.twin_trace_dropped()
    for name in prog["read"]:
        b = next(b for b in prog["buffers"] if b["name"] == name)
        result["buffers"][name] = ctypes.string_at(buffers[name], b["nbytes"])
    with open(result_file, "wb") as f:
        pickle.dump(result, f)
    return 0


def _launch(lib, launch, entry, buffers, seed, hazards, orders) -> int:
    function, signature = entry
    args = launch["args"]
    if len(signature) != len(args):
        raise TypeError(f"{launch['kernel']} takes {len(signature)} parameters, the plan passes "
                        f"{len(args)}")
    cells = []
    for kind, (what, value) in zip(signature, args):
        if kind == POINTER:
            if what != "buffer":
                raise TypeError(f"{launch['kernel']}: a pointer parameter got {what} {value!r}")
            cells.append(ctypes.c_void_p(buffers[value]))
        elif what == "buffer":
            raise TypeError(f"{launch['kernel']}: a {kind} parameter got the buffer {value!r}")
        else:
            cells.append({INT32: ctypes.c_int32, INT64: ctypes.c_int64, FLOAT: ctypes.c_float,
                          DOUBLE: ctypes.c_double}[kind](value))
    argv = (ctypes.c_void_p * max(1, len(cells)))(*[ctypes.addressof(c) for c in cells])
    shared = launch["shared"]
    shared_buf = lib.twin_alloc_shared(max(shared, 1))
    order = (ctypes.c_uint32 * launch["grid"])()
    status = lib.twin_launch(function, argv, launch["grid"], launch["block"], shared_buf, shared,
                             seed, 1 if hazards else 0, order)
    orders.append(list(order))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
