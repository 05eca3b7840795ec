"""``python -m onnxifi``: locate or build the C library, list backends.

  python -m onnxifi --library     absolute path of libonnxifi-clglow.so (built first if needed)
  python -m onnxifi --build       rebuild it now and print the path
  python -m onnxifi --build-dir   the folder with the library, the sources it was built from and
                                  cffi's glue (for a debugger), whether built yet or not
  python -m onnxifi --include     the folder holding onnxifi_clglow.h (extension types)
  python -m onnxifi               the backends and their devices
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onnxifi", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--library", action="store_true", help="print the library path, building it if needed")
    group.add_argument("--build", action="store_true", help="rebuild the library and print its path")
    group.add_argument("--build-dir", action="store_true",
                       help="print the folder of the library and the sources it is built from")
    group.add_argument("--include", action="store_true", help="print the folder of onnxifi_clglow.h")
    args = parser.parse_args(argv)
    if args.include:
        print(Path(__file__).resolve().parent / "csrc")
        return 0
    if args.build_dir:
        from . import _build

        print(_build.build_dir())
        return 0
    if args.library or args.build:
        from . import _build

        try:
            path = str(_build.build_library().resolve()) if args.build else _build.library_path()
        except Exception as e:  # a CLI reports, it does not dump a traceback
            print(f"error: cannot build the ONNXIFI library: {e}\n"
                  "It needs a C compiler, the Python headers and a shared libpython "
                  "(Debian: apt-get install gcc python3-dev).", file=sys.stderr)
            return 1
        print(path)
        return 0
    from . import api, constants as C
    from .types import Ref

    n = Ref(0)
    api.onnxGetBackendIDs(None, n)
    ids: list = [None] * int(n.value)
    if api.onnxGetBackendIDs(ids, n) != C.ONNXIFI_STATUS_SUCCESS or not ids:
        print("no ONNXIFI backends (no OpenCL device)")
        return 1
    for i, bid in enumerate(ids):
        size = Ref(1024)
        buf = bytearray(1024)
        api.onnxGetBackendInfo(bid, C.ONNXIFI_BACKEND_DEVICE, buf, size)
        print(f"backend {i}: {bytes(buf[: size.value - 1]).decode()}")
        api.onnxReleaseBackendID(bid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
