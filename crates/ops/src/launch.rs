//! The launch protocol every op shares, written once: the launch description, the
//! replay key, the replay fast path, and cutile's first launch of a specialization
//! through the warm-start index, recorded for replay. An op's `launch.rs` keeps what
//! is its own: its views' checks, its kernel choice, its descriptions and its typed
//! cutile launcher.
//!
//! An op describes each launch once, as a [`Launch`]: the kernel, its generics and
//! hints, and its parameters in the kernel's order ([`Param`]). The replay key, the
//! launch's values, the compile spec, the grid and the replay's argument list all
//! come from that one list; the op writes the parameters a second time only in
//! cutile's typed launcher ([`crate::typed_launch!`]), reading tiles and scalars back from it.
//!
//! A launch goes: [`enqueue_launch`] binds the device's context and looks the [`Key`]
//! up in the replay table (a hit goes straight to `cuLaunchKernel`, `crate::replay`);
//! a miss hands the op a [`FirstLaunch`], whose [`FirstLaunch::launch`] launches
//! through cutile (`crate::warm_start`) and records the launch for the next time.

use crate::abi::{CheckedTensor, DType, IndexTensor, OpError, OpResult};
use crate::replay::{self, Args, Value};
use crate::shipped;
use crate::spec::{Hints, KernelModule, KernelSpec};
use crate::{runtime, warm_start};
use cuda_core::{Context, Stream};
use cutile::cuda_async::error::DeviceError;
use cutile::cutile_compiler::specialization::DivHint;
use cutile::tile_kernel::TileFunctionKey;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A launch's replay key: everything cutile specializes on or checks at launch,
/// pointers aside (the kernel, its generics and options, the device, each tensor's
/// dtype, extents, strides and pointer alignment as cutile's specialization takes
/// it). Two launches with equal keys resolve to the same function and pass the same
/// checks, so the second replays the first (crate::replay).
#[derive(Clone, Debug)]
pub struct Key(Vec<i64>);

impl Key {
    /// A key for `kernel` of the cutile module named `module` (kernel names need not be
    /// unique across ops' modules) on `device`.
    pub fn new(module: &str, kernel: &str, device: i32) -> Self {
        let mut h = DefaultHasher::new();
        (module, kernel).hash(&mut h);
        let mut key = Vec::with_capacity(32);
        key.extend([h.finish() as i64, i64::from(device)]);
        Self(key)
    }

    /// Adds a value the launch specializes on (a generic, a derived extent).
    pub fn with(mut self, value: impl Into<i64>) -> Self {
        self.0.push(value.into());
        self
    }

    pub fn hints(self, hints: Hints) -> Self {
        self.with(hints.occupancy).with(hints.warps).with(hints.cga)
    }

    /// Adds a tensor: dtype, extents, strides and its pointer's alignment class.
    pub fn tensor(mut self, t: &CheckedTensor) -> Self {
        self.0.extend([t.dtype as i64, t.shape.len() as i64]);
        self.0.extend(t.shape.iter().chain(&t.strides).map(|&v| i64::from(v)));
        self.0.push(i64::from(DivHint::from_ptr(t.ptr).divisor));
        self
    }

    /// Adds an int32 index tensor (attention's start_q) as [`Self::tensor`] adds a float one.
    pub fn index(mut self, t: &IndexTensor) -> Self {
        self.0.push(t.shape.len() as i64);
        self.0.extend(t.shape.iter().chain(&t.strides).map(|&v| i64::from(v)));
        self.0.push(i64::from(DivHint::from_ptr(t.ptr).divisor));
        self
    }

    /// A hash of the whole key, for the warm-start index's first-sight set.
    fn signature(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.0.hash(&mut h);
        h.finish()
    }
}

