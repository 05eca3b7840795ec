"""The supported-operator tables, generated from the op registry: `python -m clglow.ops_table`
(ai.onnx) and `python -m clglow.ops_table com.microsoft` (onnxruntime's contrib ops).

Prints markdown: every ai.onnx operator of the installed onnx, or every com.microsoft operator
clglow knows (frontend/contrib_ops.py), with where clglow runs it (OpenCL kernel, host fallback
through onnx.reference or runtime/contrib_host.py, or neither). An OpenCL op may still decline
some attribute/dtype combinations (supports()); those nodes fall back to the host.
"""
from __future__ import annotations

import sys
from typing import Optional, TextIO

from onnx import defs


def _host_ok(op: str, domain: str, opset: int) -> bool:
    try:
        from onnx.reference.ops import load_op

        load_op(domain, op, opset)
        return True
    except Exception:
        return False


def rows(domain: str = "") -> list:
    """[(op, how it runs on OpenCL: "kernel", "body" (its function body's nodes) or "", on
    host)] for the latest schema of every op in `domain`."""
    from .frontend.functions import expands
    from .lower import REGISTRY

    latest: dict = {}
    for s in defs.get_all_schemas_with_history():
        if s.domain != domain or s.deprecated:
            continue
        if s.name not in latest or s.since_version > latest[s.name]:
            latest[s.name] = s.since_version
    out = []
    for op in sorted(latest):
        dev = "kernel" if (domain, op) in REGISTRY else "body" if expands(domain, op, latest[op]) else ""
        out.append((op, dev, _host_ok(op, domain, latest[op])))
    return out


def markdown(domain: str = "") -> str:
    lines = ["| Operator | OpenCL | Host fallback |", "|---|:---:|:---:|"]
    table = rows(domain)
    for op, dev, host in table:
        cell = {"kernel": "yes", "body": "yes (function body)"}.get(dev, "")
        lines.append(f"| {op} | {cell} | {'yes' if host else ''} |")
    n_dev = sum(1 for _, d, _ in table if d == "kernel")
    n_body = sum(1 for _, d, _ in table if d == "body")
    n_any = sum(1 for _, d, h in table if d or h)
    lines.append("")
    lines.append(f"{n_dev} of {len(table)} ai.onnx operators have an OpenCL kernel and {n_body} more run on OpenCL "
                 f"as their ONNX function body (frontend/functions.py); {n_any} run (OpenCL or host fallback).")
    return "\n".join(lines)


def contrib_rows() -> list:
    """[(op, on OpenCL, on host)] for every com.microsoft op in clglow's schema registry."""
    from .frontend.contrib_ops import DOMAIN, SCHEMAS
    from .lower import REGISTRY
    from .runtime.contrib_host import has_reference

    return [(op, (DOMAIN, op) in REGISTRY, has_reference(op)) for op in sorted(SCHEMAS)]


def contrib_markdown() -> str:
    """The com.microsoft table; any other contrib op is refused at load."""
    lines = ["| Operator (com.microsoft) | OpenCL | Host fallback |", "|---|:---:|:---:|"]
    table = contrib_rows()
    for op, dev, host in table:
        lines.append(f"| {op} | {'yes' if dev else ''} | {'yes' if host else ''} |")
    n_dev = sum(1 for _, d, _ in table if d)
    lines.append("")
    lines.append(f"{n_dev} of {len(table)} com.microsoft operators have an OpenCL kernel; any other com.microsoft "
                 f"operator is refused at load (UnsupportedOperator naming the node).")
    return "\n".join(lines)


def main(out: Optional[TextIO] = None, domain: str = "") -> None:
    text = contrib_markdown() if domain == "com.microsoft" else markdown()
    (out or sys.stdout).write(text + "\n")


if __name__ == "__main__":
    main(domain=sys.argv[1] if len(sys.argv) > 1 else "")
