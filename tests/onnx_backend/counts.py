"""Run the ONNX backend suite in both modes and print the counts.

    python tests/onnx_backend/counts.py            # node cases + model groups, both modes
    python tests/onnx_backend/counts.py -k Node    # extra pytest arguments are passed on

Mode 1: default (host fallback on). Mode 2: CLGLOW_HOST_FALLBACK=0 (every node on OpenCL;
nodes without a kernel are skipped as UnsupportedOperator).
"""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))


def run(mode_env: dict, extra: list) -> tuple:
    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "junit.xml")
        env = dict(os.environ, **mode_env)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", HERE, "-q", "-p", "no:cacheprovider",
                        f"--junitxml={xml}", *extra], env=env, stdout=subprocess.DEVNULL, check=False)
        wall = time.perf_counter() - t0
        counts: dict = collections.defaultdict(collections.Counter)
        for tc in ET.parse(xml).getroot().iter("testcase"):
            group = tc.get("classname", "").rsplit(".", 1)[-1]
            outcome = "passed"
            for child in tc:
                if child.tag in ("failure", "error"):
                    outcome = "failed"
                elif child.tag == "skipped":
                    outcome = "skipped"
            counts[group][outcome] += 1
    return counts, wall


def main() -> None:
    extra = sys.argv[1:]
    for label, env in (("host fallback on (default)", {}), ("CLGLOW_HOST_FALLBACK=0", {"CLGLOW_HOST_FALLBACK": "0"})):
        counts, wall = run(env, extra)
        print(f"## {label}: {wall:.0f} s")
        print("| group | passed | failed | skipped |")
        print("|---|---:|---:|---:|")
        for group in sorted(counts):
            c = counts[group]
            print(f"| {group} | {c['passed']} | {c['failed']} | {c['skipped']} |")
        print()


if __name__ == "__main__":
    main()