/// One parameter of a kernel, as its [`Launch`] lists them (the kernel's order); the
/// name is the kernel's own (cutile's spec names each parameter).
#[derive(Clone, Debug)]
pub enum Param<'a> {
    /// A `&mut Tensor` the launcher binds by `partition(tile)`; the first one sets the grid.
    Out(&'static str, &'a CheckedTensor, Vec<i32>),
    /// A `&mut Tensor` bound by `partition(tile).map(map, ctas)` for a persistent kernel
    /// (the map is also among its generics): `ctas` CTAs walk its tiles. Its argument list
    /// is cutile's to spell, so a launch with one is never recorded for replay.
    Mapped(&'static str, &'a CheckedTensor, Vec<i32>, [i32; 3], i32),
    /// A `&Tensor`.
    In(&'static str, &'a CheckedTensor),
    /// A `&Tensor<i32>` read from an index descriptor.
    Index(&'static str, &'a IndexTensor),
    /// An integer scalar: cutile specializes on its divisibility, so the key pins it.
    Int(&'static str, i32),
    /// A float scalar, passed afresh at each launch (the key leaves it out).
    F32(&'static str, f32),
}

/// One generic argument of a kernel: an element type or an integer constant. Kept as
/// values (the replay key takes them as they are, with no text made per call); the
/// spec spells them as cutile's launcher does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generic {
    Type(DType),
    Int(i32),
}

impl Generic {
    /// An element type, then integer constants.
    pub fn list(types: &[DType], ints: &[i32]) -> Vec<Self> {
        types.iter().map(|&t| Self::Type(t)).chain(ints.iter().map(|&i| Self::Int(i))).collect()
    }

    fn text(self) -> String {
        match self {
            Self::Type(t) => t.jit_name().to_string(),
            Self::Int(i) => i.to_string(),
        }
    }
}

/// One launch of a kernel, written once by its op: everything the replay key, the
/// launch's values, cutile's spec, the grid and the replay's arguments are derived from.
#[derive(Clone)]
pub struct Launch<'a> {
    pub module: KernelModule,
    pub kernel: &'static str,
    /// The generic arguments in the kernel's order (element types, then tile constants).
    pub generics: Vec<Generic>,
    pub hints: Hints,
    pub params: Vec<Param<'a>>,
}

