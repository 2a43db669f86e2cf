//! The SwiGLU kernels lower to Tile IR for every dtype and assemble with tileiras
//! for every architecture we ship for, on a machine without a GPU.

mod common;

use common::ARCHS;
use cutile_ops::swiglu::kernel::swiglu_kernels::__module_ast_self;

const H: i32 = 4096;

/// `exact`: whether the tile divides the rows and the columns (those axes load unmasked).
fn lower_and_assemble(kernel: &str, dtype: &str, tile: [i32; 2], exact: [i32; 2], strides: &[(&str, &[i32])]) {
    let [bm, bn, rx, cx] = [tile[0], tile[1], exact[0], exact[1]].map(|g| g.to_string());
    common::lower_and_assemble(
        __module_ast_self,
        "swiglu_kernels",
        kernel,
        &[dtype, &bm, &bn, &rx, &cx],
        strides,
        &ARCHS,
    );
}

#[test]
fn forward_lowers_for_every_dtype_and_architecture() {
    // silu_and_mul's halves: two views of one [M, 2H] tensor, row stride 2H; tiles whole on
    // both axes, on neither (Llama 2's 11008 in 1024-wide tiles, an odd M), and on one.
    for (dtype, exact) in [("f32", [1, 1]), ("f16", [0, 0]), ("bf16", [1, 1]), ("bf16", [1, 0]), ("bf16", [0, 1])] {
        lower_and_assemble(
            "swiglu_forward",
            dtype,
            [4, 1024],
            exact,
            &[("y", &[H, 1]), ("a", &[2 * H, 1]), ("b", &[2 * H, 1])],
        );
    }
}

#[test]
fn backward_lowers_for_every_dtype_and_architecture() {
    // dg as silu_and_mul's dx [M, 2H] seen as [M, 2, H].
    for (dtype, exact) in [("f32", [0, 0]), ("f16", [1, 1]), ("bf16", [1, 1]), ("bf16", [1, 0])] {
        let strides: &[(&str, &[i32])] =
            &[("dg", &[2 * H, H, 1]), ("dy", &[H, 1]), ("a", &[2 * H, 1]), ("b", &[2 * H, 1])];
        lower_and_assemble("swiglu_backward", dtype, [4, 1024], exact, strides);
    }
}

#[test]
fn a_tile_shared_by_a_cluster_assembles_where_clusters_exist() {
    // 11008 columns in a 16384-wide tile over two CTAs: the cut edge falls in the second.
    let strides: &[(&str, &[i32])] = &[("y", &[11008, 1]), ("a", &[22016, 1]), ("b", &[22016, 1])];
    common::lower_clustered(
        __module_ast_self,
        "swiglu_kernels",
        "swiglu_forward",
        &["bf16", "1", "16384", "1", "0"],
        strides,
        2,
        &["sm_90", "sm_100", "sm_120"],
    );
    let backward: &[(&str, &[i32])] =
        &[("dg", &[22016, 11008, 1]), ("dy", &[11008, 1]), ("a", &[22016, 1]), ("b", &[22016, 1])];
    common::lower_clustered(
        __module_ast_self,
        "swiglu_kernels",
        "swiglu_backward",
        &["bf16", "1", "16384", "1", "0"],
        backward,
        2,
        &["sm_90"],
    );
}
