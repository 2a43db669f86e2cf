//! GEMM: `c[i] = a[i] · b[i]` over batched 3-D views (`[B, M, K]` · `[B, K, N]`), float32
//! accumulation on tensor cores. `matmul` is the batch of one; either operand may be
//! row- or column-major (a transposed view) and is read in place.

pub mod ffi;
pub mod kernel;
pub mod launch;
