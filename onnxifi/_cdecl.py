"""The C declarations cffi's embedding mode needs, read from the headers the compiler reads.

`onnxifi._build` hands cffi two texts: ``cdef`` (the types Python touches and the C
helpers it calls) and ``embedding_api`` (the ``clglow_py_*`` functions Python
implements). Both are taken from C headers rather than written in Python: the types
from ``onnx/onnxifi.h`` (and ``csrc/onnxifi_clglow.h``), the functions from
``csrc/onnxifi_clglow_bridge.h``. See `cffi_declarations` for what could not be taken.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

HEADER = "onnxifi_clglow.h"
BRIDGE_HEADER = "onnxifi_clglow_bridge.h"
#: Macros of onnxifi.h that expand to attributes or calling conventions.
ABI_MACROS = ("ONNXIFI_ABI", "ONNXIFI_PUBLIC", "ONNXIFI_CHECK_RESULT")


def _strip_preprocessor(text: str) -> tuple[str, dict[str, str]]:
    """C text without comments, preprocessor lines and ``#ifdef __cplusplus`` blocks; and its #defines."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text).replace("\\\n", " ")
    defines: dict[str, str] = {}
    kept: list[str] = []
    skip = 0  # > 0 inside an `#ifdef __cplusplus` branch (its nesting depth)
    for line in text.splitlines():
        s = line.strip()
        if skip:
            if re.match(r"#\s*if", s):
                skip += 1
            elif re.match(r"#\s*endif", s):
                skip -= 1
            elif skip == 1 and re.match(r"#\s*(else|elif)", s):
                skip = 0
        elif re.match(r"#\s*(ifdef\s+__cplusplus|if\s+defined\s*\(?\s*__cplusplus)", s):
            skip = 1
        elif s.startswith("#"):
            m = re.match(r"#\s*define\s+(\w+)\s+(\S.*)$", s)
            if m:
                defines.setdefault(m.group(1), m.group(2).strip())
        else:
            kept.append(line)
    return "\n".join(kept), defines


def _statements(text: str) -> list[str]:
    """Top-level statements (ending in ``;`` outside braces), whitespace collapsed, ABI macros dropped."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == ";" and depth == 0:
            s = re.sub(r"\b(%s)\b" % "|".join(ABI_MACROS), "", text[start:i + 1])
            out.append(" ".join(s.split()))
            start = i + 1
    return out


def _declared_name(statement: str) -> Optional[str]:
    """The name a typedef or function declaration declares."""
    if statement.startswith("typedef "):
        m = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", statement) or re.search(r"(\w+)\s*(\[[^\]]*\])?\s*;$", statement)
    else:
        m = re.match(r"[\w\s\*]*?\b(\w+)\s*\(", statement)
    return m.group(1) if m else None


@dataclass
class CffiDeclarations:
    """What cffi is handed: ``cdef`` (types and the C helpers) and ``embedding_api`` (clglow_py_*)."""

    cdef: str
    embedding_api: str
    types_from: list[str] = field(default_factory=list)


def cffi_declarations(system_header: Optional[Path], source_dir: Path) -> CffiDeclarations:
    """cffi's declarations, taken from the headers the compiler reads.

    cffi parses C declarations without a preprocessor, so it cannot be pointed at
    ``onnxifi.h``; instead the header's text is reduced to what that parser accepts:
    comments, ``#include``/``#if`` lines and the ``extern "C"`` wrapper dropped, the
    ``ONNXIFI_ABI``/``ONNXIFI_PUBLIC``/``ONNXIFI_CHECK_RESULT`` macros removed (they
    expand to attributes cffi does not take; ONNXIFI_ABI is empty on every ABI this
    library builds for), and only its ``onnx*`` typedefs kept. What could not be taken
    from onnxifi.h: the trace-event structures (ONNX's headers lack Glow's extension
    types; they come from onnxifi_clglow.h, with ONNXIFI_TRACE_EVENT_NAME_SIZE, and
    every type when onnxifi.h is absent), and the function declarations, which are
    ours (onnxifi_clglow_bridge.h); the exported functions themselves are not declared
    to cffi, which would only wrap them for Python. cffi compiles a check of each
    struct's layout against the C compiler's, so a wrong reading fails the build.
    """
    texts = ([("onnxifi.h", system_header.read_text())] if system_header else []) + [
        (HEADER, (source_dir / HEADER).read_text())]
    types: dict[str, str] = {}
    defines: dict[str, str] = {}
    for _, text in texts:
        body, found = _strip_preprocessor(text)
        defines = {**found, **defines}
        for st in _statements(body):
            name = _declared_name(st)
            if st.startswith("typedef ") and name and name.startswith("onnx") and name not in types:
                types[name] = st
    used = set(re.findall(r"\b[A-Z_][A-Z0-9_]*\b", " ".join(types.values())))
    consts = [f"#define {n} {defines[n]}" for n in sorted(used & set(defines)) if re.fullmatch(r"\w+", defines[n])]
    bridge, _ = _strip_preprocessor((source_dir / BRIDGE_HEADER).read_text())
    funcs = [st for st in _statements(bridge) if not st.startswith("typedef ")]
    python_side = [f for f in funcs if (_declared_name(f) or "").startswith("clglow_py_")]
    c_side = [f for f in funcs if f not in python_side]
    return CffiDeclarations(cdef="\n".join(consts + list(types.values()) + c_side),
                            embedding_api="\n".join(python_side), types_from=[n for n, _ in texts])


