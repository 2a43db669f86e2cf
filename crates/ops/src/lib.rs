//! Device kernels and C-ABI exports of every op, plus what they share: the
//! library's own C ABI ([`ffi`]), `TensorDesc` reading and error reporting
//! ([`abi`]), the launch protocol ([`launch`], with [`replay`] and
//! [`warm_start`]), the kernel cache ([`cache`]), the kernels shipped in the
//! wheel ([`shipped`]) and the per-device CUDA state ([`runtime`]).
//!
//! Ops are discovered by `build.rs`: each `src/ops/<name>/mod.rs` becomes a
//! module here, with its C exports in `src/ops/<name>/ffi.rs` (the files the
//! cdef generator reads, with this crate's `src/ffi.rs`).

pub mod abi;
pub mod cache;
pub mod entry;
pub mod ffi;
pub mod launch;
pub mod probe;
pub mod replay;
pub mod runtime;
pub mod shipped;
pub mod spec;
pub mod warm_start;

include!(concat!(env!("OUT_DIR"), "/ops.rs"));
include!(concat!(env!("OUT_DIR"), "/op_abi.rs"));
