//! RMSNorm over the rows of a 2-D `[M, N]` view: `y = x / sqrt(mean(x^2) + eps) * (w + offset)`,
//! forward (saving each row's rstd) and backward (dx, and dw through per-CTA partial sums),
//! float32 arithmetic for f32, f16 and bf16 storage.

pub mod ffi;
pub mod kernel;
pub mod launch;
