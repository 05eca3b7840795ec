"""Lowering of gemm ops to OpenCL launches (see lower/base.py for the contract)."""
from __future__ import annotations
