//! Rotary position embedding, transformers' rotate-half layout, on q and k in one launch:
//! forward and (with the rotation inverted) backward, partial rotary factors, float32
//! arithmetic for f32, f16 and bf16 storage.

pub mod ffi;
pub mod kernel;
pub mod launch;
