//! Attention with sinks (GPT-OSS style): causal flash attention over a KV cache with
//! grouped-query heads, an optional sliding window, a query offset `start_q` read on
//! the device, and one sink logit per head that joins the softmax denominator only.

pub mod ffi;
pub mod kernel;
pub mod launch;
