"""The opt-in peers' wheels (Quack and what it needs) for a GPU machine with no package index.

    python lab/peer_wheels.py pack [--out .whl/peers] [--part-mb 40]      # here, where PyPI is reachable
    python lab/peer_wheels.py unpack [--from .whl/peers] [--target /tmp/peers-site]   # on the GPU machine

``pack`` downloads the wheels below for CPython 3.12 on manylinux x86_64 (the GPU machine's Python) into
``--out``. One of them, CUTLASS DSL's CUDA 13 library (about 92 MB: a single 193 MB shared object inside),
is larger than what one run may carry, so its files are repacked as an xz tar split into parts of at most
``--part-mb`` MB, with a manifest of every part's SHA-256 and the wheel's own RECORD.

``unpack`` installs the small wheels with ``pip install --no-index --no-deps --target``, joins the parts
(from ``--from`` and from ``--stash``, where an earlier run on the same machine left the parts it carried:
``unpack --stash-only`` just copies them there), unpacks them into the target and checks every file
against the wheel's RECORD (its SHA-256 and size). It then prints the PYTHONPATH to use: the target and
``nvidia_cutlass_dsl/dsl_packages`` inside it, the path nvidia-cutlass-dsl's ``.pth`` file would add (pip
``--target`` does not run ``.pth`` files).
"""
from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

BIG = "nvidia-cutlass-dsl-libs-cu13==4.8.1"
#: with the versions measured against (the GPU machine has torch, numpy and the CUDA runtime already)
SMALL = ("quack-kernels==0.6.5", "nvidia-cutlass-dsl==4.8.1", "nvidia-cutlass-dsl-libs-base==4.8.1",
         "nvidia-cutlass-dsl-libs-core==4.8.1", "apache-tvm-ffi==0.1.15.post2", "torch-c-dlpack-ext==0.1.5",
         "einops==0.8.2", "cuda-bindings==13.0.3", "protobuf==7.36.2", "typing-extensions==4.16.0")
PLATFORM = ("--python-version", "3.12", "--only-binary=:all:", "--implementation", "cp",
            *[a for p in ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_24_x86_64",
                          "manylinux_2_27_x86_64", "manylinux_2_28_x86_64") for a in ("--platform", p)])
MANIFEST = "big-wheel.json"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _download(requirements, out: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PLATFORM, "-d", str(out),
                    *requirements], check=True)


