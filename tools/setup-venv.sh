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
has_nvdisasm() {
    command -v nvdisasm >/dev/null 2>&1 || [ -x "${CUDA_HOME:-/nonexistent}/bin/nvdisasm" ] \
        || [ -x /usr/local/cuda/bin/nvdisasm ]
}

extras="test,lab"
has_driver && extras="$extras,gpu"
nvcc_wheels=""
has_nvcc || nvcc_wheels="nvidia-cuda-nvcc==13.0.* nvidia-cuda-crt==13.0.* nvidia-nvvm==13.0.* nvidia-cuda-runtime==13.0.* nvidia-cuda-cccl==13.0.*"
# nvdisasm for the SASS listings (rmsnorm_lessons.sass reads `nvdisasm -json`), from NVIDIA's wheel when
# the system has none; cuobjdump is not needed
has_nvdisasm || nvcc_wheels="$nvcc_wheels nvidia-cuda-nvdisasm>=13.0,<14"

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
