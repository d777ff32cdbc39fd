"""Maps the repository's top-level folders onto one importable package, ``mcf``.

spec/ -> mcf.spec, hw/ -> mcf.hw, sw/ -> mcf.sw, sim/ -> mcf.sim, boards/ -> mcf.boards,
so nothing claims generic top-level names such as ``sim`` in site-packages.
"""
from setuptools import find_packages, setup

ROOTS = {"mcf": "mcf", "mcf.spec": "spec", "mcf.hw": "hw", "mcf.sw": "sw",
         "mcf.sim": "sim", "mcf.boards": "boards"}

packages, package_dir = [], {}
for pkg, folder in ROOTS.items():
    package_dir[pkg] = folder
    packages.append(pkg)
    packages += [f"{pkg}.{sub}" for sub in find_packages(folder)]

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"": ["*.yaml", "*.json", "*.tcl", "*.xdc", "*.md", "*.sh", "*.v"]},
    include_package_data=True,
)