def pack(out: Path, part_mb: int) -> int:
    out.mkdir(parents=True, exist_ok=True)
    _download(SMALL, out)
    work = out / "big"
    work.mkdir(exist_ok=True)
    _download([BIG], work)
    (wheel,) = sorted(work.glob("*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        record_name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        buffer = io.BytesIO()
        with lzma.open(buffer, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w|") as tar:
            for info in zf.infolist():
                if info.is_dir():  # folders come with their files
                    continue
                data = zf.read(info)
                entry = tarfile.TarInfo(info.filename)
                entry.size = len(data)
                entry.mode = 0o755 if info.filename.endswith(".so") or "/bin/" in info.filename else 0o644
                tar.addfile(entry, io.BytesIO(data))
    blob = buffer.getvalue()
    size = part_mb * 1_000_000
    parts = []
    for k in range(0, len(blob), size):
        name = f"{wheel.stem}.tar.xz.part{k // size}"
        (out / name).write_bytes(blob[k:k + size])
        parts.append({"name": name, "sha256": _sha256(blob[k:k + size]), "bytes": len(blob[k:k + size])})
    (out / MANIFEST).write_text(json.dumps({"wheel": wheel.name, "wheel_sha256": _sha256(wheel.read_bytes()),
                                            "record": record_name, "parts": parts}, indent=1) + "\n")
    wheel_mb = wheel.stat().st_size / 1e6
    shutil.rmtree(work)
    print(f"{wheel.name}: {wheel_mb:.1f} MB as {len(parts)} xz part(s), "
          f"{len(blob) / 1e6:.1f} MB in all: " + ", ".join(f"{p['name']} {p['bytes'] / 1e6:.1f} MB" for p in parts))
    for w in sorted(out.glob("*.whl")):
        print(f"{w.name}: {w.stat().st_size / 1e6:.1f} MB")
    return 0


def _parts_here(manifest: dict, places) -> dict[str, Path]:
    found = {}
    for part in manifest["parts"]:
        for place in places:
            candidate = Path(place) / part["name"]
            if candidate.is_file() and _sha256(candidate.read_bytes()) == part["sha256"]:
                found[part["name"]] = candidate
                break
    return found


def check_record(target: Path, record_name: str) -> list[str]:
    """Files of the RECORD that are missing or differ under ``target`` (empty: every file as shipped)."""
    wrong = []
    with open(target / record_name, newline="") as f:
        for path, digest, size in csv.reader(f):
            if not digest:  # the RECORD itself
                continue
            algo, _, want = digest.partition("=")
            file = target / path
            if not file.is_file():
                wrong.append(f"{path}: missing")
                continue
            data = file.read_bytes()
            got = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()
            if got != want or (size and int(size) != len(data)):
                wrong.append(f"{path}: differs from the RECORD")
    return wrong


def unpack(source: Path, target: Path, stash: Path, stash_only: bool) -> int:
    manifest = json.loads((source / MANIFEST).read_text())
    stash.mkdir(parents=True, exist_ok=True)
    for name, path in _parts_here(manifest, [source]).items():
        if path.parent != stash:
            shutil.copyfile(path, stash / name)
    found = _parts_here(manifest, [stash])
    missing = [p["name"] for p in manifest["parts"] if p["name"] not in found]
    print(f"parts: {len(found)} of {len(manifest['parts'])} in {stash}" + (f"; missing {', '.join(missing)}"
                                                                          if missing else ""))
    if stash_only:
        return 0
    if missing:
        print("unpack: carry the missing parts (a second run on the same machine) and run unpack again",
              file=sys.stderr)
        return 1
    target.mkdir(parents=True, exist_ok=True)
    small = sorted(str(w) for w in source.glob("*.whl"))
    # for the GPU machine's Python whichever Python runs this (pip allows it with --target): a test here
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", *PLATFORM,
                    "--target", str(target), *small], check=True)
    blob = b"".join(found[p["name"]].read_bytes() for p in manifest["parts"])
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:xz") as tar:
        tar.extractall(target, filter="data")
    wrong = check_record(target, manifest["record"])
    if wrong:
        print(f"unpack: {len(wrong)} file(s) of {manifest['wheel']} are not as its RECORD says: "
              + "; ".join(wrong[:5]), file=sys.stderr)
        return 1
    extra = target / "nvidia_cutlass_dsl" / "dsl_packages"
    print(f"{manifest['wheel']}: every file matches its RECORD; {len(small)} small wheels installed")
    print(f"PYTHONPATH={target}:{extra}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="download and repack (where PyPI is reachable)")
    p.add_argument("--out", type=Path, default=Path(".whl/peers"))
    p.add_argument("--part-mb", type=int, default=40, help="largest part, in MB (default 40)")
    u = sub.add_parser("unpack", help="install into --target (on the GPU machine)")
    u.add_argument("--from", dest="source", type=Path, default=Path(".whl/peers"))
    u.add_argument("--target", type=Path, default=Path("/tmp/peers-site"))
    u.add_argument("--stash", type=Path, default=Path("/tmp/peers-parts"),
                   help="where parts carried by earlier runs on this machine wait (default /tmp/peers-parts)")
    u.add_argument("--stash-only", action="store_true", help="only keep the parts carried now, for a later run")
    args = parser.parse_args(argv)
    if args.command == "pack":
        if args.part_mb < 1:
            parser.error(f"--part-mb must be at least 1, got {args.part_mb}")
        return pack(args.out, args.part_mb)
    return unpack(args.source, args.target, args.stash, args.stash_only)


if __name__ == "__main__":
    sys.exit(main())
