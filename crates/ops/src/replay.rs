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

/// One kernel parameter, in cutile's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arg {
    /// The launch's `pointers[i]`.
    Pointer(usize),
    I32(i32),
}

/// A kernel's parameters as cutile's launchers push them.
#[derive(Clone, Debug, Default)]
pub struct Args(Vec<Arg>);

impl Args {
    /// A `&mut Tensor` output bound by `partition(tile)`: pointer, shape,
    /// strides, tile shape, then the tensor's strides again (cutile's partition strides).
    pub fn partition(mut self, pointer: usize, shape: &[i32], strides: &[i32], tile: &[i32]) -> Self {
        self.0.push(Arg::Pointer(pointer));
        self.0.extend(shape.iter().chain(strides).chain(tile).chain(strides).map(|&v| Arg::I32(v)));
        self
    }

    /// A `&Tensor` input: pointer, shape, strides.
    pub fn tensor(mut self, pointer: usize, shape: &[i32], strides: &[i32]) -> Self {
        self.0.push(Arg::Pointer(pointer));
        self.0.extend(shape.iter().chain(strides).map(|&v| Arg::I32(v)));
        self
    }

    /// An `i32` scalar parameter.
    pub fn scalar(mut self, value: i32) -> Self {
        self.0.push(Arg::I32(value));
        self
    }

    fn pointers(&self) -> usize {
        self.0.iter().filter(|a| matches!(a, Arg::Pointer(_))).count()
    }
}

/// A launch cutile made, ready to repeat with other data pointers.
pub struct Replay {
    function: Arc<Function>,
    grid: (u32, u32, u32),
    args: Args,
}

impl Replay {
    /// Enqueues the kernel on `stream` with `pointers` in place of the recorded ones.
    /// The caller has bound the function's context to this thread.
    ///
    /// # Safety
    /// `pointers` are device allocations of the extents the replay key describes,
    /// live until the work on `stream` completes; `stream` is a live stream of
    /// the function's context.
    pub unsafe fn launch(&self, stream: u64, pointers: &[u64]) -> Result<(), cuda_core::DriverError> {
        assert_eq!(pointers.len(), self.args.pointers(), "a replay takes as many pointers as it recorded");
        // Each value in its own 8-byte slot: cuLaunchKernel reads each parameter's size from its pointer.
        let mut values = [[0u8; 8]; MAX_ARGS];
        let mut params = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
        let n = self.args.0.len();
        for (slot, arg) in values.iter_mut().zip(&self.args.0) {
            match *arg {
                Arg::Pointer(i) => *slot = pointers[i].to_ne_bytes(),
                Arg::I32(v) => slot[..4].copy_from_slice(&v.to_ne_bytes()),
            }
        }
        for (p, slot) in params.iter_mut().zip(values.iter_mut()).take(n) {
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

/// Whether `function` takes exactly `args`: 8 bytes per pointer, 4 per i32, and
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
    let sizes_match = args.0.iter().enumerate().all(|(i, arg)| {
        size_of(i)
            == Some(match arg {
                Arg::Pointer(_) => 8,
                Arg::I32(_) => 4,
            })
    });
    sizes_match && size_of(args.0.len()).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_follow_cutiles_push_order() {
        let args = Args::default().partition(0, &[3, 5], &[5, 1], &[1, 8]).tensor(1, &[3, 5], &[7, 1]);
        use Arg::{Pointer as P, I32 as I};
        let want = [P(0), I(3), I(5), I(5), I(1), I(1), I(8), I(5), I(1), P(1), I(3), I(5), I(7), I(1)];
        assert_eq!(args.0, want);
        assert_eq!(args.pointers(), 2);
    }

    #[test]
    fn an_unrecorded_key_has_no_replay() {
        assert!(get(&[i64::MIN, 42]).is_none());
    }
}
