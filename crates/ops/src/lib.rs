//! Device kernels and C-ABI exports of every op, plus what they share: the
//! `TensorDesc` marshalling and error reporting ([`abi`]) and the per-device
//! CUDA state ([`runtime`]).
//!
//! Ops are discovered by `build.rs`: each `src/ops/<name>/mod.rs` becomes a
//! module here, with its C exports in `src/ops/<name>/ffi.rs` (the files the
//! cdef generator reads).

pub mod abi;
pub mod cache;
pub mod probe;
pub mod replay;
pub mod runtime;
pub mod warm_start;

include!(concat!(env!("OUT_DIR"), "/ops.rs"));
