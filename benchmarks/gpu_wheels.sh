#!/usr/bin/env bash
# Download, on a machine with PyPI, the wheels that benchmarks/gpu_check.sh needs on a GPU machine
# without a package registry (Python 3.12, x86-64 manylinux): pyopencl and what it imports that
# such a machine lacks. They land in .whl/ (git-ignored); carry that folder with the run.
#
#     bash benchmarks/gpu_wheels.sh [PYTHON_VERSION]     # default 3.12
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py="${1:-3.12}"
plats=()
for n in 17 24 27 28 31 34 35; do plats+=(--platform "manylinux_2_${n}_x86_64"); done
plats+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
mkdir -p .whl
for pkg in pyopencl pytools platformdirs siphash24; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
        "${plats[@]}" -d .whl "$pkg"
done
ls -l .whl
