//! A launch as cutile specializes it, spelled once by the op: its kernel module, the
//! kernel, generics, compile hints ([`Hints`]) and each argument's specialization facts
//! ([`KernelSpec`]). The launch path (`crate::launch`), the warm-start index and the
//! shipped kernels (`crate::shipped`) all read it; it knows none of them.

use crate::abi::ffi::{CUTILE_MAX_BLOCK, CUTILE_MAX_CTAS_IN_CGA, CUTILE_MAX_OCCUPANCY, CUTILE_MAX_WORKER_WARPS};
use crate::abi::{CheckedTensor, OpError, OpResult};
use cutile::cutile_compiler::ast::Module;
use cutile::cutile_compiler::cuda_tile_runtime_utils::get_compiler_version;
use cutile::cutile_compiler::specialization::{compute_spec, DivHint, SpecializationBits};
use cutile::tile_kernel::{CompileOptions, TileFunctionKey};

/// Checks one tile edge of a config: a power of two in `1..=CUTILE_MAX_BLOCK`.
pub fn check_block(name: &str, value: i32) -> OpResult<()> {
    check_shared_block(name, value, 0)
}

/// As `check_block`, for an edge a cluster of `cga` CTAs shares (each CTA holding at most
/// `CUTILE_MAX_BLOCK` of it): up to `cga` times as long.
pub fn check_shared_block(name: &str, value: i32, cga: i32) -> OpResult<()> {
    let widest = CUTILE_MAX_BLOCK.saturating_mul(cga.max(1));
    if !(1..=widest).contains(&value) || value & (value - 1) != 0 {
        let shared = if cga > 1 { format!(" with a cluster of {cga} CTAs") } else { String::new() };
        return Err(OpError::invalid(format!("{name} = {value}: must be a power of two in 1..={widest}{shared}")));
    }
    Ok(())
}

/// The compile-time hints of a config besides its tile shape; each value is its own
/// compiled variant, and 0 leaves the choice to tileiras.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hints {
    /// Resident CTAs per SM.
    pub occupancy: i32,
    /// Worker warps per CTA.
    pub warps: i32,
    /// CTAs per cluster (`num_cta_in_cga`); only ops that take it set it (`with_cga`).
    pub cga: i32,
}

impl Hints {
    /// The hints, checked against Tile IR's domains.
    pub fn checked(occupancy: i32, warps: i32) -> OpResult<Self> {
        if !(0..=CUTILE_MAX_OCCUPANCY).contains(&occupancy) {
            return Err(OpError::invalid(format!(
                "occupancy = {occupancy}: must be 0 (compiler's choice) to {CUTILE_MAX_OCCUPANCY}"
            )));
        }
        if warps != 0 && (!(1..=CUTILE_MAX_WORKER_WARPS).contains(&warps) || warps & (warps - 1) != 0) {
            return Err(OpError::invalid(format!(
                "warps = {warps}: must be 0 (compiler's choice) or a power of two up to {CUTILE_MAX_WORKER_WARPS}"
            )));
        }
        Ok(Self { occupancy, warps, cga: 0 })
    }

    /// These hints with `cga` CTAs per cluster, checked: 0 or a power of two up to
    /// `CUTILE_MAX_CTAS_IN_CGA`.
    pub fn with_cga(self, cga: i32) -> OpResult<Self> {
        if cga != 0 && (!(1..=CUTILE_MAX_CTAS_IN_CGA).contains(&cga) || cga & (cga - 1) != 0) {
            return Err(OpError::invalid(format!(
                "cga = {cga}: must be 0 (compiler's choice) or a power of two up to {CUTILE_MAX_CTAS_IN_CGA}"
            )));
        }
        Ok(Self { cga, ..self })
    }

    pub fn compile_options(self) -> CompileOptions {
        let mut options = CompileOptions::default();
        if self.occupancy > 0 {
            options = options.occupancy(self.occupancy);
        }
        if self.warps > 0 {
            options = options.num_worker_warps_per_cta(self.warps);
        }
        if self.cga > 0 {
            options = options.num_cta_in_cga(self.cga);
        }
        options
    }
}

/// One kernel module of an op, as its `#[cutile::module]` generates it.
#[derive(Clone, Copy)]
pub struct KernelModule {
    pub name: &'static str,
    pub ast: fn() -> Module,
    pub source_hash: &'static str,
}

