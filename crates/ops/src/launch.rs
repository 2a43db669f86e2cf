//! The launch protocol every op shares, written once: config checks, compile
//! options, the replay key, the replay fast path, and cutile's first launch of a
//! specialization through the warm-start index, recorded for replay. An op's
//! `launch.rs` keeps what is its own: its views' checks, its kernel choice, its
//! generics and its cutile launcher.
//!
//! A launch goes: [`enqueue`] binds the device's context and looks the [`Key`] up
//! in the replay table (a hit goes straight to `cuLaunchKernel`, `crate::replay`);
//! a miss hands the op a [`FirstLaunch`], whose [`FirstLaunch::run`] launches
//! through cutile (`crate::warm_start`) and records the launch for the next time.

use crate::abi::{CheckedTensor, OpResult};
use crate::replay::{self, Args, Value};
use crate::shipped;
use crate::spec::Hints;
use crate::spec::KernelSpec;
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

    /// A hash of the whole key, for the warm-start index's first-sight set.
    fn signature(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.0.hash(&mut h);
        h.finish()
    }
}

/// Enqueues one launch of `op`'s kernel on the caller's `stream` of `device`, without
/// waiting for it. `values` are the launch's data pointers and the scalars its key
/// does not pin, indexed as the op's replay `Args` name them. A launch equal to one
/// recorded before (same key) is replayed; otherwise `first` launches it through
/// cutile with the [`FirstLaunch`] it is given, which carries `spec()`: the launch's
/// kernel, generics, options and arguments, the one place the op spells them
/// (its launcher takes generics and options from it). In describe mode
/// ([`crate::shipped`]) the spec is recorded and nothing touches the GPU.
pub fn enqueue(
    op: &'static str,
    key: Key,
    device: i32,
    stream: u64,
    values: &[Value],
    spec: impl FnOnce() -> KernelSpec,
    first: impl FnOnce(&FirstLaunch) -> OpResult<()>,
) -> OpResult<()> {
    if shipped::describing() {
        shipped::describe(spec());
        return Ok(());
    }
    let ctx = runtime::context(device)?;
    if let Some(replay) = replay::get(&key.0) {
        // SAFETY: the op checked its views against the extents the key records; the
        // caller (torch) keeps the allocations and the stream alive, as for any launch.
        return unsafe { replay.launch(stream, values) }.map_err(|e| runtime::launch_error(op, DeviceError::Driver(e)));
    }
    let stream = runtime::borrow_stream(&ctx, stream);
    first(&FirstLaunch { ctx, stream, op, key, spec: spec() })
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

    /// Launches through cutile and records the launch for replay.
    ///
    /// `resolve(s)` yields cutile's key for this launch on stream `s` without
    /// compiling (`specialize_on`); `run()` makes the launch (`async_on` on
    /// `self.stream`); `replay()` gives the grid cutile derives and the kernel's
    /// arguments in cutile's order, asked only when the launch is to be recorded, or
    /// None for a kernel whose argument list the op does not spell out (it then
    /// always launches through cutile).
    pub fn run(
        &self,
        resolve: impl FnOnce(&Arc<Stream>) -> Result<TileFunctionKey, DeviceError>,
        run: impl FnOnce() -> Result<(), DeviceError>,
        replay: impl FnOnce() -> OpResult<Option<((u32, u32, u32), Args)>>,
    ) -> OpResult<()> {
        let resolved =
            warm_start::launch(&self.ctx, &self.stream, self.op, self.key.signature(), &self.spec, resolve, run)?;
        if let Some(cutile_key) = resolved {
            if let Some((grid, args)) = replay()? {
                replay::record(&self.key.0, &cutile_key, grid, args);
            }
        }
        Ok(())
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
}
