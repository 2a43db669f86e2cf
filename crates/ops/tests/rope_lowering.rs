//! The rope kernel lowers to Tile IR for every dtype and assembles with tileiras for every
//! architecture we ship for, on a machine without a GPU.

mod common;

use common::ARCHS;
use cutile_ops::rope::kernel::rope_kernels::__module_ast_self;

#[test]
fn rope_lowers_for_every_dtype_and_architecture() {
    // Llama 3 8B (32 q heads, 8 kv heads, head_dim 128) in transformers' layout, and a partial
    // rotary factor (Qwen 3.5: a quarter of 256 dims rotated, the rest copied).
    // Head blocks a CTA: every head in one (32 / 8), a quarter (8 / 2), an eighth (4 / 1); the
    // last two generics 1 where the block divides the heads (the head axis loads unmasked), 0
    // where the last block is partial (Qwen 2's 28 q heads in blocks of 32).
    for (dtype, tile_q, tile_k, d, half, exact_q, exact_k) in [
        ("f32", 32, 8, 128, 64, 1, 1),
        ("f16", 8, 2, 128, 64, 1, 1),
        ("bf16", 32, 8, 128, 64, 1, 1),
        ("bf16", 4, 1, 128, 64, 1, 1),
        ("bf16", 8, 2, 256, 32, 1, 1),
        ("bf16", 32, 4, 128, 64, 0, 1),
        ("f16", 8, 2, 256, 32, 0, 0),
    ] {
        let (hq, hk) = (32 * d, 8 * d);
        let strides: &[(&str, &[i32])] = &[
            ("q_out", &[hq, d, 1]),
            ("k_out", &[hk, d, 1]),
            ("q", &[hq * 7, d, hq, 1]),
            ("k", &[hk * 7, d, hk, 1]),
            ("cos", &[7 * d, d, 1]),
            ("sin", &[7 * d, d, 1]),
        ];
        let generics = [
            dtype,
            &tile_q.to_string(),
            &tile_k.to_string(),
            &d.to_string(),
            &half.to_string(),
            &exact_q.to_string(),
            &exact_k.to_string(),
        ];
        common::lower_and_assemble(__module_ast_self, "rope_kernels", "rope", &generics, strides, &ARCHS);
    }
}
