//! The softmax kernels lower to Tile IR bytecode for every dtype and variant, and
//! tileiras assembles them for sm_90, on a machine without a GPU.

mod common;

use cutile::compile_api::KernelCompiler;
use cutile_ops::softmax::kernel::softmax_kernels::__module_ast_self;

/// Lowers and assembles for sm_90, as the JIT does on the H200; returns the Tile IR text.
fn lower(kernel: &str, dtype: &str, generics: &[i32]) -> String {
    let generics: Vec<String> =
        std::iter::once(dtype.to_string()).chain(generics.iter().map(|g| g.to_string())).collect();
    let generics: Vec<&str> = generics.iter().map(String::as_str).collect();
    let strides: &[(&str, &[i32])] = &[("y", &[4096, 1]), ("x", &[4096, 1])];
    common::lower_and_assemble(__module_ast_self, "softmax_kernels", kernel, &generics, strides, &["sm_90"])
}

#[test]
fn single_tile_lowers_for_every_dtype() {
    for dtype in ["f32", "f16", "bf16"] {
        let ir = lower("softmax_row_tile", dtype, &[1, 4096]);
        assert!(ir.contains("neg_inf"), "loads must pad with -inf:\n{ir}");
    }
}

#[test]
fn loop_lowers_for_every_dtype() {
    for dtype in ["f32", "f16", "bf16"] {
        let ir = lower("softmax_row_loop", dtype, &[1, 1024, 33792]);
        assert!(ir.contains("for"), "expected a loop over column tiles:\n{ir}");
    }
}

#[test]
fn exact_width_kernels_lower_for_every_dtype() {
    for dtype in ["f32", "f16", "bf16"] {
        lower("softmax_row_tile_exact", dtype, &[1, 4096]);
        let ir = lower("softmax_row_loop_exact", dtype, &[1, 1024, 4096]);
        assert!(ir.contains("for"), "expected a loop over column tiles:\n{ir}");
    }
}

#[test]
fn gather_lowers_for_2_byte_dtypes() {
    for dtype in ["f16", "bf16"] {
        let ir = lower("softmax_row_gather", dtype, &[2, 1024]);
        assert!(ir.contains("load_ptr_tko"), "expected a masked gather:\n{ir}");
        let ir = lower("softmax_row_loop_gather", dtype, &[1, 8192, 24576]);
        assert!(ir.contains("load_ptr_tko") && ir.contains("for"), "expected masked gathers in a loop:\n{ir}");
    }
}

/// The warm-start index stores each kernel's hoisted launch checks as text: the
/// checks the compiler really emits for both kernels come back identical.
#[test]
fn real_launch_checks_survive_the_warm_start_codec() {
    for (kernel, generics) in
        [("softmax_row_tile", vec!["bf16", "4", "1024"]), ("softmax_row_loop", vec!["f32", "1", "4096", "12288"])]
    {
        let artifacts = KernelCompiler::new(__module_ast_self, "softmax_kernels", kernel)
            .generics(generics.iter().map(|g| g.to_string()).collect())
            .strides(&[("y", &[4096, 1]), ("x", &[4096, 1])])
            .target("sm_90")
            .compile()
            .unwrap_or_else(|e| panic!("{kernel} failed to lower: {e}"));
        let checks = artifacts.launch_checks().to_vec();
        assert!(!checks.is_empty(), "{kernel}: expected hoisted launch checks");
        let text = cutile_ops::entry::encode_checks(&checks);
        assert_eq!(cutile_ops::entry::decode_checks(&text).as_ref(), Some(&checks), "{kernel}:\n{text}");
    }
}

/// A row tile shared by a cluster (each CTA holding its part, tileiras reducing across the
/// cluster): vocabulary rows read once. Every architecture with clusters assembles them.
#[test]
fn cluster_shared_row_tiles_assemble_where_clusters_exist() {
    let strides: &[(&str, &[i32])] = &[("y", &[151936, 1]), ("x", &[151936, 1])];
    for (kernel, dtype, block_n, cga) in [
        ("softmax_row_tile", "bf16", "262144", 8),
        ("softmax_row_tile", "f32", "65536", 4),
        ("softmax_row_tile_exact", "bf16", "32768", 2),
    ] {
        common::lower_clustered(
            __module_ast_self,
            "softmax_kernels",
            kernel,
            &[dtype, "1", block_n],
            strides,
            cga,
            &["sm_90", "sm_100", "sm_120"],
        );
    }
    let gather: &[(&str, &[i32])] = &[("y", &[50257, 1]), ("x", &[50257, 1])];
    common::lower_clustered(
        __module_ast_self,
        "softmax_kernels",
        "softmax_row_gather",
        &["bf16", "1", "65536"],
        gather,
        4,
        &["sm_90"],
    );
}
