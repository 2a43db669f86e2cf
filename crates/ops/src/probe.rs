//! The toolchain probe (`cutile_compile_probe`): lowers a trivial kernel and assembles it with the
//! tileiras cutile would use, for one GPU architecture, without a GPU. The
//! check command runs it to tell whether the toolchain can target this GPU.

use crate::abi::{OpError, OpResult, CUTILE_ERR_COMPILE_FAILED};
use cutile::compile_api::KernelCompiler;
use cutile::cutile_compiler::cuda_tile_runtime_utils::{
    compile_bytecode_cached, selected_bytecode_version, TileirasOptions,
};

#[cutile::module]
pub mod probe_kernels {
    use cutile::core::*;

    #[cutile::entry()]
    fn probe(y: &mut Tensor<f32, { [16] }>) {
        let zero: Tile<f32, { [16] }> = constant(0.0f32, shape![16]);
        y.store(zero);
    }
}

/// Compiles the probe kernel for `gpu` (for example "sm_90") through tileiras
/// (`cutile_compile_probe`); a failure carries the toolchain's message.
pub(crate) fn compile_probe(gpu: &str) -> OpResult<()> {
    let compile_err = |stage: &str, e: &dyn std::fmt::Display| {
        OpError::new(CUTILE_ERR_COMPILE_FAILED, format!("{stage} for {gpu}: {e}"))
    };
    let version =
        selected_bytecode_version().map_err(|e| compile_err("asking tileiras for its bytecode versions", &e))?;
    let artifacts = KernelCompiler::new(probe_kernels::__module_ast_self, "probe_kernels", "probe")
        .strides(&[("y", &[1])])
        .bytecode_version(version)
        .target(gpu)
        .compile()
        .map_err(|e| compile_err("lowering the probe kernel", &e))?;
    let bytecode = artifacts.bytecode().map_err(|e| compile_err("serializing Tile IR bytecode", &e))?;
    // Through the kernel cache like any kernel, so a cached probe runs no tileiras.
    let (cubin, _) = compile_bytecode_cached(&bytecode, version, gpu, &TileirasOptions::default())
        .map_err(|e| compile_err("tileiras", &e))?;
    if cubin.is_empty() {
        return Err(compile_err("tileiras", &"produced an empty cubin"));
    }
    Ok(())
}
