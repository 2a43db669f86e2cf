//! The rope kernel lowers to Tile IR for every dtype and assembles with tileiras for every
//! architecture we ship for, on a machine without a GPU.

mod common;

use common::ARCHS;
use cutile_ops::rope::kernel::rope_kernels::__module_ast_self;

#[test]
fn rope_lowers_for_every_dtype_and_architecture() {
    // Llama 3 8B (32 q heads, 8 kv heads, head_dim 128) in transformers' layout, and a partial
    // rotary factor (Qwen 3.5: a quarter of 256 dims rotated, the rest copied).
    // Head blocks: the whole tile in one step (32), and 8 heads a step (q in four, k in one).
    for (dtype, heads, block, d, half) in [
        ("f32", 32, 32, 128, 64),
        ("f16", 32, 8, 128, 64),
        ("bf16", 32, 32, 128, 64),
        ("bf16", 32, 8, 128, 64),
        ("bf16", 16, 16, 256, 32),
    ] {
        let (hq, dh) = (heads * d, d);
        let strides: &[(&str, &[i32])] = &[
            ("q_out", &[hq, d, 1]),
            ("k_out", &[8 * d, d, 1]),
            ("q", &[hq * 7, dh, hq, 1]),
            ("k", &[8 * d * 7, dh, 8 * d, 1]),
            ("cos", &[7 * d, d, 1]),
            ("sin", &[7 * d, d, 1]),
        ];
        let generics = [
            dtype,
            &heads.to_string(),
            "8",
            &block.to_string(),
            &block.min(8).to_string(),
            &d.to_string(),
            &half.to_string(),
        ];
        common::lower_and_assemble(__module_ast_self, "rope_kernels", "rope", &generics, strides, &ARCHS);
    }
}