impl Launch<'_> {
    /// The replay key on `device`: kernel, hints, generics, then each parameter but the
    /// float scalars (tensors by dtype, extents, strides and alignment; integers by value).
    pub fn key(&self, device: i32) -> Key {
        let generics = self.generics.iter().map(|g| match *g {
            Generic::Type(t) => t as i64,
            Generic::Int(i) => i64::from(i),
        });
        let key =
            generics.fold(Key::new(self.module.name, self.kernel, device).hints(self.hints), |key, g| key.with(g));
        self.params.iter().fold(key, |key, param| match param {
            Param::Out(_, t, tile) => tile.iter().fold(key.tensor(t), |key, &e| key.with(e)),
            Param::Mapped(_, t, tile, map, ctas) => {
                tile.iter().chain(map).fold(key.tensor(t), |key, &e| key.with(e)).with(*ctas)
            }
            Param::In(_, t) => key.tensor(t),
            Param::Index(_, t) => key.index(t),
            Param::Int(_, v) => key.with(*v),
            Param::F32(..) => key,
        })
    }

    /// What changes from one launch of the key to the next: each tensor's pointer and
    /// each float scalar, in parameter order (the replay's `values`).
    pub fn values(&self) -> Vec<Value> {
        self.params
            .iter()
            .filter_map(|param| match param {
                Param::Out(_, t, _) | Param::Mapped(_, t, ..) | Param::In(_, t) => Some(Value::Ptr(t.ptr)),
                Param::Index(_, t) => Some(Value::Ptr(t.ptr)),
                Param::Int(..) => None,
                Param::F32(_, v) => Some(Value::F32(*v)),
            })
            .collect()
    }

    /// What cutile specializes the launch on (crate::spec).
    pub fn spec(&self) -> KernelSpec {
        let spec =
            KernelSpec::new(self.module, self.kernel, self.generics.iter().map(|g| g.text()).collect(), self.hints);
        self.params.iter().fold(spec, |spec, param| match param {
            Param::Out(name, t, _) | Param::Mapped(name, t, ..) | Param::In(name, t) => spec.tensor(name, t),
            Param::Index(name, t) => spec.raw_tensor(name, t.ptr, &t.shape, &t.strides),
            Param::Int(name, v) => spec.int(name, *v),
            Param::F32(..) => spec,
        })
    }

    /// The kernel's arguments as cutile pushes them, the values indexed as [`Self::values`]
    /// (a mapped output pushes its partition's: the map is a generic, not an argument).
    pub fn args(&self) -> Option<Args> {
        let mut live = 0..;
        self.params.iter().try_fold(Args::default(), |args, param| match param {
            Param::Out(_, t, tile) | Param::Mapped(_, t, tile, ..) => {
                Some(args.partition(live.next().unwrap_or_default(), &t.shape, &t.strides, tile))
            }
            Param::In(_, t) => Some(args.tensor(live.next().unwrap_or_default(), &t.shape, &t.strides)),
            Param::Index(_, t) => Some(args.tensor(live.next().unwrap_or_default(), &t.shape, &t.strides)),
            Param::Int(_, v) => Some(args.scalar(*v)),
            Param::F32(_, v) => Some(args.live(live.next().unwrap_or_default(), *v)),
        })
    }

    /// What `pick` finds in the parameter named `name` (its `what`), for the typed launcher.
    ///
    /// # Panics
    /// When the description has no such parameter (a defect of the op's launch).
    fn named<T>(&self, name: &str, what: &str, pick: impl Fn(&Param) -> Option<T>) -> T {
        let param = self.params.iter().find(|p| match p {
            Param::Out(n, ..)
            | Param::Mapped(n, ..)
            | Param::In(n, _)
            | Param::Index(n, _)
            | Param::Int(n, _)
            | Param::F32(n, _) => *n == name,
        });
        param.and_then(pick).unwrap_or_else(|| panic!("{}: no {what} {name}", self.kernel))
    }

    /// The tile of output `name`, for the typed launcher's `partition`.
    pub fn tile<const N: usize>(&self, name: &str) -> [usize; N] {
        self.named(name, &format!("output of rank {N}"), |p| match p {
            Param::Out(_, _, tile) | Param::Mapped(_, _, tile, ..) => {
                tile.iter().map(|&e| e as usize).collect::<Vec<_>>().try_into().ok()
            }
            _ => None,
        })
    }

    /// The map and CTA count of mapped output `name`, for the typed launcher's `map`.
    pub fn mapping(&self, name: &str) -> ([usize; 3], u32) {
        self.named(name, "mapped output", |p| match p {
            Param::Mapped(_, _, _, map, ctas) => Some((map.map(|e| e as usize), *ctas as u32)),
            _ => None,
        })
    }

    /// The integer scalar `name`, for the typed launcher.
    pub fn int(&self, name: &str) -> i32 {
        self.named(name, "integer parameter", |p| if let Param::Int(_, v) = p { Some(*v) } else { None })
    }

    /// The float scalar `name`, for the typed launcher.
    pub fn float(&self, name: &str) -> f32 {
        self.named(name, "float parameter", |p| if let Param::F32(_, v) = p { Some(*v) } else { None })
    }

    /// The grid cutile infers from the first output's partition: one CTA per tile,
    /// tiles counted per axis (rounded up), axes beyond the tensor's rank 1; with a
    /// mapped output, its CTA count along x (cutile checked it against the tiles at the
    /// first launch, which a replay repeats).
    pub fn grid(&self) -> OpResult<(u32, u32, u32)> {
        if let Some(ctas) =
            self.params.iter().find_map(|p| if let Param::Mapped(.., ctas) = p { Some(*ctas) } else { None })
        {
            return u32::try_from(ctas).ok().filter(|&c| c > 0).map(|c| (c, 1, 1)).ok_or_else(|| {
                OpError::invalid(format!("{}: a mapped output needs a positive CTA count, got {ctas}", self.kernel))
            });
        }
        let Some((t, tile)) =
            self.params.iter().find_map(|p| if let Param::Out(_, t, tile) = p { Some((t, tile)) } else { None })
        else {
            return Err(OpError::invalid(format!(
                "{}: a launch without an output partition needs its grid",
                self.kernel
            )));
        };
        let fits = t.shape.len() == tile.len() && t.shape.len() <= 3;
        if !fits || t.shape.iter().chain(tile).any(|&e| e <= 0) {
            return Err(OpError::invalid(format!(
                "{}: output {:?} does not take tiles {tile:?}",
                self.kernel, t.shape
            )));
        }
        let tiles = |axis: usize| t.shape.get(axis).map_or(1, |&extent| (extent as u32).div_ceil(tile[axis] as u32));
        Ok((tiles(0), tiles(1), tiles(2)))
    }
}

