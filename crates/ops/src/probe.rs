//! `cutile_compile_probe`: lowers a trivial kernel and assembles it with the
//! tileiras cutile would use, for one GPU architecture, without a GPU. The
//! check command runs it to tell whether the toolchain can target this GPU.

use crate::abi::{ffi_guard, OpError, CUTILE_ERR_COMPILE_FAILED, CUTILE_ERR_INVALID_ARGUMENT};
use cutile::compile_api::KernelCompiler;
use cutile::cutile_compiler::cuda_tile_runtime_utils::{
    compile_bytecode_cached, selected_bytecode_version, TileirasOptions,
};
use std::ffi::{c_char, CStr};

#[cutile::module]
pub mod probe_kernels {
    use cutile::core::*;

    #[cutile::entry()]
    fn probe(y: &mut Tensor<f32, { [16] }>) {
        let zero: Tile<f32, { [16] }> = constant(0.0f32, shape![16]);
        y.store(zero);
    }
}

/// Compiles a trivial kernel for `gpu_name` (for example "sm_90") through
/// tileiras. Returns CUTILE_OK, or CUTILE_ERR_COMPILE_FAILED with the
/// toolchain's message in `cutile_last_error()`.
///
/// # Safety
/// `gpu_name` must be null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cutile_compile_probe(gpu_name: *const c_char) -> i32 {
    ffi_guard(|| {
        if gpu_name.is_null() {
            return Err(OpError::new(CUTILE_ERR_INVALID_ARGUMENT, "gpu_name is null"));
        }
        let gpu =
            unsafe { CStr::from_ptr(gpu_name) }.to_str().map_err(|_| OpError::invalid("gpu_name is not UTF-8"))?;
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
    })
}
