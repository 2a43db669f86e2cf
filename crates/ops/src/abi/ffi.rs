//! The C vocabulary every export shares: dtype and status codes, the limits of
//! Tile IR's hint and block domains, `TensorDesc` and `CacheStats`. A leaf: cdef_gen
//! reads it (a file named `ffi.rs`) before the exports, so the generated manifest
//! declares these first; the exports are in the crate's `ffi.rs` and each op's.

/// Most dimensions a `TensorDesc` holds.
pub const CUTILE_MAX_DIMS: i32 = 5;

pub const CUTILE_DTYPE_F32: i32 = 0;
pub const CUTILE_DTYPE_F16: i32 = 1;
pub const CUTILE_DTYPE_BF16: i32 = 2;
pub const CUTILE_DTYPE_I32: i32 = 3;
pub const CUTILE_DTYPE_I64: i32 = 4;
pub const CUTILE_DTYPE_F8E5M2: i32 = 5;
pub const CUTILE_DTYPE_F4E2M1FNX2: i32 = 6;
pub const CUTILE_DTYPE_F8E4M3FN: i32 = 7;

pub const CUTILE_OK: i32 = 0;
pub const CUTILE_ERR_UNSUPPORTED_DTYPE: i32 = -2;
pub const CUTILE_ERR_LAUNCH_FAILED: i32 = -3;
pub const CUTILE_ERR_DEVICE_INIT: i32 = -4;
pub const CUTILE_ERR_NULL_POINTER: i32 = -5;
pub const CUTILE_ERR_INVALID_ARGUMENT: i32 = -6;
/// A Rust panic was caught at the ABI boundary.
pub const CUTILE_ERR_PANIC: i32 = -7;
/// The Tile IR toolchain (tileiras, ptxas, libNVVM) failed to compile a kernel.
pub const CUTILE_ERR_COMPILE_FAILED: i32 = -8;
/// A kernel variant is not among the shipped kernels and no toolchain is installed to compile it.
pub const CUTILE_ERR_NO_TOOLCHAIN: i32 = -9;

// The constants are plain literals: cffi's cdef takes `#define NAME NUMBER` only.

/// Largest tile edge an op compiles (2^16); tile edges are powers of two.
pub const CUTILE_MAX_BLOCK: i32 = 65536;
/// Largest CTAs-per-SM hint (`occupancy`) tileiras accepts; 0 leaves it to tileiras.
pub const CUTILE_MAX_OCCUPANCY: i32 = 32;
/// Most worker warps per CTA Tile IR defines (`warps`: 0 or a power of two up to this).
pub const CUTILE_MAX_WORKER_WARPS: i32 = 32;
/// Most CTAs in a cluster (CGA) a config may ask for (`cga`: 0, tileiras' choice, or a
/// power of two up to this); GPUs before sm_90 have no clusters.
pub const CUTILE_MAX_CTAS_IN_CGA: i32 = 16;
/// Worker-warp counts tileiras before 13.5 compiles, as a bit set (bit w: w warps):
/// 4 and 8. Later releases take every power of two up to `CUTILE_MAX_WORKER_WARPS`.
pub const CUTILE_WORKER_WARPS_BEFORE_TILEIRAS_13_5: i32 = 0x110;

const _: () = assert!(CUTILE_MAX_BLOCK == 1 << 16 && CUTILE_WORKER_WARPS_BEFORE_TILEIRAS_13_5 == (1 << 4) | (1 << 8));

/// A strided tensor as Python hands it over: `ptr` is a device address,
/// `shape` and `strides` (in elements) are valid for the first `ndim` entries.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TensorDesc {
    pub ptr: u64,
    pub ndim: i32,
    pub shape: [i64; 5],
    pub strides: [i64; 5],
    pub dtype: i32,
}

const _: () = assert!(CUTILE_MAX_DIMS as usize * 8 == std::mem::size_of::<[i64; 5]>());
const _: () = assert!(std::mem::size_of::<TensorDesc>() == 104);

/// Process-wide kernel cache counters (since the library was loaded).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheStats {
    /// Compiles served from the disk cache.
    pub hits: u64,
    /// Disk lookups that found nothing usable and ran tileiras.
    pub misses: u64,
    /// Entries written.
    pub puts: u64,
    pub bytes_written: u64,
    /// Cache I/O failures (each one only costs a recompile).
    pub io_errors: u64,
    /// tileiras runs that succeeded in this process, cached or not.
    pub tileiras_runs: u64,
    /// Kernels loaded from the warm-start index, with no lowering.
    pub warm_starts: u64,
    /// Launches replayed straight to the driver, past cutile's launcher (`crate::replay`).
    pub replays: u64,
    /// Kernels loaded from the shipped kernels (`crate::shipped`), with no lowering or tileiras.
    pub shipped: u64,
    /// First launches whose spec, derived as the shipped-kernel build derives it, named
    /// another kernel than cutile resolved (a bug: such launches cannot find their shipped kernel).
    pub spec_mismatches: u64,
}