/// A described first launch through cutile's typed launcher: `$launcher` (after the
/// `$bind` statements that borrow its tensors) is the kernel's launcher called with the
/// description's arguments; it takes the spec's generics and options, resolves cutile's
/// key on the stream, then launches, recorded for replay ([`FirstLaunch::launch`]).
/// The call site needs `cutile::prelude::*` (the launcher's trait).
#[macro_export]
macro_rules! typed_launch {
    ($first:expr, { $($bind:stmt;)* } $launcher:expr) => {{
        let first: &$crate::launch::FirstLaunch = $first;
        let (generics, options) = (|| first.spec().generics(), || first.spec().options());
        first.launch(
            |s| {
                $($bind)*
                let l = $launcher.generics(generics()).compile_options(options());
                l.specialize_on(s).map(|k| k.into_l1_cache_key())
            },
            || {
                $($bind)*
                let l = $launcher.generics(generics()).compile_options(options());
                // SAFETY (async_on): completion is ordered by the caller's stream, as for any torch op.
                unsafe { l.async_on(&first.stream) }.map(|_| ())
            },
        )
    }};
}

/// Enqueues `launch` of `op` on the caller's `stream` of `device`, without waiting for it:
/// its key, values and spec all come from the one description. A launch equal to one
/// recorded before (same key) is replayed with this launch's values; otherwise `first`
/// launches it through cutile with the [`FirstLaunch`] it is given, whose
/// [`FirstLaunch::launch`] records it for replay with the description's grid and
/// arguments. In describe mode ([`crate::shipped`]) the spec is recorded and nothing
/// touches the GPU.
pub fn enqueue_launch(
    op: &'static str,
    launch: &Launch,
    device: i32,
    stream: u64,
    first: impl FnOnce(&FirstLaunch) -> OpResult<()>,
) -> OpResult<()> {
    if shipped::describing() {
        shipped::describe(launch.spec());
        return Ok(());
    }
    let ctx = runtime::context(device)?;
    let key = launch.key(device);
    if let Some(replay) = replay::get(&key.0) {
        // SAFETY: the op checked its views against the extents the key records; the
        // caller (torch) keeps the allocations and the stream alive, as for any launch.
        return unsafe { replay.launch(stream, &launch.values()) }
            .map_err(|e| runtime::launch_error(op, DeviceError::Driver(e)));
    }
    let replay = match launch.args() {
        Some(args) => Some((launch.grid()?, args)),
        None => None,
    };
    let stream = runtime::borrow_stream(&ctx, stream);
    first(&FirstLaunch { ctx, stream, op, key, spec: launch.spec(), replay })
}

/// A launch that was not recorded yet, for the op to make through cutile.
pub struct FirstLaunch {
    /// The device's primary context, bound to this thread.
    pub ctx: Arc<Context>,
    /// The caller's stream, borrowed.
    pub stream: Arc<Stream>,
    op: &'static str,
    key: Key,
    spec: KernelSpec,
    /// A described launch's grid and arguments ([`enqueue_launch`]).
    replay: Option<((u32, u32, u32), Args)>,
}

impl FirstLaunch {
    /// The launch's spec: its launcher takes generics and compile options from it.
    pub fn spec(&self) -> &KernelSpec {
        &self.spec
    }

    /// `t` as a cutile tensor of element type `T` in this launch's context, borrowed.
    ///
    /// # Safety
    /// `t` describes a live device allocation of `T` (its descriptor was checked) that the
    /// caller (torch) keeps alive while the work ordered on the stream runs, and an output
    /// is written by nobody else meanwhile.
    pub unsafe fn borrow<T: cutile::DType>(&self, t: &CheckedTensor) -> cutile::tensor::Tensor<T> {
        unsafe {
            cutile::tensor::Tensor::<T>::borrow_raw_parts(t.ptr, self.ctx.clone(), t.shape.clone(), t.strides.clone())
        }
    }

