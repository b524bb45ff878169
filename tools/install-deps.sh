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
  # codegen's cache of compiled host kernels keys its entries by XXH3
  libxxhash-dev
  # runtime: reference BLAS and MPI for the CPU backend
  libopenblas-dev libopenmpi-dev openmpi-bin
  # tests: the Python references need python3 and pip (see below); f8c report's page is
  # rendered and checked in headless Chromium (tests/report/)
  python3 python3-pip chromium
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

# Python references the tests hold f8c against (never needed by the product itself): NumPy and
# ml_dtypes for the FP8 numerics, onnx (its descriptors check frontend/onnx/onnx.proto; its helper
# builds the loader tests' models), onnxruntime (runs those models, so a "good" one is good) and
# safetensors (Hugging Face's reference reader and writer of f8c's weight files).
python_refs=(numpy ml_dtypes onnx onnxruntime safetensors)
if ! python3 -c 'import numpy, ml_dtypes, onnx, onnxruntime, safetensors' 2>/dev/null; then
  echo "install-deps: installing Python references ${python_refs[*]}"
  python3 -m pip install --quiet --disable-pip-version-check "${python_refs[@]}" ||
    python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "${python_refs[@]}"
else
  echo "install-deps: Python references present"
fi

# The fuzz targets (tests/fuzz/) link libFuzzer from clang-19's runtime (libclang-rt-19-dev):
# check that a fuzzer links, so a missing piece shows here rather than as a build error later.
fuzz_check=$(mktemp -d)
trap 'rm -rf "$fuzz_check"' EXIT
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
  > "$fuzz_check/fuzz.c"
if clang-19 -fsanitize=fuzzer,address,undefined "$fuzz_check/fuzz.c" -o "$fuzz_check/fuzz" 2>"$fuzz_check/log" &&
  "$fuzz_check/fuzz" -runs=1 >/dev/null 2>&1; then
  echo "install-deps: clang-19 links libFuzzer"
else
  cat "$fuzz_check/log" >&2
  echo "install-deps: clang-19 cannot build a libFuzzer target (packages clang-19, libclang-rt-19-dev)" >&2
  exit 1
fi
