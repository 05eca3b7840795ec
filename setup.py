"""Package list for setuptools (metadata lives in pyproject.toml).

Why a setup.py: the kernels live in the top-level kernels_cl/ folder (plain .cl files,
valid as-is) and must ship inside the wheel as ``clglow.kernels_cl``; pyproject's
package discovery cannot add one remapped package next to discovered ones.
"""
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["clglow", "clglow.*", "onnxifi", "onnxifi.*"])
    + ["clglow.kernels_cl"],
    package_dir={"clglow.kernels_cl": "kernels_cl"},
)
