"""Exceptions raised by tilegym_cutile_rs. Each message names the problem and the fix."""

from __future__ import annotations


class CutileError(RuntimeError):
    """Base class of every tilegym_cutile_rs runtime failure."""


class LibraryError(CutileError):
    """libcutile_kernels.so is missing, cannot be loaded, or is not the one this package was built with."""


class ABIMismatchError(LibraryError):
    """The loaded library's declarations differ from the package's generated cdef manifest."""


class StaleLibraryError(LibraryError):
    """In an editable checkout, the library is older than the Rust sources it is built from."""


class ToolchainError(CutileError):
    """No consistent tileiras + ptxas + libNVVM was found, or it failed to compile a kernel."""


class ToolchainNotFoundError(ToolchainError):
    """No Tile IR toolchain is installed at all (as opposed to a broken one): the shipped
    kernels still run where the wheel has them for the GPU."""


class DeviceError(CutileError):
    """The CUDA driver or device could not be initialised."""


class KernelLaunchError(CutileError):
    """The driver refused or failed a kernel launch."""


class InternalError(CutileError):
    """A bug in tilegym_cutile_rs (a Rust panic caught at the C boundary)."""