    /// Launches through cutile and records the launch for replay with the description's
    /// grid and arguments.
    ///
    /// `resolve(s)` yields cutile's key for this launch on stream `s` without
    /// compiling (`specialize_on`); `run()` makes the launch (`async_on` on
    /// `self.stream`). [`crate::typed_launch!`] writes both from one launcher.
    pub fn launch(
        &self,
        resolve: impl FnOnce(&Arc<Stream>) -> Result<TileFunctionKey, DeviceError>,
        run: impl FnOnce() -> Result<(), DeviceError>,
    ) -> OpResult<()> {
        let resolved =
            warm_start::launch(&self.ctx, &self.stream, self.op, self.key.signature(), &self.spec, resolve, run)?;
        if let (Some(cutile_key), Some((grid, args))) = (resolved, &self.replay) {
            replay::record(&self.key.0, &cutile_key, *grid, args.clone());
        }
        Ok(())
    }
}

/// What tests check each description against: the kernel's own signature.
#[cfg(test)]
pub(crate) mod signature {
    use super::{Launch, Param};

    /// The kind of each parameter of `launch`'s kernel, by name in order, read from its
    /// module's AST as cutile parses it: "out" (`&mut Tensor` or a mapped partition),
    /// "in" (`&Tensor`), or the scalar's type.
    fn kernel_params(launch: &Launch) -> Vec<(String, String)> {
        let module = (launch.module.ast)();
        let items = &module.ast().content.as_ref().expect("a kernel module has a body").1;
        let function = items
            .iter()
            .find_map(|item| match item {
                syn::Item::Fn(f) if f.sig.ident == launch.kernel => Some(f),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no kernel {} in {}", launch.kernel, launch.module.name));
        let kind = |ty: &syn::Type| match ty {
            syn::Type::Reference(r) if r.mutability.is_some() => "out".to_string(),
            syn::Type::Reference(_) => "in".to_string(),
            syn::Type::Path(p) => match p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default() {
                mapped if mapped == "MappedPartitionMut" => "out".to_string(),
                scalar => scalar,
            },
            _ => String::new(),
        };
        function
            .sig
            .inputs
            .iter()
            .map(|input| match input {
                syn::FnArg::Typed(t) => match &*t.pat {
                    syn::Pat::Ident(i) => (i.ident.to_string(), kind(&t.ty)),
                    _ => panic!("{}: a parameter that is not a name", launch.kernel),
                },
                syn::FnArg::Receiver(_) => panic!("{}: a method", launch.kernel),
            })
            .collect()
    }

    /// Panics unless `launch` lists its kernel's parameters: the same names, in order,
    /// each of its kind (an output, an input tensor, an i32 or an f32).
    pub(crate) fn assert_matches_kernel(launch: &Launch) {
        let described: Vec<(String, String)> = launch
            .params
            .iter()
            .map(|p| {
                let (name, kind) = match p {
                    Param::Out(n, ..) | Param::Mapped(n, ..) => (n, "out"),
                    Param::In(n, _) | Param::Index(n, _) => (n, "in"),
                    Param::Int(n, _) => (n, "i32"),
                    Param::F32(n, _) => (n, "f32"),
                };
                (name.to_string(), kind.to_string())
            })
            .collect();
        assert_eq!(
            described,
            kernel_params(launch),
            "{}: the description against the kernel's signature",
            launch.kernel
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::DType;

    #[test]
    fn keys_differ_in_everything_cutile_specializes_on() {
        let t = |ptr, stride| CheckedTensor { ptr, dtype: DType::F16, shape: vec![4, 8], strides: vec![stride, 1] };
        let key =
            |kernel, device, ptr, stride| Key::new("m_kernels", kernel, device).with(64).tensor(&t(ptr, stride)).0;
        let base = key("a", 0, 0x1000, 8);
        // One kernel name in two ops' modules: two launches.
        assert_ne!(base, Key::new("n_kernels", "a", 0).with(64).tensor(&t(0x1000, 8)).0);
        assert_eq!(base, key("a", 0, 0x2000, 8)); // another 16-byte-aligned pointer: the same launch
        assert_ne!(base, key("b", 0, 0x1000, 8));
        assert_ne!(base, key("a", 1, 0x1000, 8));
        assert_ne!(base, key("a", 0, 0x1002, 8)); // alignment class
        assert_ne!(base, key("a", 0, 0x1000, 16));
    }

    fn module() -> KernelModule {
        fn ast() -> cutile::cutile_compiler::ast::Module {
            unreachable!("a description's key, values, spec and args never build the module")
        }
        KernelModule { name: "m_kernels", ast, source_hash: "0" }
    }

    #[test]
    fn one_description_gives_the_key_values_arguments_and_grid() {
        let out =
            CheckedTensor { ptr: 0x1000, dtype: DType::BF16, shape: vec![2, 5, 512], strides: vec![2560, 512, 1] };
        let q = CheckedTensor { ptr: 0x2000, ..out.clone() };
        let start = IndexTensor { ptr: 0x3000, shape: vec![1], strides: vec![1] };
        fn launch<'a>(
            out: &'a CheckedTensor,
            start: &'a IndexTensor,
            window: i32,
            scale: f32,
            q: &'a CheckedTensor,
        ) -> Launch<'a> {
            let params = vec![
                Param::Out("out", out, vec![1, 4, 256]),
                Param::In("q", q),
                Param::Index("start_q", start),
                Param::F32("scale", scale),
                Param::Int("window", window),
            ];
            let hints = Hints::checked(0, 0).unwrap();
            Launch { module: module(), kernel: "k", generics: Generic::list(&[DType::BF16], &[4]), hints, params }
        }
        let launch = |window, scale, q| launch(&out, &start, window, scale, q);
        let base = launch(128, 0.5, &q);
        assert_eq!(base.values(), [Value::Ptr(0x1000), Value::Ptr(0x2000), Value::Ptr(0x3000), Value::F32(0.5)]);
        let want = Args::default()
            .partition(0, &out.shape, &out.strides, &[1, 4, 256])
            .tensor(1, &q.shape, &q.strides)
            .tensor(2, &[1], &[1])
            .live(3, 0f32)
            .scalar(128);
        assert_eq!(format!("{:?}", base.args().unwrap()), format!("{want:?}"));
        assert_eq!(base.grid().unwrap(), (2, 2, 2));
        assert_eq!((base.tile::<3>("out"), base.int("window"), base.float("scale")), ([1, 4, 256], 128, 0.5));
        // The key pins integers, extents and alignment, not float scalars or a pointer's value.
        let (moved, misaligned) =
            (CheckedTensor { ptr: 0x4000, ..q.clone() }, CheckedTensor { ptr: 0x2002, ..q.clone() });
        assert_eq!(base.key(0).0, launch(128, 0.25, &moved).key(0).0);
        assert_ne!(base.key(0).0, launch(64, 0.5, &q).key(0).0);
        assert_ne!(base.key(0).0, launch(128, 0.5, &misaligned).key(0).0);
        assert_ne!(base.key(0).0, Launch { generics: Generic::list(&[DType::F16], &[4]), ..base.clone() }.key(0).0);
        assert_ne!(base.key(0).0, Launch { generics: Generic::list(&[DType::BF16], &[8]), ..base.clone() }.key(0).0);
        let spec = base.spec();
        assert_eq!(spec.generics(), ["bf16", "4"]);
        let names: Vec<&str> = spec.spec_args.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!((names, spec.scalar_hints.len()), (vec!["out", "q", "start_q"], 1));
    }

    #[test]
    fn a_mapped_output_replays_with_its_partition_arguments_over_its_ctas() {
        let c =
            CheckedTensor { ptr: 0x1000, dtype: DType::BF16, shape: vec![4, 1024, 512], strides: vec![524288, 512, 1] };
        let a = CheckedTensor { ptr: 0x2000, ..c.clone() };
        let launch = |ctas| Launch {
            module: module(),
            kernel: "k",
            generics: Generic::list(&[DType::BF16], &[128]),
            hints: Hints::checked(0, 0).unwrap(),
            params: vec![
                Param::Mapped("c", &c, vec![1, 128, 128], [1, 8, 1], ctas),
                Param::In("a", &a),
                Param::Int("tf32", 0),
            ],
        };
        let want = Args::default()
            .partition(0, &c.shape, &c.strides, &[1, 128, 128])
            .tensor(1, &a.shape, &a.strides)
            .scalar(0);
        assert_eq!(format!("{:?}", launch(128).args().unwrap()), format!("{want:?}"));
        assert_eq!(launch(128).grid().unwrap(), (128, 1, 1));
        assert_eq!(launch(128).mapping("c"), ([1, 8, 1], 128));
        assert!(launch(0).grid().is_err());
        assert_ne!(launch(128).key(0).0, launch(64).key(0).0); // the CTA count is part of the launch
    }
}
