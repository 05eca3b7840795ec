#!/usr/bin/env bash
# The prepared GPU check (issue: the GPU target), for a machine with a GPU and no package
# registry. Run from the repository root, with the wheels of benchmarks/gpu_wheels.sh in .whl/:
#
#     bash benchmarks/gpu_check.sh [OUT_DIR]
#
# 1. installs the carried wheels (pyopencl & co.) into a private folder on PYTHONPATH;
# 2. finds the GPU vendor's OpenCL library (NVIDIA: libnvidia-opencl.so.1 via ldconfig or the
#    driver folder /usr/local/nvidia) and registers it in an .icd file in $OCL_ICD_VENDORS;
# 3. lists the devices (`clglow devices`), runs the kernel tests on the GPU (quick subset),
#    `clglow tune` on ResNet-50 with a short budget, then ResNet-50 b1/b8 and SGEMM 4096^3 side
#    by side with PyTorch on CUDA (benchmarks/gpu_check.py) and prints the ratios.
# Each step has its own time limit, and one failing step does not stop the others.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${1:-${OUT:-/tmp/gpu_check}}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 CLGLOW_DEVICE="${CLGLOW_DEVICE:-gpu}"
PY="${PYTHON:-python3}"

# --- 1. wheels -----------------------------------------------------------------------------------
if ! "$PY" -c "import pyopencl" 2>/dev/null; then
    if ls .whl/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
            || { echo "gpu_check: installing the carried wheels failed"; exit 2; }
        export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    else
        echo "gpu_check: pyopencl is missing and no wheels in .whl/ (run benchmarks/gpu_wheels.sh where PyPI is reachable)"
        exit 2
    fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# --- 2. the vendor's OpenCL ICD -------------------------------------------------------------------
find_icd_lib() {
    local lib
    lib="$(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1/ {print $NF; exit}')"
    if [[ -z "$lib" ]]; then
        lib="$(find /usr/local/nvidia /usr/lib /usr/lib64 /usr/local/cuda* -name 'libnvidia-opencl.so.1' 2>/dev/null | head -n1)"
    fi
    echo "$lib"
}
lib="$(find_icd_lib)"
if [[ -n "$lib" ]]; then
    icd_dir="${OCL_ICD_VENDORS:-/tmp/clglow-icd}"
    [[ -d "$icd_dir" ]] || mkdir -p "$icd_dir"
    echo "$lib" > "$icd_dir/nvidia.icd"
    export OCL_ICD_VENDORS="$icd_dir"
    echo "gpu_check: registered $lib in $icd_dir/nvidia.icd"
else
    echo "gpu_check: no libnvidia-opencl.so.1 found; using the ICDs already registered"
fi
# pyopencl's wheel bundles an ICD loader that reads OCL_ICD_VENDORS too.

step() {  # step NAME SECONDS CMD...: run with a limit, log to $out/NAME.log, never stop the script
    local name="$1" limit="$2"; shift 2
    echo "=== $name (limit ${limit}s) ==="
    timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: rc=$rc ==="
}

step devices 120 "$PY" -m clglow devices
step kernel_tests 240 "$PY" -m pytest -q -x -p no:cacheprovider -m "not slow" tests/kernels
"$PY" - <<'PY'
import onnx
from benchmarks import models as M
onnx.save(M.load("resnet50", 1)[0], "/tmp/gpu_check_resnet50.onnx")
PY
step tune 200 "$PY" -m clglow tune /tmp/gpu_check_resnet50.onnx --budget 120
step compare 400 "$PY" -m benchmarks.gpu_check --repeat 20 --batches 1,8 --gemm 4096 --json "$out/gpu_check.json"
