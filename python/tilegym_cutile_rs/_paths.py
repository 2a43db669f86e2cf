"""Where the package's built artefacts live (inside the installed package, nowhere else)."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
LIBRARY_NAME = "libcutile_kernels.so"
# Kernel developers may point at another build; the fingerprint check still applies.
LIBRARY_ENV = "TILEGYM_CUTILE_RS_LIBRARY"
