#!/usr/bin/env bash
# The Python environment of the workshop hub: JupyterHub with its idle culler
# (hub/requirements.txt), JupyterLab, ipykernel and the course package, in a venv every local user
# can read and run. The hub runs from it as root; each learner's JupyterLab runs from it as the
# learner.
#
# Why not the project's .venv: a venv's bin/python is a link to the interpreter that made it. Where
# that interpreter lives under a home learners cannot enter (pyenv under /root, mode 0700, on the
# machine this was written on), the single-user server cannot even start as a learner. So this venv
# is made from an interpreter outside any home (Debian's /usr/bin/python3 by default; HUB_PYTHON=
# picks another) and the course is installed into it as a regular (non-editable) package, so
# learners need no access to the checkout either. The script checks that the user `nobody` can
# import everything before it says ready.
#
#   HUB_ENV=/opt/rmsnorm-hub/env hub/learner-env.sh
#                                   # a workshop machine (the default is build/hub/env)
#
# Rebuilt only when pyproject.toml, hub/requirements.txt, this script or the package's sources
# change (a stamp, like tools/setup-venv.sh). The course's extras: lab; gpu (PyCUDA) where an NVIDIA
# driver is present; NVIDIA's CUDA 13.0 nvcc/nvdisasm wheels where the system has none (the same
# rule as tools/setup-venv.sh).
set -euo pipefail
# everything made here is for every account to read and run, whatever the caller's umask (077
# made build/hub root's alone, and the learners' servers could not start)
umask 022
cd "$(dirname "$0")/.."
HUB_ENV=${HUB_ENV:-build/hub/env}
HUB_PYTHON=${HUB_PYTHON:-/usr/bin/python3}
HUB_ENV=$(realpath -m "$HUB_ENV")

if [ ! -x "$HUB_PYTHON" ]; then
    echo "learner-env: $HUB_PYTHON is missing:" \
         "set HUB_PYTHON to an interpreter every user can run" >&2
    exit 2
fi
extras="lab,progress"
if { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; } \
        || ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
    extras="$extras,gpu"
fi
wheels=""
cuda_wheels="nvidia-cuda-nvcc==13.0.* nvidia-cuda-crt==13.0.* nvidia-nvvm==13.0.*"
cuda_wheels="$cuda_wheels nvidia-cuda-runtime==13.0.* nvidia-cuda-cccl==13.0.*"
{ command -v nvcc >/dev/null 2>&1 || [ -x "${CUDA_HOME:-/nonexistent}/bin/nvcc" ]; } \
    || wheels="$cuda_wheels"
{ command -v nvdisasm >/dev/null 2>&1 || [ -x "${CUDA_HOME:-/nonexistent}/bin/nvdisasm" ] \
    || [ -x /usr/local/cuda/bin/nvdisasm ]; } || wheels="$wheels nvidia-cuda-nvdisasm>=13.0,<14"

sources=$(find rmsnorm_lessons kernels -type f \( -name '*.py' -o -name '*.cu' -o -name '*.cuh' \) \
          | LC_ALL=C sort)
stamp=$( { cat pyproject.toml hub/requirements.txt hub/learner-env.sh $sources
           echo "$HUB_PYTHON $extras $wheels"; } | sha1sum | cut -c1-16)
if [ -f "$HUB_ENV/.stamp-$stamp" ]; then
    echo "learner-env: $HUB_ENV is up to date"
    exit 0
fi
echo "learner-env: building $HUB_ENV with $HUB_PYTHON (extras: $extras)"
[ -x "$HUB_ENV/bin/python" ] || "$HUB_PYTHON" -m venv "$HUB_ENV"
"$HUB_ENV/bin/python" -m pip install -q --upgrade pip
# a fresh copy of the sources, so that pip's build folders land outside the checkout
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r pyproject.toml README.md LICENSE rmsnorm_lessons kernels notebooks "$src"/
rm -rf "$src"/rmsnorm_lessons/__pycache__ "$src"/*.egg-info
"$HUB_ENV/bin/python" -m pip install -q "$src[$extras]" -r hub/requirements.txt $wheels
"$HUB_ENV/bin/python" -m pip install -q --no-deps --force-reinstall "$src"
# JupyterLab's settings for the whole room: no news or update prompts (overrides.json, read by every
# learner's JupyterLab from the environment's share/jupyter/lab/settings)
mkdir -p "$HUB_ENV/share/jupyter/lab/settings"
cat > "$HUB_ENV/share/jupyter/lab/settings/overrides.json" <<'JSON'
{
  "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}
}
JSON
# every user reads and runs it (umask 077 elsewhere would leave it root's alone)
chmod -R a+rX "$HUB_ENV"
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    if ! out=$(cd / && MPLCONFIGDIR=/tmp runuser -u nobody -- "$HUB_ENV/bin/python" -c \
            "import jupyterhub, jupyterlab, ipykernel, numpy, matplotlib, rmsnorm_lessons" \
            2>&1); then
        echo "$out" >&2
        echo "learner-env: user nobody cannot import the course from $HUB_ENV:" \
             "every folder above it must be" \
             "executable by all (chmod a+x), and $HUB_PYTHON readable by all" >&2
        exit 3
    fi
fi
rm -f "$HUB_ENV"/.stamp-*
touch "$HUB_ENV/.stamp-$stamp"
echo "learner-env: ready ($HUB_ENV)"
