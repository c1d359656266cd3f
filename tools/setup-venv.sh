#!/usr/bin/env bash
# Build .venv from nothing, or reuse it when nothing it depends on has changed.
# Installs the package (editable) with its test and lab extras; PyCUDA where an NVIDIA driver is
# present; NVIDIA's CUDA 13.0 nvcc wheels where no nvcc is on PATH or under CUDA_HOME.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}

has_driver() {
    { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; } \
        || ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'
}
has_nvcc() {
    command -v nvcc >/dev/null 2>&1 || [ -x "${CUDA_HOME:-/nonexistent}/bin/nvcc" ]
}
has_tool() {  # a CUDA binary tool on PATH, under CUDA_HOME or in /usr/local/cuda
    command -v "$1" >/dev/null 2>&1 || [ -x "${CUDA_HOME:-/nonexistent}/bin/$1" ] \
        || [ -x "/usr/local/cuda/bin/$1" ]
}

extras="test,lab"
has_driver && extras="$extras,gpu"
nvcc_wheels=""
cuda_wheels="nvidia-cuda-nvcc==13.0.* nvidia-cuda-crt==13.0.* nvidia-nvvm==13.0.*"
cuda_wheels="$cuda_wheels nvidia-cuda-runtime==13.0.* nvidia-cuda-cccl==13.0.*"
has_nvcc || nvcc_wheels="$cuda_wheels"
# nvdisasm for the SASS listings (rmsnorm_lessons.inspection.sass reads `nvdisasm -json`), from
# NVIDIA's wheel when the system has none. cuobjdump only for the tests: tests/test_sass.py compares
# the JSON's listing with cuobjdump's, which caught nvdisasm's JSON giving a kernel's subroutines as
# functions of their own
has_tool nvdisasm || nvcc_wheels="$nvcc_wheels nvidia-cuda-nvdisasm>=13.0,<14"
has_tool cuobjdump || nvcc_wheels="$nvcc_wheels nvidia-cuda-cuobjdump>=13.0,<14"

stamp_text="$(cat pyproject.toml tools/setup-venv.sh) extras=$extras wheels=$nvcc_wheels"
stamp=$(printf '%s' "$stamp_text" | sha1sum | cut -c1-16)
if [ -f "$VENV/.stamp-$stamp" ]; then
    exit 0
fi
echo "setup-venv: building $VENV (extras: $extras${nvcc_wheels:+; CUDA wheels: $nvcc_wheels})"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e ".[$extras]" $nvcc_wheels
rm -f "$VENV"/.stamp-*
touch "$VENV/.stamp-$stamp"
echo "setup-venv: ready"
