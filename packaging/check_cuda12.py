"""Compile every kernel of kernels/ with CUDA 12.9 (what a conda-forge user gets): NVRTC 12.9 to PTX for
sm_90, then ptxas 12.9 to a cubin. No GPU needed. NVIDIA's 12.x nvcc wheel has no nvcc driver, hence NVRTC:

    python3 -m venv /tmp/cu12 && /tmp/cu12/bin/pip install "nvidia-cuda-nvcc-cu12==12.9.*" \
        "nvidia-cuda-runtime-cu12==12.9.*" "nvidia-cuda-cccl-cu12==12.9.*" "nvidia-cuda-nvrtc-cu12==12.9.*"
    .venv/bin/python packaging/check_cuda12.py /tmp/cu12/lib/python3.*/site-packages/nvidia
"""
import ctypes, glob, subprocess, sys, os, tempfile
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from rmsnorm_lessons.core import ladder
SP = sys.argv[1]
lib = ctypes.CDLL(glob.glob(f"{SP}/cuda_nvrtc/lib/libnvrtc.so.12")[0])
major, minor = ctypes.c_int(), ctypes.c_int()
lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)); print(f"NVRTC {major.value}.{minor.value}")
ptxas = f"{SP}/cuda_nvcc/bin/ptxas"
print(subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1])
defines = {}
for v in ladder.VERSIONS:
    r = ladder.get(v); defines[v] = dict(r.defines)
ok = True
for path in sorted(glob.glob(f"{ROOT}/kernels/*.cu")):
    name = os.path.basename(path)[:-3]
    src = open(path).read().encode()
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, name.encode() + b".cu", 0, None, None) == 0
    opts = [b"--gpu-architecture=compute_90", b"-std=c++17", b"--use_fast_math", b"-default-device",
            f"-I{ROOT}/kernels".encode(), f"-I{SP}/cuda_runtime/include".encode(), f"-I{SP}/cuda_cccl/include".encode()]
    opts += [f"-D{k}={v}".encode() for k, v in defines.get(name, {}).items()]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)); log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    if rc != 0:
        ok = False; print(f"FAIL {name}: {log.value.decode()[:800]}"); continue
    lib.nvrtcGetPTXSize(prog, ctypes.byref(n)); ptx = ctypes.create_string_buffer(n.value); lib.nvrtcGetPTX(prog, ptx)
    with tempfile.TemporaryDirectory() as d:
        open(f"{d}/k.ptx", "wb").write(ptx.value)
        p = subprocess.run([ptxas, "-arch=sm_90", "-O3", f"{d}/k.ptx", "-o", f"{d}/k.cubin"], capture_output=True, text=True)
    print(f"{'ok  ' if p.returncode == 0 else 'FAIL'} {name:<16} NVRTC 12.9 -> PTX {len(ptx.value):>7} B, ptxas 12.9 sm_90 rc={p.returncode} {p.stderr.strip()[:200]}")
    ok &= p.returncode == 0
print("all kernels build with CUDA 12.9" if ok else "SOME FAILED")
sys.exit(0 if ok else 1)
