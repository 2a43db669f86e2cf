//! Shipped kernels: cubins compiled when the wheel is built, for the kernel
//! variants the common shapes of every op take, on each supported architecture,
//! so those shapes run with no toolchain and no JIT.
//!
//! Build side: in describe mode (`cutile_describe_begin`), an op's C export
//! runs all its checks and its kernel choice, but instead of launching it
//! records each launch's [`KernelSpec`] (kernel, generics, compile options and
//! the specialization facts of each argument, derived as cutile's launcher
//! derives them). `cutile_shipped_build` lowers each recorded spec for its
//! architecture, assembles it with tileiras and writes one entry per kernel.
//!
//! Run side: a launch whose kernel is neither in memory nor in the user's
//! cache looks for an entry under the identity of the key cutile resolved for
//! it ([`identity`]: the whole key but the device ordinal and the tileiras
//! fingerprint, plus this library's version and ABI fingerprint). A spec the
//! build derived wrongly therefore only misses; it can never load a kernel for
//! another specialization. Entries use cutile's checksummed entry codec,
//! bound to the identity and the architecture, and are only ever read.

use crate::abi::{OpError, OpResult, CUTILE_ERR_COMPILE_FAILED};
use crate::entry;
use crate::spec::KernelSpec;
use cutile::cutile_compiler::compiler::{CUDATileFunctionCompiler, CUDATileModules};
use cutile::cutile_compiler::cuda_tile_runtime_utils::{
    get_compiler_version, run_tileiras, selected_bytecode_version, serialize_tile_ir_bytecode_for_version,
    TileirasOptions,
};
use cutile::cutile_compiler::kernel_naming::KernelNaming;
use cutile::cutile_compiler::specialization::{DivHint, SpecializationBits};
use cutile::jit_cache::{decode_entry, encode_entry, EntryParams};
use cutile::tile_kernel::TileFunctionKey;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

const IDENTITY_MAGIC: &str = "tilegym-cutile-rs shipped kernel v1";
/// What an entry's tileiras field holds: a shipped cubin is used whatever
/// toolchain is (or is not) installed, so the field names no version.
const ENTRY_TOOLCHAIN: &str = "shipped";

/// The shipped-kernel identity of a resolved key: SHA-256 over this library's
/// version, the ABI fingerprint of the key's op and the key's every field but the device
/// ordinal and the tileiras fingerprint (its Debug form spells them all, private ones
/// included, the kernel module's name among them).
pub fn identity(key: &TileFunctionKey) -> Option<[u8; 32]> {
    let described = without_field(&without_field(&format!("{key:?}"), "device_id")?, "tileiras_fingerprint")?;
    let text = format!("{IDENTITY_MAGIC}\0{}\0{}\0{described}", env!("CARGO_PKG_VERSION"), op_abi(key.module_name()));
    Some(Sha256::digest(text.as_bytes()).into())
}

/// The ABI fingerprint of the op whose kernel module is `module` (`<op>_kernels`); a module
/// of no op's name takes the whole library's.
pub(crate) fn op_abi(module: &str) -> &'static str {
    let op = module.strip_suffix("_kernels").unwrap_or(module);
    crate::OP_ABI.iter().find(|(name, _)| *name == op).map_or(env!("CUTILE_ABI_FINGERPRINT"), |(_, abi)| abi)
}

/// `debug` with the value of its field `name` (a number or a quoted string) removed.
fn without_field(debug: &str, name: &str) -> Option<String> {
    let tag = format!(", {name}: ");
    let start = debug.find(&tag)? + tag.len();
    let rest = debug.as_bytes();
    let mut end = start;
    if rest.get(start) == Some(&b'"') {
        end += 1;
        loop {
            match rest.get(end)? {
                b'\\' => end += 2,
                b'"' => break end += 1,
                _ => end += 1,
            }
        }
    } else {
        while rest.get(end).is_some_and(|b| b.is_ascii_digit()) {
            end += 1;
        }
    }
    Some(format!("{}{}", &debug[..start], &debug[end..]))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn entry_params<'a>(identity: [u8; 32], gpu_name: &'a str) -> EntryParams<'a> {
    EntryParams { bc_sha256: identity, gpu_name, opt_level: 0, flags: 0, tileiras_fp: ENTRY_TOOLCHAIN }
}

// ---- run side --------------------------------------------------------------

static DIR: RwLock<Option<PathBuf>> = RwLock::new(None);
static JIT_AVAILABLE: AtomicBool = AtomicBool::new(true);
static HITS: AtomicU64 = AtomicU64::new(0);
static MISMATCHES: AtomicU64 = AtomicU64::new(0);

