//! Row softmax: `y[r, :] = softmax(x[r, :])` over a 2-D `[M, N]` view, in
//! float32 arithmetic for f32, f16 and bf16 storage.

pub mod ffi;
pub mod kernel;
pub mod launch;
