//! Replay: a launch that repeats one cutile has already made goes straight to
//! `cuLaunchKernel`.
//!
//! cutile's launcher redoes its whole path per launch: two borrowed tensors,
//! the launch-site probe, the launch checks, an access lease per buffer, a
//! retained function. On the H200 host that costs about 2.4 us on top of the
//! driver's own 3.1 us for `cuLaunchKernel` (`examples/launch_cost.rs`,
//! docs/benchmarks.md); with it our call took 1.9x torch.softmax's host time.
//!
//! Once cutile has launched a specialization (compiled or loaded its kernel and
//! passed its launch checks), a launch equal to it in everything cutile
//! specializes or checks on (the op's replay key: kernel, generics, options,
//! device, extents, strides, pointer alignment) resolves to the same function
//! and passes the same checks; only the data pointers differ. So the op records
//! the function, the grid and cutile's argument list, and later launches put
//! their pointers in and call the driver. The argument list is checked against
//! the kernel's own parameter layout (`cuFuncGetParamInfo`) before it is
//! recorded, and kernels that link tile libraries (whose files cutile checks
//! on every launch) are never recorded: either leaves the launch to cutile.

use cuda_core::{sys, Function};
use cutile::tile_kernel::{kernel_cache_slot, TileFunctionKey};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// Most kernel parameters a replay passes (cutile's inline launch arena holds 32 too).
const MAX_ARGS: usize = 32;
/// Recorded launches kept before the table is cleared (each holds only an Arc).
const TABLE_MAX: usize = 4096;

static REPLAYS: AtomicU64 = AtomicU64::new(0);

/// Launches this process replayed instead of going through cutile's launcher.
pub fn replays() -> u64 {
    REPLAYS.load(Ordering::Relaxed)
}

/// A value a kernel parameter takes, of any scalar kind an op passes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A device address.
    Ptr(u64),
    I32(i32),
    I64(i64),
    U64(u64),
    F32(f32),
}

impl Value {
    /// The parameter's size in bytes, as the kernel's layout has it.
    fn size(self) -> usize {
        match self {
            Self::I32(_) | Self::F32(_) => 4,
            Self::Ptr(_) | Self::I64(_) | Self::U64(_) => 8,
        }
    }

    /// The value's bytes in an 8-byte slot (cuLaunchKernel reads `size()` of them).
    fn slot(self) -> [u8; 8] {
        let mut slot = [0u8; 8];
        match self {
            Self::Ptr(v) | Self::U64(v) => slot = v.to_ne_bytes(),
            Self::I64(v) => slot = v.to_ne_bytes(),
            Self::I32(v) => slot[..4].copy_from_slice(&v.to_ne_bytes()),
            Self::F32(v) => slot[..4].copy_from_slice(&v.to_ne_bytes()),
        }
        slot
    }
}

macro_rules! value_from {
    ($($t:ty => $v:ident),*) => {$(impl From<$t> for Value { fn from(v: $t) -> Self { Self::$v(v) } })*};
}
value_from!(i32 => I32, i64 => I64, u64 => U64, f32 => F32);

/// One kernel parameter, in cutile's order.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Arg {
    /// The same at every launch of the key (a shape, a stride, a tile edge).
    Fixed(Value),
    /// The launch's `values[index]`, of `size` bytes: a data pointer or a scalar
    /// such as `eps` that the key does not pin.
    Live { index: usize, size: usize },
}

/// A kernel's parameters as cutile's launchers push them.
#[derive(Clone, Debug, Default)]
pub struct Args(Vec<Arg>);

impl Args {
    /// A `&mut Tensor` output bound by `partition(tile)`, its pointer the launch's
    /// `values[pointer]`: pointer, shape, strides, tile shape, then the tensor's
    /// strides again (cutile's partition strides).
    pub fn partition(mut self, pointer: usize, shape: &[i32], strides: &[i32], tile: &[i32]) -> Self {
        self.0.push(Arg::Live { index: pointer, size: 8 });
        self.0.extend(shape.iter().chain(strides).chain(tile).chain(strides).map(|&v| Arg::Fixed(Value::I32(v))));
        self
    }

    /// A `&Tensor` input, its pointer the launch's `values[pointer]`: pointer, shape, strides.
    pub fn tensor(mut self, pointer: usize, shape: &[i32], strides: &[i32]) -> Self {
        self.0.push(Arg::Live { index: pointer, size: 8 });
        self.0.extend(shape.iter().chain(strides).map(|&v| Arg::Fixed(Value::I32(v))));
        self
    }

    /// A scalar parameter the replay key pins (the same at every launch of the key).
    pub fn scalar(mut self, value: impl Into<Value>) -> Self {
        self.0.push(Arg::Fixed(value.into()));
        self
    }

    /// A scalar parameter taken from each launch's `values[index]` (`like` gives its kind).
    pub fn live(mut self, index: usize, like: impl Into<Value>) -> Self {
        self.0.push(Arg::Live { index, size: like.into().size() });
        self
    }

    /// How many values a launch passes: one past the highest live index.
    fn lives(&self) -> usize {
        self.0
            .iter()
            .filter_map(|a| if let Arg::Live { index, .. } = a { Some(index + 1) } else { None })
            .max()
            .unwrap_or(0)
    }

    fn sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().map(|a| match a {
            Arg::Fixed(v) => v.size(),
            Arg::Live { size, .. } => *size,
        })
    }
}

