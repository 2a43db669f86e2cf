//! The GEMM kernels lower to Tile IR for every dtype, tile shape the heuristic uses
//! and operand layout, and assemble with tileiras for every architecture we ship for,
//! on a machine without a GPU.

use cutile::compile_api::KernelCompiler;
use cutile_ops::matmul::kernel::matmul_kernels::__module_ast_self;

const ARCHS: [&str; 4] = ["sm_80", "sm_90", "sm_100", "sm_120"];
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
    for arch in archs {
        let artifacts = KernelCompiler::new(__module_ast_self, "matmul_kernels", kernel)
            .generics(generics.iter().map(|g| g.to_string()).collect())
            .strides(&strides)
            .target(arch)
            .compile()
            .unwrap_or_else(|e| panic!("{kernel}<{generics:?}> failed to lower for {arch}: {e}"));
        let bytecode = artifacts.bytecode().expect("bytecode");
        assemble(&format!("{kernel}_{}_{arch}", generics.join("_")), arch, &bytecode);
    }
}

/// tileiras runs without a GPU: a kernel it rejects for some architecture fails here.
fn assemble(name: &str, arch: &str, bytecode: &[u8]) {
    let tileiras = std::env::var("CUTILE_TILEIRAS_PATH").expect(
        "CUTILE_TILEIRAS_PATH must name tileiras 13.4 (pip install nvidia-cuda-tileiras nvidia-cuda-nvcc nvidia-nvvm)",
    );
    let dir = std::env::temp_dir().join(format!("matmul_lowering_{}_{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, output) = (dir.join(format!("{name}.tilebc")), dir.join(format!("{name}.cubin")));
    std::fs::write(&input, bytecode).unwrap();
    let run = std::process::Command::new(&tileiras)
        .args(["--gpu-name", arch, "--opt-level", "3", "-o"])
        .arg(&output)
        .arg(&input)
        .output()
        .expect("run tileiras");
    assert!(
        run.status.success(),
        "tileiras rejected {name} ({}): {}{}",
        run.status,
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(std::fs::metadata(&output).unwrap().len() > 0);
    let _ = std::fs::remove_dir_all(&dir);
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
