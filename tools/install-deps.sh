#!/usr/bin/env bash
# Installs everything f8c needs to build and test on a fresh Debian 12 machine.
# Idempotent: packages already present are left as they are. Run as root (or with sudo).
#
# The CUDA Toolkit is not installed here: CMake finds it through FindCUDAToolkit
# (/usr/local/cuda on the project's machines); everything builds and tests without it.
set -euo pipefail

packages=(
  # build
  cmake gcc g++ make pkg-config git
  # frontends: ONNX through protobuf-c, JSON through jansson
  libprotobuf-c-dev protobuf-c-compiler libjansson-dev
  # codegen: LLVM-C for NVPTX and host kernels; clang for the fuzz targets
  llvm-19-dev clang-19 libclang-rt-19-dev
  # runtime: reference BLAS and MPI for the CPU backend
  libopenblas-dev libopenmpi-dev openmpi-bin
  # tests: the Python references need python3 and pip (see below)
  python3 python3-pip
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all Debian packages present"
fi

# Python references the tests hold f8c against (never needed by the product itself).
python_refs=(numpy ml_dtypes)
if ! python3 -c 'import numpy, ml_dtypes' 2>/dev/null; then
  echo "install-deps: installing Python references ${python_refs[*]}"
  python3 -m pip install --quiet --disable-pip-version-check "${python_refs[@]}" ||
    python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "${python_refs[@]}"
else
  echo "install-deps: Python references present"
fi
