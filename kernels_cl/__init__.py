"""OpenCL C sources, shipped in the wheel as the package ``clglow.kernels_cl``."""
