"""``python -m rmsnorm_lessons bench``: the copy yardstick, then shape by shape the versions and the
peers, each shape's rows printed (and written to the JSON file) as soon as they are measured, with a
line of progress; torch.compile's shapes compiled ahead in other processes meanwhile
(:mod:`peer_compile`)."""
from __future__ import annotations

import json
import sys
import time

from .core import gpu, ladder
from .speed import bench, peer_compile, peers


def torch_imports() -> bool:
    try:
        import torch  # noqa: F401  (lazy: torch is optional and slow to import)
    except ImportError:
        return False
    return True


def compile_ahead(shapes, peer_names):
    """torch.compile's shapes compiled in other processes while the versions are timed (where that
    peer is asked for and can run), or None."""
    if not any(name in peer_compile.AHEAD and peers.why_unavailable(name) is None
               for name in peer_names):
        return None
    ahead = peer_compile.Ahead(shapes)
    print(f"bench: compiling torch.compile's {len(ahead.futures)} shapes ahead in "
          f"{ahead.workers} processes", file=sys.stderr, flush=True)
    return ahead


def run(args, versions=None) -> int:
    """``bench``'s command: ``args`` as the command line parsed them, ``versions`` the rungs named
    (None: every rung)."""
    gpu.require()
    shapes = list(args.shapes or bench.SHAPES)
    want_peers = bool(args.peer_names) or (torch_imports() if args.peers is None else args.peers)
    peer_names = args.peer_names or list(peers.PEERS)
    # peers overwrite dinp: compare so
    overwrite = want_peers if args.overwrite is None else args.overwrite
    yardstick = bench.copy_yardstick()
    copy_gbps, results = yardstick.gbps, []
    print(yardstick, flush=True)

    def write_json():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(bench.records(results, baseline="v6_last_block", overwriting=peer_names),
                          f, indent=1)

    # shape by shape: each shape's rows are printed (and on disk) as soon as they are measured
    names = [bench.overwrite_name(v) for v in (versions or ladder.VERSIONS)] + peer_names
    width = max(len(n) + 1 for n in names + [bench.STREAM_NAME + bench.OVERWRITE_SUFFIX])
    started = time.perf_counter()
    ahead = compile_ahead(shapes, peer_names) if want_peers else None
    try:
        for done, shape in enumerate(shapes, 1):
            inputs = {}  # the shape's problem: the versions' checks and the peers' share it
            rows = bench.sweep(versions, [shape], repeats=args.repeats, copy_gbps=copy_gbps,
                               overwrite=overwrite, ceiling=args.ceiling, show_progress=False,
                               inputs=inputs)
            if want_peers:
                rows += peers.sweep([shape], names=peer_names, repeats=args.repeats,
                                    copy_gbps=copy_gbps, wall_times=True, show_progress=False,
                                    inputs=inputs, ahead=ahead)
            results += rows
            print(bench.table(rows, baseline="v6_last_block", overwriting=peer_names,
                              width=width, header=done == 1), flush=True)
            write_json()
            spent = time.perf_counter() - started
            left = (f", about {spent / done * (len(shapes) - done):.0f} s left"
                    * (done < len(shapes)))
            print(f"bench: {done}/{len(shapes)} shapes in {spent:.0f} s{left}", file=sys.stderr,
                  flush=True)
    finally:
        if ahead is not None:
            ahead.close()
    if want_peers:
        mine = [r.name for r in results if r.name not in peers.ALL_PEERS]
        for name in dict.fromkeys(mine):
            lines = bench.against(results, name, peer_names)
            if lines:
                print(f"{name} against the fastest peer:\n{lines}")
    if args.json:
        print(f"wrote {args.json}")
    if args.plot:
        from .course import plots  # lazy: plots imports matplotlib

        plots.bandwidth_bars(results, copy_gbps).savefig(args.plot, dpi=plots.DPI)
        print(f"wrote {args.plot}")
    return 0