/// Everything cutile specializes one launch on, derived from the launch's
/// arguments the way cutile's generated launcher derives it.
#[derive(Clone)]
pub struct KernelSpec {
    pub(crate) module: KernelModule,
    pub(crate) function: &'static str,
    pub(crate) generics: Vec<String>,
    pub(crate) options: CompileOptions,
    pub(crate) stride_args: Vec<(String, Vec<i32>)>,
    pub(crate) spec_args: Vec<(String, SpecializationBits)>,
    pub(crate) scalar_hints: Vec<(String, DivHint)>,
}

impl KernelSpec {
    /// A launch of `function` in `module` with these generic arguments and hints.
    pub fn new(module: KernelModule, function: &'static str, generics: Vec<String>, hints: Hints) -> Self {
        Self {
            module,
            function,
            generics,
            options: hints.compile_options(),
            stride_args: Vec::new(),
            spec_args: Vec::new(),
            scalar_hints: Vec::new(),
        }
    }

    /// The generic arguments, for the op's launcher.
    pub fn generics(&self) -> Vec<String> {
        self.generics.clone()
    }

    /// The compile options, for the op's launcher.
    pub fn options(&self) -> CompileOptions {
        self.options.clone()
    }

    /// The next tensor parameter (`&Tensor` or a partition of `&mut Tensor`), in
    /// the kernel's parameter order, borrowed with `t`'s pointer, extents and strides.
    pub fn tensor(self, name: &str, t: &CheckedTensor) -> Self {
        self.raw_tensor(name, t.ptr, &t.shape, &t.strides)
    }

    /// [`Self::tensor`] from raw parts (an index tensor).
    pub fn raw_tensor(mut self, name: &str, ptr: u64, shape: &[i32], strides: &[i32]) -> Self {
        let spec = compute_spec(ptr, shape, strides, 0);
        self.stride_args
            .push((name.to_string(), spec.stride_one.iter().map(|&one| if one { 1 } else { -1 }).collect()));
        self.spec_args.push((name.to_string(), spec));
        self
    }

    /// The next integer scalar parameter (cutile specializes on its divisibility).
    pub fn int(mut self, name: &str, value: i32) -> Self {
        self.scalar_hints.push((name.to_string(), DivHint::from_value(value)));
        self
    }

    /// The key cutile resolves this launch to on a GPU of architecture `gpu_name`
    /// (device and toolchain fields aside, which [`identity`] leaves out).
    pub(crate) fn key(&self, gpu_name: &str) -> TileFunctionKey {
        TileFunctionKey::builder(self.module.name, self.function)
            .generics(self.generics.clone())
            .stride_args(self.stride_args.clone())
            .spec_args(self.spec_args.clone())
            .scalar_hints(self.scalar_hints.clone())
            .compile_options(self.options.clone().with_default_tile_libraries())
            .source_hash(self.module.source_hash)
            .gpu_name(gpu_name)
            .compiler_version(get_compiler_version())
            .build()
    }

    /// The kernel and its generics, for messages.
    pub fn describe(&self) -> String {
        format!("{}<{}>", self.function, self.generics.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_outside_tile_irs_domains_are_refused() {
        assert!(check_block("block_m", 64).is_ok());
        for bad in [0, 3, -4, CUTILE_MAX_BLOCK * 2] {
            assert!(check_block("block_m", bad).unwrap_err().message.starts_with("block_m = "));
        }
        // A cluster's CTAs share an edge: cga times as long.
        assert!(
            check_block("block_n", CUTILE_MAX_BLOCK).is_ok()
                && check_shared_block("block_n", CUTILE_MAX_BLOCK * 4, 4).is_ok()
        );
        assert!(check_block("block_n", CUTILE_MAX_BLOCK * 2).unwrap_err().message.contains("1..=65536"));
        let err = check_shared_block("block_n", CUTILE_MAX_BLOCK * 8, 4).unwrap_err();
        assert!(err.message.contains("1..=262144 with a cluster of 4 CTAs"), "{}", err.message);
        assert!(check_shared_block("block_n", 3 * 1024, 2).is_err() && check_shared_block("block_n", 0, 2).is_err());
        assert!(Hints::checked(0, 0).is_ok() && Hints::checked(CUTILE_MAX_OCCUPANCY, 32).is_ok());
        assert!(Hints::checked(-1, 0).is_err() && Hints::checked(CUTILE_MAX_OCCUPANCY + 1, 0).is_err());
        for bad in [3, 64, -8] {
            assert!(Hints::checked(0, bad).unwrap_err().message.contains("power of two"));
        }
        let hints = Hints::checked(0, 0).unwrap();
        assert_eq!(hints.with_cga(2).unwrap().cga, 2);
        for bad in [3, -2, CUTILE_MAX_CTAS_IN_CGA * 2] {
            assert!(hints.with_cga(bad).unwrap_err().message.starts_with("cga = "));
        }
    }
}
