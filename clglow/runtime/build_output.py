"""What the OpenCL driver says while it builds a program: to logging, never to the terminal.

Why this file exists: a build that succeeds with a non-empty log makes pyopencl warn
(``CompilerWarning: Non-empty compiler output encountered``), and pocl's clang prints its
summary ("2 warnings generated.") straight to the process's stderr file descriptor, under the
user's own output. clglow is a library: it logs, it never prints. Around each build
(`quiet_build`, used by runtime.cache and runtime.selection):

- pyopencl's CompilerWarning is ignored (the log itself is read from the program and logged at
  DEBUG by the caller, `program_log`);
- file descriptor 2 goes to a file of this process; when the last build in flight ends, the
  compiler's summary lines go to logging (DEBUG) and anything else written meanwhile (another
  thread's output, a driver's own message) is written back to stderr, late but whole.

Both are process-wide while any build runs (counted, so concurrent builds share one capture).
A process that dies inside a build (a driver crash) leaves its capture file behind: the next
clglow process logs what it holds as a warning (`report_leftovers`), so a crash message is
delayed, never lost.

Example::

    with quiet_build():
        prg.build(options=opts, devices=[dev], cache_dir=False)
    log.debug("build log: %s", program_log(prg, dev))
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import IO, Iterator, Optional

import pyopencl as cl

log = logging.getLogger(__name__)

_SUMMARY = re.compile(r"^\s*\d+ (warning|error)s?( and \d+ (warning|error)s?)? generated\.\s*$")
_PREFIX = "clglow-build-stderr-"

_lock = threading.Lock()
_depth = 0
_saved_fd: Optional[int] = None
_file: Optional[IO[bytes]] = None
_filter_item: Optional[tuple] = None


def _capture_dir() -> Path:
    return Path(tempfile.gettempdir())


def _capture_file() -> IO[bytes]:
    """This process's capture file (made once; removed at a normal exit)."""
    global _file
    if _file is None:
        path = _capture_dir() / f"{_PREFIX}{os.getpid()}.txt"
        _file = open(path, "w+b")  # noqa: SIM115 - kept open for the process's life
        atexit.register(_remove_capture_file, path)
    return _file


def _remove_capture_file(path: Path) -> None:
    try:
        if _file is not None:
            _file.close()
        path.unlink()
    except OSError:
        pass


def _start() -> None:
    """The first build in flight: ignore CompilerWarning, send fd 2 to the capture file."""
    global _saved_fd, _filter_item
    item = ("ignore", None, cl.CompilerWarning, None, 0)
    if item in warnings.filters:
        _filter_item = None  # the user's own filter: leave it where it is
    else:
        warnings.filterwarnings("ignore", category=cl.CompilerWarning)
        _filter_item = item
    try:
        f = _capture_file()
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        _saved_fd = saved
    except (OSError, ValueError, AttributeError) as e:  # no fd 2 (a daemon), a read-only temp dir
        log.debug("driver output during builds not captured: %s", e)
        _saved_fd = None


def _stop() -> bytes:
    """The last build in flight ended: restore fd 2 and the warning filters; what was written."""
    global _saved_fd, _filter_item
    with contextlib.suppress(ValueError):
        if _filter_item is not None:
            warnings.filters.remove(_filter_item)
    _filter_item = None
    if _saved_fd is None:
        return b""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.flush()
    os.dup2(_saved_fd, 2)
    os.close(_saved_fd)
    _saved_fd = None
    f = _file
    if f is None:
        return b""
    f.flush()
    f.seek(0)
    data = f.read()
    f.seek(0)
    f.truncate()
    return data


def _route(data: bytes) -> None:
    """The compiler's summary lines to logging, everything else back to stderr."""
    passthrough = []
    for line in data.decode("utf-8", "replace").splitlines(keepends=True):
        if _SUMMARY.match(line):
            log.debug("OpenCL compiler: %s", line.strip())
        else:
            passthrough.append(line)
    if passthrough:
        with contextlib.suppress(OSError):
            os.write(2, "".join(passthrough).encode("utf-8", "replace"))


@contextlib.contextmanager
def quiet_build() -> Iterator[None]:
    """Run an OpenCL build with the driver's output kept off the terminal (see the module)."""
    global _depth
    with _lock:
        if _depth == 0:
            _start()
        _depth += 1
    try:
        yield
    finally:
        data = b""
        with _lock:
            _depth -= 1
            if _depth == 0:
                data = _stop()
        if data:
            _route(data)


def program_log(prg: cl.Program, device: cl.Device) -> str:
    """The build log of `prg` on `device` ("" when the driver has none or cannot say)."""
    try:
        text = prg.get_build_info(device, cl.program_build_info.LOG)
    except Exception:  # noqa: BLE001 - a program without a build (or an old driver): no log
        return ""
    return str(text or "").strip()


def report_leftovers() -> None:
    """Log (WARNING) and remove the capture files of clglow processes that died during a build:
    what the driver printed before the crash."""
    try:
        leftovers = list(_capture_dir().glob(f"{_PREFIX}*.txt"))
    except OSError:
        return
    for path in leftovers:
        try:
            pid = int(path.stem[len(_PREFIX):])
        except ValueError:
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace").strip()
            path.unlink()
        except OSError:
            continue
        if text:
            log.warning("clglow process %d ended during an OpenCL build; the driver printed:\n%s", pid, text)


def _alive(pid: int) -> bool:
    if sys.platform == "win32":
        return True  # os.kill would end the process there: leave the file alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # another user's process (or no way to tell): leave its file alone
    return True


__all__ = ["quiet_build", "program_log", "report_leftovers"]
