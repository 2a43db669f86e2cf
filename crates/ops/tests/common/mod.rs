//! What the kernel lowering tests share: lower a kernel to Tile IR bytecode with
//! cutile's compiler and assemble it with tileiras for each architecture, on a
//! machine without a GPU (tileiras needs none), so a kernel it rejects fails here.

use cutile::compile_api::KernelCompiler;
use cutile::cutile_compiler::ast::Module;
use cutile::tile_kernel::CompileOptions;

/// The architectures we ship kernels for, one per major family.
#[allow(dead_code)] // not every test file lowers for all of them
pub const ARCHS: [&str; 4] = ["sm_80", "sm_90", "sm_100", "sm_120"];

/// Lowers `module`'s `kernel` with `generics` and `strides` for each of `archs`, assembles
/// each result with tileiras, and returns the Tile IR text of the last.
pub fn lower_and_assemble(
    module: fn() -> Module,
    module_name: &str,
    kernel: &str,
    generics: &[&str],
    strides: &[(&str, &[i32])],
    archs: &[&str],
) -> String {
    lower_with(module, module_name, kernel, generics, strides, CompileOptions::default(), "", archs)
}

/// As `lower_and_assemble`, with `cga` CTAs per cluster (for the architectures with
/// clusters), checking the hint reaches Tile IR.
#[allow(dead_code)] // only the ops with a cluster option use it
pub fn lower_clustered(
    module: fn() -> Module,
    module_name: &str,
    kernel: &str,
    generics: &[&str],
    strides: &[(&str, &[i32])],
    cga: i32,
    archs: &[&str],
) {
    let options = CompileOptions::default().num_cta_in_cga(cga);
    let ir = lower_with(module, module_name, kernel, generics, strides, options, &format!("_cga{cga}"), archs);
    assert!(ir.contains("num_cta_in_cga"), "the cluster hint must reach Tile IR");
}

#[allow(clippy::too_many_arguments)]
fn lower_with(
    module: fn() -> Module,
    module_name: &str,
    kernel: &str,
    generics: &[&str],
    strides: &[(&str, &[i32])],
    options: CompileOptions,
    tag: &str,
    archs: &[&str],
) -> String {
    let mut ir = String::new();
    for arch in archs {
        let artifacts = KernelCompiler::new(module, module_name, kernel)
            .generics(generics.iter().map(|g| g.to_string()).collect())
            .strides(strides)
            .options(options.clone())
            .target(arch)
            .compile()
            .unwrap_or_else(|e| panic!("{kernel}<{generics:?}>{tag} failed to lower for {arch}: {e}"));
        let bytecode = artifacts.bytecode().expect("bytecode");
        assert_eq!(&bytecode[..8], &[0x7F, b'T', b'i', b'l', b'e', b'I', b'R', 0x00]);
        assemble(&format!("{kernel}_{}{tag}_{arch}", generics.join("_")), arch, &bytecode);
        ir = artifacts.ir_text();
    }
    ir
}

/// Assembles Tile IR `bytecode` for `arch` with the tileiras in $CUTILE_TILEIRAS_PATH.
pub fn assemble(name: &str, arch: &str, bytecode: &[u8]) {
    let tileiras = std::env::var("CUTILE_TILEIRAS_PATH").expect(
        "CUTILE_TILEIRAS_PATH must name tileiras 13.4 (pip install nvidia-cuda-tileiras nvidia-cuda-nvcc nvidia-nvvm)",
    );
    let dir = std::env::temp_dir().join(format!("lowering_{}_{name}", std::process::id()));
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