/// Reads shipped kernels from `dir` (`<dir>/<arch>/<identity>`); `jit` says whether a
/// toolchain is there to compile what is not shipped (`cutile_shipped_enable`).
pub(crate) fn enable(dir: &str, jit: bool) {
    *DIR.write().unwrap_or_else(|p| p.into_inner()) = (!dir.is_empty()).then(|| PathBuf::from(dir));
    JIT_AVAILABLE.store(jit, Ordering::Relaxed);
}

pub(crate) fn jit_available() -> bool {
    JIT_AVAILABLE.load(Ordering::Relaxed)
}

/// Kernels this process loaded from the shipped index.
pub fn hits() -> u64 {
    HITS.load(Ordering::Relaxed)
}

/// First launches whose spec, derived as the build derives it, named another key
/// than cutile resolved: such a launch cannot find its shipped kernel (a bug).
pub fn mismatches() -> u64 {
    MISMATCHES.load(Ordering::Relaxed)
}

/// Counts a first launch whose derived spec disagrees with `id`, the [`identity`] of the
/// key cutile resolved for it.
pub(crate) fn compare(spec: &KernelSpec, id: Option<[u8; 32]>, gpu_name: &str) {
    if identity(&spec.key(gpu_name)) != id {
        MISMATCHES.fetch_add(1, Ordering::Relaxed);
    }
}

/// The shipped entry's payload for the kernel of identity `id` on `gpu_name`, checked, if there is one.
pub(crate) fn lookup(id: Option<[u8; 32]>, gpu_name: &str) -> Option<Vec<u8>> {
    let payload = find(id?, gpu_name)?;
    HITS.fetch_add(1, Ordering::Relaxed);
    Some(payload)
}

/// The entry file of identity `id` on `gpu_name`, read and checked: the codec's SHA-256 of
/// the payload, and the identity and architecture it was written for.
fn find(id: [u8; 32], gpu_name: &str) -> Option<Vec<u8>> {
    let dir = DIR.read().unwrap_or_else(|p| p.into_inner()).clone()?;
    let bytes = std::fs::read(dir.join(gpu_name).join(hex(&id))).ok()?;
    decode_entry(&bytes, &entry_params(id, gpu_name))
}

/// For every launch described so far (taken off the pending list): how many have a valid
/// shipped entry, and how many there were. What a launch would find, without launching.
pub(crate) fn resolve() -> (usize, usize) {
    let pending = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|p| p.into_inner()));
    let found = pending
        .iter()
        .filter(|(gpu_name, spec)| identity(&spec.key(gpu_name)).and_then(|id| find(id, gpu_name)).is_some())
        .count();
    (found, pending.len())
}

/// The error of a launch that has neither a shipped kernel nor a toolchain to compile one.
pub(crate) fn no_toolchain(op: &str, spec: &KernelSpec, gpu_name: &str) -> OpError {
    OpError::new(
        crate::abi::ffi::CUTILE_ERR_NO_TOOLCHAIN,
        format!(
            "{op}: {} on {gpu_name} is not among the shipped kernels, and no Tile IR toolchain is installed to \
             compile it. Fix: pip install \"tilegym-cutile-rs[tileiras]\"",
            spec.describe()
        ),
    )
}

// ---- build side ------------------------------------------------------------

thread_local! {
    /// The architecture this thread describes launches for, and what it described.
    static DESCRIBING: RefCell<Option<(String, Vec<KernelSpec>)>> = const { RefCell::new(None) };
}

/// Specs described so far, with their architectures, awaiting `cutile_shipped_build`.
static PENDING: Mutex<Vec<(String, KernelSpec)>> = Mutex::new(Vec::new());

/// Starts describe mode on this thread: launches are recorded for `gpu_name`, not made.
pub(crate) fn describe_begin(gpu_name: &str) {
    DESCRIBING.with(|d| *d.borrow_mut() = Some((gpu_name.to_string(), Vec::new())));
}

/// Ends describe mode; returns how many launches were described since it began.
pub(crate) fn describe_end() -> usize {
    let Some((gpu_name, specs)) = DESCRIBING.with(|d| d.borrow_mut().take()) else { return 0 };
    let n = specs.len();
    PENDING.lock().unwrap_or_else(|p| p.into_inner()).extend(specs.into_iter().map(|s| (gpu_name.clone(), s)));
    n
}

/// Whether this thread is in describe mode.
pub(crate) fn describing() -> bool {
    DESCRIBING.with(|d| d.borrow().is_some())
}

/// Records a launch described in describe mode.
pub(crate) fn describe(spec: KernelSpec) {
    DESCRIBING.with(|d| {
        if let Some((_, specs)) = d.borrow_mut().as_mut() {
            specs.push(spec);
        }
    });
}

