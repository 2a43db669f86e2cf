//! The SwiGLU kernels lower to Tile IR for every dtype and assemble with tileiras
//! for every architecture we ship for, on a machine without a GPU.

use cutile::compile_api::KernelCompiler;
use cutile_ops::swiglu::kernel::swiglu_kernels::__module_ast_self;

const ARCHS: [&str; 4] = ["sm_80", "sm_90", "sm_100", "sm_120"];
const H: i32 = 4096;

fn lower_and_assemble(kernel: &str, dtype: &str, tile: [i32; 2], strides: &[(&str, &[i32])]) {
    for arch in ARCHS {
        let artifacts = KernelCompiler::new(__module_ast_self, "swiglu_kernels", kernel)
            .generics(vec![dtype.to_string(), tile[0].to_string(), tile[1].to_string()])
            .strides(strides)
            .target(arch)
            .compile()
            .unwrap_or_else(|e| panic!("{kernel}<{dtype},{tile:?}> failed to lower for {arch}: {e}"));
        let bytecode = artifacts.bytecode().expect("bytecode");
        assemble(&format!("{kernel}_{dtype}_{}x{}_{arch}", tile[0], tile[1]), arch, &bytecode);
    }
}

/// tileiras runs without a GPU: a kernel it rejects for some architecture fails here.
fn assemble(name: &str, arch: &str, bytecode: &[u8]) {
    let tileiras = std::env::var("CUTILE_TILEIRAS_PATH").expect(
        "CUTILE_TILEIRAS_PATH must name tileiras 13.4 (pip install nvidia-cuda-tileiras nvidia-cuda-nvcc nvidia-nvvm)",
    );
    let dir = std::env::temp_dir().join(format!("swiglu_lowering_{}_{name}", std::process::id()));
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
