"""The package's version: a leaf module, so any module may show it without importing the package face."""

__version__ = "0.1.0"  # kept equal to pyproject.toml's version (a test checks)
