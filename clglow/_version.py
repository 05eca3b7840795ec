"""The package version, in a module of its own so that submodules can read it without importing
the package (whose __init__ imports the session, and so nearly everything)."""
__version__ = "0.1.0"
