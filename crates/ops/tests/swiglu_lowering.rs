//! The SwiGLU kernels lower to Tile IR for every dtype and assemble with tileiras
//! for every architecture we ship for, on a machine without a GPU.

mod common;

use common::ARCHS;
use cutile_ops::swiglu::kernel::swiglu_kernels::__module_ast_self;

const H: i32 = 4096;

fn lower_and_assemble(kernel: &str, dtype: &str, tile: [i32; 2], strides: &[(&str, &[i32])]) {
    let (bm, bn) = (tile[0].to_string(), tile[1].to_string());
    common::lower_and_assemble(__module_ast_self, "swiglu_kernels", kernel, &[dtype, &bm, &bn], strides, &ARCHS);
}

#[test]
fn forward_lowers_for_every_dtype_and_architecture() {
    // silu_and_mul's halves: two views of one [M, 2H] tensor, row stride 2H.
    for dtype in ["f32", "f16", "bf16"] {
        lower_and_assemble(
            "swiglu_forward",
            dtype,
            [4, 1024],
            &[("y", &[H, 1]), ("a", &[2 * H, 1]), ("b", &[2 * H, 1])],
        );
    }
}

#[test]
fn backward_lowers_for_every_dtype_and_architecture() {
    // dg as silu_and_mul's dx [M, 2H] seen as [M, 2, H].
    for dtype in ["f32", "f16", "bf16"] {
        let strides: &[(&str, &[i32])] =
            &[("dg", &[2 * H, H, 1]), ("dy", &[H, 1]), ("a", &[2 * H, 1]), ("b", &[2 * H, 1])];
        lower_and_assemble("swiglu_backward", dtype, [4, 1024], strides);
    }
}