/// Compiles every described spec (once per architecture and identity) with `jobs`
/// threads and writes its entry under `out_dir/<arch>/`; returns the number written.
pub(crate) fn build(out_dir: &str, jobs: usize) -> OpResult<usize> {
    let pending = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|p| p.into_inner()));
    let mut seen = HashSet::new();
    let mut work = Vec::new();
    for (gpu_name, spec) in pending {
        let id = identity(&spec.key(&gpu_name)).ok_or_else(|| OpError::invalid("unreadable kernel key"))?;
        if seen.insert((gpu_name.clone(), id)) {
            work.push((gpu_name, id, spec));
        }
    }
    let cache = BuildCache::from_env();
    let reused_before = cache_reused();
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<OpError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                while let Some((gpu_name, id, spec)) = work.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if failure.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
                        return;
                    }
                    let written = built_entry(spec, gpu_name, *id, cache.as_ref()).and_then(|entry| {
                        let dir = PathBuf::from(out_dir).join(gpu_name);
                        std::fs::create_dir_all(&dir)
                            .and_then(|()| std::fs::write(dir.join(hex(id)), entry))
                            .map_err(|e| OpError::invalid(format!("cannot write to {}: {e}", dir.display())))
                    });
                    if let Err(e) = written {
                        failure.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
                    }
                }
            });
        }
    });
    if let Some(cache) = &cache {
        eprintln!(
            "shipped-kernel build: {} kernels, {} of them from the build cache {}",
            work.len(),
            cache_reused() - reused_before,
            cache.dir.display()
        );
    }
    match failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(work.len()),
    }
}

/// Where `build` keeps the entries it compiled, so that a rebuild of unchanged kernels runs
/// no tileiras: `$TILEGYM_CUTILE_RS_SHIP_CACHE` (unset or empty: none; scripts/ship_kernels.py
/// sets it). Content-addressed: a file's name is the SHA-256 of everything that decides the
/// cubin, and its content the finished entry, checked (`decode_entry`) before it is reused.
pub const SHIP_CACHE_ENV: &str = "TILEGYM_CUTILE_RS_SHIP_CACHE";

struct BuildCache {
    dir: PathBuf,
    /// `tileiras --version`, which the kernels' identity leaves out.
    tileiras: String,
}

static CACHE_REUSED: AtomicU64 = AtomicU64::new(0);

/// Entries the build cache has served since the library was loaded (tests, and the build's report).
pub fn cache_reused() -> u64 {
    CACHE_REUSED.load(Ordering::Relaxed)
}

impl BuildCache {
    fn from_env() -> Option<Self> {
        let dir = std::env::var_os(SHIP_CACHE_ENV).filter(|v| !v.is_empty())?;
        Some(Self { dir: PathBuf::from(dir), tileiras: get_compiler_version() })
    }

