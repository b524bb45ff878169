#!/bin/sh
# f8c's generated PTX kernels on a GPU: builds the cases here and says how the GPU run is made.
#
# Here (no GPU needed): builds make_kernel_cases and gpu_kernel_check (tests/gpu/), makes
#   BUILD/device/cases    one group for each kernel of gpt-tiny with and without FP8, of gpt-odd
#                         (odd shapes) and of a few groups of text IR at shapes that leave
#                         tiles part-way and accesses unaligned: PTX, inputs, reference outputs
#   BUILD/device/bench    gpt-1.3b's kernels (batch 8, seq 2048, FP8), each on every shape it
#                         runs: PTX and shapes, and the module assembled for sm_90
#                         (kernels.cubin, for cuobjdump)
#   BUILD/device/profile  the bench kernels worth a profile (LayerNorm with its codes and their
#                         transpose, the cross-entropy's segments, the LayerNorm gradient with
#                         its cast, GELU with its cast), for ncu
# and puts gpu_kernel_check beside them, checked to need nothing but glibc, libm and libcuda
# (the GPU machine has no LLVM and perhaps no libjansson). BUILD/device is what a GPU run
# carries; the commands it runs are printed last. Results go in tools/bench_kernels.md.
#
# usage: tools/bench_kernels.sh [BUILD_DIR]     (default: build-gpu)
#
# The build is Release at -O2: gcc 12's -O3 reports maybe-uninitialized false positives in
# frontend/onnx/onnx_ops.c and frontend/json/model_config.c, which F8C_WERROR makes errors.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
case $build in /*) ;; *) build=$root/$build ;; esac

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DF8C_WERROR=ON \
	"-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG" >/dev/null
cmake --build "$build" --target make_kernel_cases gpu_kernel_check -- -j 2

device=$build/device
rm -rf "$device"
mkdir -p "$device/cases" "$device/bench" "$device/profile"
"$build/tests/gpu/make_kernel_cases" "$root" "$device/cases" ||
	echo "bench_kernels.sh: the host JIT is off the reference (above); the cases are written" >&2
"$build/tests/gpu/make_kernel_cases" "$root" "$device/bench" --bench
cp "$build/tests/gpu/gpu_kernel_check" "$device/"

profile_kernels="norm_0 norm_1 cross_entropy_0 norm_grad_0 activation_0"
cp "$device/bench/kernels.ptx" "$device/profile/"
python3 - "$device" $profile_kernels <<'PY'
import json, sys
device, keep = sys.argv[1], sys.argv[2:]
manifest = json.load(open(device + "/bench/manifest.json"))
manifest["cases"] = [c for c in manifest["cases"]
		     if any(launch["kernel"] in keep for launch in c["launches"])]
json.dump(manifest, open(device + "/profile/manifest.json", "w"), indent=1)
PY
ptxas=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
"$ptxas" -arch=sm_90 "$device/bench/kernels.ptx" -o "$device/bench/kernels.cubin"

# The GPU program may need glibc (libdl with it), libm and libcuda, nothing else.
others=$(ldd "$device/gpu_kernel_check" | grep -v -E 'linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libcuda\.so' || true)
if [ -n "$others" ]; then
	echo "bench_kernels.sh: gpu_kernel_check needs more than glibc, libm and libcuda:" >&2
	echo "$others" >&2
	exit 1
fi
relative=${device#"$root"/}
echo "carried to the GPU machine: $(du -sh "$device" | cut -f1) in $relative"

cat <<EOF

The GPU run (the device tool's run, kind nvidia-h200, carry ["$relative"], timeout_s 300):
  cd $relative
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv
  ./gpu_kernel_check cases > \$OUT/check.txt 2>&1
  ./gpu_kernel_check --bench bench > \$OUT/bench.txt 2>&1
  for k in $profile_kernels; do
    ncu --clock-control none -k "regex:^\$k\\\$" -c 1 --section SpeedOfLight \\
      --section MemoryWorkloadAnalysis_Tables --metrics dram__bytes_read.sum,dram__bytes_write.sum \\
      ./gpu_kernel_check --bench profile >> \$OUT/ncu.txt 2>&1
    cuobjdump -sass -fun \$k bench/kernels.cubin >> \$OUT/sass.txt
  done
check.txt: one line per case and a summary (exit status 1 on any failure); bench.txt: the copy
bandwidth, one row per kernel, and the summary table that tools/bench_kernels.md records;
ncu.txt and sass.txt: what the notes there read the causes from.
EOF