/// A launch cutile made, ready to repeat with other data pointers.
pub struct Replay {
    function: Arc<Function>,
    grid: (u32, u32, u32),
    args: Args,
}

impl Replay {
    /// Enqueues the kernel on `stream` with this launch's `values` (data pointers and
    /// the scalars the key does not pin) in place of the recorded ones.
    /// The caller has bound the function's context to this thread.
    ///
    /// # Safety
    /// The pointers among `values` are device allocations of the extents the replay
    /// key describes, live until the work on `stream` completes; `stream` is a live
    /// stream of the function's context.
    pub unsafe fn launch(&self, stream: u64, values: &[Value]) -> Result<(), cuda_core::DriverError> {
        assert_eq!(values.len(), self.args.lives(), "a replay takes as many values as it recorded");
        // Each value in its own 8-byte slot: cuLaunchKernel reads each parameter's size from its pointer.
        let mut slots = [[0u8; 8]; MAX_ARGS];
        let mut params = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
        let n = self.args.0.len();
        for (slot, arg) in slots.iter_mut().zip(&self.args.0) {
            *slot = match *arg {
                Arg::Fixed(v) => v.slot(),
                Arg::Live { index, size } => {
                    assert_eq!(values[index].size(), size, "a replay's value {index} keeps its recorded kind");
                    values[index].slot()
                }
            };
        }
        for (p, slot) in params.iter_mut().zip(slots.iter_mut()).take(n) {
            *p = slot.as_mut_ptr().cast();
        }
        // SAFETY: the function, grid and argument list are what cutile launched
        // for this key, the parameter layout was checked when recorded, and the
        // caller vouches for the pointers and the stream.
        unsafe {
            cuda_core::launch_kernel(
                self.function.cu_function(),
                self.grid,
                (1, 1, 1),
                0,
                stream as sys::CUstream,
                &mut params[..n],
            )
        }?;
        REPLAYS.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Recorded launches by replay key.
type Table = RwLock<HashMap<Box<[i64]>, Arc<Replay>>>;

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// The replay recorded under `key`, if any.
pub fn get(key: &[i64]) -> Option<Arc<Replay>> {
    table().read().unwrap_or_else(|p| p.into_inner()).get(key).cloned()
}

/// Records the launch cutile just made for `cutile_key` under `key`, unless
/// its kernel links tile libraries or `args` do not match the kernel's parameters.
/// Returns whether it was recorded.
pub fn record(key: &[i64], cutile_key: &TileFunctionKey, grid: (u32, u32, u32), args: Args) -> bool {
    let slot = kernel_cache_slot(cutile_key);
    let Some((compiled, links_tile_libraries)) = slot.get() else { return false };
    if *links_tile_libraries || !layout_matches(&compiled.function, &args) {
        return false;
    }
    let replay = Arc::new(Replay { function: compiled.function.clone(), grid, args });
    let mut table = table().write().unwrap_or_else(|p| p.into_inner());
    if table.len() >= TABLE_MAX {
        table.clear();
    }
    table.insert(key.into(), replay);
    true
}

/// Whether `function` takes exactly `args`, each of its size, and
/// no parameter after them (`cuFuncGetParamInfo` refuses an index past the last;
/// `cuFuncGetParamCount` is newer than the R580 drivers).
fn layout_matches(function: &Function, args: &Args) -> bool {
    if args.0.len() > MAX_ARGS {
        return false;
    }
    // SAFETY: queries on a loaded function, writing locals.
    let size_of = |i: usize| unsafe {
        let (mut offset, mut size) = (0usize, 0usize);
        let rc = sys::cuFuncGetParamInfo(function.cu_function(), i, &mut offset, &mut size);
        (rc == sys::cudaError_enum_CUDA_SUCCESS).then_some(size)
    };
    let sizes_match = args.sizes().enumerate().all(|(i, size)| size_of(i) == Some(size));
    sizes_match && size_of(args.0.len()).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_follow_cutiles_push_order() {
        let args = Args::default().partition(0, &[3, 5], &[5, 1], &[1, 8]).tensor(1, &[3, 5], &[7, 1]);
        let p = |index| Arg::Live { index, size: 8 };
        let i = |v| Arg::Fixed(Value::I32(v));
        let want = [p(0), i(3), i(5), i(5), i(1), i(1), i(8), i(5), i(1), p(1), i(3), i(5), i(7), i(1)];
        assert_eq!(args.0, want);
        assert_eq!(args.lives(), 2);
    }

    #[test]
    fn every_scalar_kind_has_its_size_and_bytes() {
        let args = Args::default().scalar(7i32).scalar(-1i64).scalar(u64::MAX).live(0, 1e-6f32).live(1, 0u64);
        assert_eq!(args.sizes().collect::<Vec<_>>(), [4, 8, 8, 4, 8]);
        assert_eq!(args.lives(), 2);
        assert_eq!(Value::F32(1.5).slot()[..4], 1.5f32.to_ne_bytes());
        assert_eq!(Value::I64(-2).slot(), (-2i64).to_ne_bytes());
        assert_eq!(Value::I32(-3).slot()[..4], (-3i32).to_ne_bytes());
    }

    #[test]
    fn an_unrecorded_key_has_no_replay() {
        assert!(get(&[i64::MIN, 42]).is_none());
    }
}
