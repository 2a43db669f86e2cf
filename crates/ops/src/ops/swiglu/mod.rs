//! SwiGLU's gate: `y = silu(a) * b` elementwise over 2-D `[M, H]` views, forward and
//! backward, float32 arithmetic for f32, f16 and bf16 storage. `silu_and_mul(x)` is the
//! same op on the two halves of x's last dim (two views of one tensor, no copy).

pub mod ffi;
pub mod kernel;
pub mod launch;