    /// The file of kernel `id` on `gpu_name`: the kernel's identity (its whole key: source
    /// hash, generics, options, specialization; this library's version and C ABI), the
    /// architecture, tileiras' version and the locked dependencies (cutile's lowering).
    fn file(&self, id: &[u8; 32], gpu_name: &str) -> PathBuf {
        let mut h = Sha256::new();
        for part in [&id[..], gpu_name.as_bytes(), self.tileiras.as_bytes(), env!("CUTILE_LOCK_FINGERPRINT").as_bytes()]
        {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        self.dir.join(hex(&h.finalize()))
    }
}

/// The entry of `spec` on `gpu_name`: from the build cache when it holds a valid one, else
/// compiled (and then stored there, best effort: a cache that cannot be written only costs time).
fn built_entry(spec: &KernelSpec, gpu_name: &str, id: [u8; 32], cache: Option<&BuildCache>) -> OpResult<Vec<u8>> {
    let params = entry_params(id, gpu_name);
    let file = cache.map(|c| c.file(&id, gpu_name));
    if let Some(bytes) = file.as_ref().and_then(|f| std::fs::read(f).ok()) {
        if decode_entry(&bytes, &params).is_some() {
            CACHE_REUSED.fetch_add(1, Ordering::Relaxed);
            return Ok(bytes);
        }
    }
    let entry = compile(spec, gpu_name).and_then(|payload| {
        encode_entry(&params, &payload).ok_or_else(|| OpError::invalid("cannot encode a kernel entry"))
    })?;
    if let Some(file) = file {
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        let stored = file.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::write(&tmp, &entry));
        if stored.and_then(|()| std::fs::rename(&tmp, &file)).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    Ok(entry)
}

/// Lowers `spec` for `gpu_name` as cutile's JIT does for a launch, assembles it with
/// the tileiras in `CUTILE_TILEIRAS_PATH`, and returns the warm-start payload
/// (entry name, validator, cubin) a launch installs.
fn compile(spec: &KernelSpec, gpu_name: &str) -> OpResult<Vec<u8>> {
    let failed = |e: &dyn std::fmt::Display| {
        OpError::new(CUTILE_ERR_COMPILE_FAILED, format!("{} for {gpu_name}: {e}", spec.describe()))
    };
    let options =
        spec.options.clone().with_default_tile_libraries().with_jit_env_overrides().map_err(|e| failed(&e))?;
    let version = selected_bytecode_version().map_err(|e| failed(&e))?;
    let modules = CUDATileModules::from_kernel((spec.module.ast)()).map_err(|e| failed(&e))?;
    let strides: Vec<(&str, &[i32])> = spec.stride_args.iter().map(|(n, s)| (n.as_str(), s.as_slice())).collect();
    let specs: Vec<(&str, &SpecializationBits)> = spec.spec_args.iter().map(|(n, s)| (n.as_str(), s)).collect();
    let hints: Vec<(&str, &DivHint)> = spec.scalar_hints.iter().map(|(n, h)| (n.as_str(), h)).collect();
    let compiler = CUDATileFunctionCompiler::new(
        &modules,
        spec.module.name,
        spec.function,
        &spec.generics,
        &strides,
        &specs,
        &hints,
        None,
        gpu_name.to_string(),
        &options,
    )
    .and_then(|c| c.with_target_capabilities(cutile_ir::capabilities::TargetCapabilities::new(version, gpu_name)))
    .map_err(|e| failed(&e))?;
    let module = compiler.compile().map_err(|e| failed(&e))?;
    let validator = compiler.get_validator();
    let (bytecode, _) = serialize_tile_ir_bytecode_for_version(&module, version).map_err(|e| failed(&e))?;
    let cubin =
        run_tileiras(&bytecode, gpu_name, &TileirasOptions::from_compile_options(&options)).map_err(|e| failed(&e))?;
    Ok(entry::payload(&KernelNaming::new(spec.function).entry_name(), &validator, &cubin))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(device: usize, fingerprint: &str, generics: &[&str]) -> TileFunctionKey {
        TileFunctionKey::builder("m", "f")
            .generics(generics.iter().map(|g| g.to_string()).collect())
            .device_id(device)
            .gpu_name("sm_90")
            .tileiras_fingerprint(fingerprint)
            .build()
    }

    #[test]
    fn identity_ignores_device_and_toolchain_only() {
        let base = identity(&key(0, "tileiras 13.4 \"quoted\" \\ and more", &["f16", "64"])).unwrap();
        assert_eq!(identity(&key(3, "", &["f16", "64"])), Some(base));
        assert_eq!(identity(&key(12, "/nonexistent/tileiras 0 0", &["f16", "64"])), Some(base));
        assert_ne!(identity(&key(0, "", &["f16", "128"])), Some(base));
        let other_arch =
            TileFunctionKey::builder("m", "f").generics(vec!["f16".into(), "64".into()]).gpu_name("sm_100").build();
        assert_ne!(identity(&other_arch), Some(base));
    }

    #[test]
    fn each_op_has_its_own_abi_fingerprint_in_its_kernels_identity() {
        let names: Vec<&str> = crate::OP_ABI.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, crate::OPS);
        let distinct: HashSet<&str> = crate::OP_ABI.iter().map(|(_, abi)| *abi).collect();
        assert_eq!(distinct.len(), crate::OPS.len(), "one op's exports never stand for another's");
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/ops");
        for (op, abi) in crate::OP_ABI {
            // The identity finds an op's fingerprint by its kernel module's name, `<op>_kernels`.
            let kernel = std::fs::read_to_string(src.join(op).join("kernel.rs")).unwrap();
            assert!(kernel.contains(&format!("pub mod {op}_kernels")), "{op}'s kernel module is not {op}_kernels");
            assert_eq!(op_abi(&format!("{op}_kernels")), *abi);
            let of = |module: &str| identity(&TileFunctionKey::builder(module, "f").gpu_name("sm_90").build());
            assert_ne!(of(&format!("{op}_kernels")), of("other_kernels"));
        }
        assert_eq!(op_abi("no_such_op_kernels"), env!("CUTILE_ABI_FINGERPRINT"));
    }

    #[test]
    fn fields_are_cut_exactly() {
        assert_eq!(
            without_field("A { a: 1, device_id: 42, b: 2 }", "device_id").unwrap(),
            "A { a: 1, device_id: , b: 2 }"
        );
        assert_eq!(
            without_field(r#"A { x: "q", tileiras_fingerprint: "v\"1\\", y: 3 }"#, "tileiras_fingerprint").unwrap(),
            r#"A { x: "q", tileiras_fingerprint: , y: 3 }"#
        );
        assert_eq!(without_field("A { a: 1 }", "device_id"), None);
    }
}
