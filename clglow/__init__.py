"""clglow: an ONNX executor on OpenCL."""
__version__ = "0.1.0"
