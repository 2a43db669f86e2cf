//! The GEMM kernels lower to Tile IR for every dtype, tile shape the heuristic uses
//! and operand layout, and assemble with tileiras for every architecture we ship for,
//! on a machine without a GPU.

mod common;

use common::ARCHS;
use cutile_ops::matmul::kernel::matmul_kernels::__module_ast_self;

const M: i32 = 1024;
const N: i32 = 2048;
const K: i32 = 512;
/// Row-major operands, then column-major ones (transposed views).
const LAYOUTS: [[(&str, [i32; 3]); 3]; 2] = [
    [("c", [M * N, N, 1]), ("a", [M * K, K, 1]), ("b", [K * N, N, 1])],
    [("c", [M * N, N, 1]), ("a", [M * K, 1, M]), ("b", [K * N, 1, K])],
];

fn lower_and_assemble(kernel: &str, generics: &[&str], layout: &[(&str, [i32; 3]); 3], archs: &[&str]) {
    let strides: Vec<(&str, &[i32])> = layout.iter().map(|(name, s)| (*name, &s[..])).collect();
    common::lower_and_assemble(__module_ast_self, "matmul_kernels", kernel, generics, &strides, archs);
}

#[test]
fn two_byte_gemm_lowers_for_every_architecture_layout_and_tile() {
    for dtype in ["f16", "bf16"] {
        for tile in [["128", "128", "64"], ["64", "64", "32"], ["16", "16", "16"]] {
            let generics = [dtype, tile[0], tile[1], tile[2]];
            for layout in &LAYOUTS {
                lower_and_assemble("gemm", &generics, layout, &ARCHS);
            }
        }
    }
}

#[test]
fn float32_gemm_lowers_in_full_precision_and_tf32() {
    for tile in [["64", "64", "32"], ["16", "16", "16"]] {
        for layout in &LAYOUTS {
            lower_and_assemble("gemm", &["f32", tile[0], tile[1], tile[2]], layout, &ARCHS);
            lower_and_assemble("gemm_tf32", &["f32", tile[0], tile[1], tile[2]], layout, &ARCHS);
        }
    }
}

#[test]
fn persistent_gemm_lowers_for_every_architecture() {
    // Grouped order: 8 row blocks of a column, then the next column; batches one by one.
    for (kernel, dtype) in [("gemm_persistent", "bf16"), ("gemm_persistent", "f16"), ("gemm_tf32_persistent", "f32")] {
        for layout in &LAYOUTS {
            lower_and_assemble(kernel, &[dtype, "128", "128", "64", "1", "8", "1"], layout, &ARCHS);
        }
    }
}

#[test]
fn clustered_gemm_assembles_for_the_architectures_with_clusters() {
    use cutile::compile_api::KernelCompiler;
    use cutile::tile_kernel::CompileOptions;

    let strides: Vec<(&str, &[i32])> = LAYOUTS[0].iter().map(|(name, s)| (*name, &s[..])).collect();
    for arch in ["sm_90", "sm_100", "sm_120"] {
        let artifacts = KernelCompiler::new(__module_ast_self, "matmul_kernels", "gemm")
            .generics(["bf16", "128", "128", "64"].map(String::from).to_vec())
            .strides(&strides)
            .options(CompileOptions::default().num_cta_in_cga(2))
            .target(arch)
            .compile()
            .unwrap_or_else(|e| panic!("gemm with 2 CTAs per cluster failed to lower for {arch}: {e}"));
        assert!(artifacts.ir_text().contains("num_cta_in_cga"), "the cluster hint must reach Tile IR");
        common::assemble(&format!("gemm_cga2_{arch}"), arch, &artifacts.bytecode().expect("bytecode"));
    }
}

/// The sm_90 SASS of a GEMM variant, from tileiras' cubin through the toolkit's cuobjdump
/// (beside tileiras, as pip's nvidia-cuda-cuobjdump installs it).
fn sm90_sass(kernel: &str, generics: &[&str], options: cutile::tile_kernel::CompileOptions) -> String {
    use cutile::compile_api::KernelCompiler;

    use cutile::cutile_compiler::specialization::compute_spec;

    let strides: Vec<(&str, &[i32])> = LAYOUTS[0].iter().map(|(name, s)| (*name, &s[..])).collect();
    // As a launch specializes: 256-byte aligned allocations, extents and strides as they are.
    let shapes = [("c", [1, M, N]), ("a", [1, M, K]), ("b", [1, K, N])];
    let specs: Vec<(&str, _)> = shapes
        .iter()
        .zip(&LAYOUTS[0])
        .map(|((name, shape), (_, st))| (*name, compute_spec(1 << 20, shape, st, 0)))
        .collect();
    let artifacts = KernelCompiler::new(__module_ast_self, "matmul_kernels", kernel)
        .generics(generics.iter().map(|g| g.to_string()).collect())
        .strides(&strides)
        .spec_args(&specs)
        .options(options)
        .target("sm_90")
        .compile()
        .unwrap_or_else(|e| panic!("{kernel}<{generics:?}> failed to lower for sm_90: {e}"));
    let tileiras = std::path::PathBuf::from(std::env::var("CUTILE_TILEIRAS_PATH").expect("CUTILE_TILEIRAS_PATH"));
    let dir = std::env::temp_dir().join(format!("sass_{}_{kernel}_{}", std::process::id(), generics.join("_")));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, cubin) = (dir.join("k.tilebc"), dir.join("k.cubin"));
    std::fs::write(&input, artifacts.bytecode().expect("bytecode")).unwrap();
    let run = std::process::Command::new(&tileiras)
        .args(["--gpu-name", "sm_90", "--opt-level", "3", "-o"])
        .arg(&cubin)
        .arg(&input)
        .output()
        .expect("run tileiras");
    assert!(run.status.success(), "tileiras: {}", String::from_utf8_lossy(&run.stderr));
    let cuobjdump = tileiras.with_file_name("cuobjdump");
    let dump = std::process::Command::new(&cuobjdump)
        .arg("-sass")
        .arg(&cubin)
        .output()
        .unwrap_or_else(|e| panic!("run {} (pip install nvidia-cuda-cuobjdump): {e}", cuobjdump.display()));
    assert!(dump.status.success(), "cuobjdump: {}", String::from_utf8_lossy(&dump.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8_lossy(&dump.stdout).into_owned()
}

#[test]
fn the_fitted_hopper_variants_use_hgmma_and_tma() {
    use cutile::tile_kernel::CompileOptions;

    // The variants the H100 fit picks for large products (python/tilegym_cutile_rs/tuned/matmul.json):
    // a config that loses the warpgroup MMA (HGMMA) or the TMA loads fails here, not on a GPU.
    let variants: [(&str, [&str; 7], CompileOptions); 3] = [
        (
            "gemm_persistent",
            ["bf16", "128", "256", "64", "1", "8", "1"],
            CompileOptions::default().num_worker_warps_per_cta(8),
        ),
        ("gemm_persistent", ["f16", "128", "128", "64", "1", "8", "1"], CompileOptions::default()),
        (
            "gemm_persistent",
            ["bf16", "256", "128", "64", "1", "8", "1"],
            CompileOptions::default().num_worker_warps_per_cta(8),
        ),
    ];
    for (kernel, generics, options) in variants {
        let sass = sm90_sass(kernel, &generics, options);
        assert!(sass.contains("HGMMA"), "{kernel}<{generics:?}>: no HGMMA in its sm_90 SASS");
        assert!(sass.contains("UTMALDG"), "{kernel}<{generics:?}>: no TMA load (UTMALDG) in its sm_90 SASS");
    }
}
