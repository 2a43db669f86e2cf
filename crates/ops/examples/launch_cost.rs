//! Host cost of one small softmax launch, piece by piece, on a GPU machine:
//!
//!     cargo build --release -p cutile_ops --example launch_cost
//!     target/release/examples/launch_cost [rows] [cols]
//!
//! Prints a table of host microseconds per call: the whole C export (which
//! replays its launch after the first, `cutile_ops::replay`), then the pieces
//! of cutile's launch path timed alone (descriptor checks, context and stream
//! lookup, cutile's tensors and launcher, `async_on`) down to a bare
//! `cuLaunchKernel` of the same compiled kernel with the same arguments, whose
//! output is checked against cutile's. Each figure is the best of ROUNDS rounds
//! of CALLS calls, the GPU drained around each round (one f32 softmax of a few
//! rows runs for less GPU time than its launch takes, so the GPU never holds the
//! host back). The kernel must compile once first: the Tile IR toolchain must
//! be on PATH or named by CUTILE_TILEIRAS_PATH, as for the wheel.

use cuda_core::{sys, Context, Stream};
use cutile::cuda_async::device_operation::{DeviceOp, ExecutionContext};
use cutile::prelude::*;
use cutile::tile_kernel::{kernel_cache_slot, CompileOptions};
use cutile_ops::abi::{read_desc, TensorDesc, CUTILE_DTYPE_F32};
use cutile_ops::runtime;
use cutile_ops::softmax::ffi::cutile_softmax;
use cutile_ops::softmax::kernel::softmax_kernels;
use std::ffi::c_void;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

const CALLS: usize = 2000;
const ROUNDS: usize = 10;
/// The config the Python heuristic picks for a few-row f32 softmax of <= 256 columns.
const BLOCK_M: i32 = 1;
const OCCUPANCY: i32 = 1;

fn check(rc: sys::CUresult, what: &str) {
    assert_eq!(rc, sys::cudaError_enum_CUDA_SUCCESS, "{what} failed: CUresult {rc}");
}

fn desc(ptr: u64, m: i64, n: i64) -> TensorDesc {
    TensorDesc { ptr, ndim: 2, shape: [m, n, 0, 0, 0], strides: [n, 1, 0, 0, 0], dtype: CUTILE_DTYPE_F32 }
}

/// Best host us per call of `f` over ROUNDS rounds, draining the GPU around each.
fn time(ctx: &Arc<Context>, mut f: impl FnMut()) -> f64 {
    for _ in 0..CALLS / 10 {
        f();
    }
    let mut best = f64::INFINITY;
    for _ in 0..ROUNDS {
        ctx.synchronize().expect("synchronize");
        let t0 = Instant::now();
        for _ in 0..CALLS {
            f();
        }
        ctx.synchronize().expect("synchronize");
        best = best.min(t0.elapsed().as_secs_f64() * 1e6 / CALLS as f64);
    }
    best
}

fn download(ptr: u64, len: usize) -> Vec<f32> {
    let mut host = vec![0f32; len];
    // SAFETY: ptr is a live allocation of len f32s; host has room for them.
    check(unsafe { sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), ptr, len * 4) }, "cuMemcpyDtoH");
    host
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("rows and cols are integers")).collect();
    let (m, n) = (*args.first().unwrap_or(&1), *args.get(1).unwrap_or(&256));
    assert!(n <= 1 << 16, "this measures the single-tile kernel: cols <= 65536");
    let block_n = n.next_power_of_two() as i32;
    let ctx = runtime::context(0).expect("CUDA device 0");
    let stream_handle = 0u64; // the legacy default stream, as torch's default current stream
    let stream: Arc<Stream> = runtime::borrow_stream(&ctx, stream_handle);

    let len = m * n;
    let mut x_ptr: sys::CUdeviceptr = 0;
    let mut y_ptr: sys::CUdeviceptr = 0;
    let mut raw_ptr: sys::CUdeviceptr = 0;
    let input: Vec<f32> = (0..len).map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0).collect();
    // SAFETY: plain allocations and a copy of `input` into the first.
    unsafe {
        check(sys::cuMemAlloc_v2(&mut x_ptr, len * 4), "cuMemAlloc");
        check(sys::cuMemAlloc_v2(&mut y_ptr, len * 4), "cuMemAlloc");
        check(sys::cuMemAlloc_v2(&mut raw_ptr, len * 4), "cuMemAlloc");
        check(sys::cuMemcpyHtoD_v2(x_ptr, input.as_ptr().cast(), len * 4), "cuMemcpyHtoD");
    }
    let (xd, yd) = (desc(x_ptr, m as i64, n as i64), desc(y_ptr, m as i64, n as i64));
    let ffi = || {
        // SAFETY: both descriptors describe live allocations of m x n f32.
        let rc = unsafe { cutile_softmax(&xd, &yd, BLOCK_M, block_n, OCCUPANCY, 0, 0, 0, stream_handle) };
        assert_eq!(rc, 0, "cutile_softmax failed with status {rc}");
    };
    ffi(); // compiles (or loads) the kernel
    ctx.synchronize().expect("first launch");
    let reference = download(y_ptr, len);

    // SAFETY (read_desc, here and below): both point at live TensorDescs.
    let (x, y) = unsafe { (read_desc(&xd, "x").unwrap(), read_desc(&yd, "y").unwrap()) };
    let tensors = |xp: u64, yp: u64| unsafe {
        // SAFETY: live allocations of the described extent, kept until the end of main.
        (
            Tensor::<f32>::borrow_raw_parts(xp, ctx.clone(), x.shape.clone(), x.strides.clone()),
            Tensor::<f32>::borrow_raw_parts(yp, ctx.clone(), y.shape.clone(), y.strides.clone()),
        )
    };
    let options = CompileOptions::default().occupancy(OCCUPANCY);
    let generics = || vec!["f32".to_string(), BLOCK_M.to_string(), block_n.to_string()];
    let tile = [BLOCK_M as usize, block_n as usize];

    // The compiled function, looked up as cutile's launcher does, for the bare launch.
    let key = {
        let (xt, mut yt) = tensors(x_ptr, y_ptr);
        let l = softmax_kernels::softmax_row_tile((&mut yt).partition(tile), &xt)
            .generics(generics())
            .compile_options(options.clone());
        l.specialize_on(&stream).expect("specialize").into_l1_cache_key()
    };
    let function = kernel_cache_slot(&key).get().expect("the first launch cached the kernel").0.function.clone();
    let grid = (m as u32).div_ceil(BLOCK_M as u32);
    // The launcher's arguments: y (pointer, shape, strides, tile shape, tile
    // strides) then x (pointer, shape, strides), as cutile pushes them.
    let (mi, ni) = (m as i32, n as i32);
    let mut y_dev = raw_ptr;
    let mut x_dev = x_ptr;
    let mut ints: [i32; 12] = [mi, ni, ni, 1, BLOCK_M, block_n, ni, 1, mi, ni, ni, 1];
    let raw_launch = |params: &mut [*mut c_void; 14]| {
        // SAFETY: the arguments match the kernel's parameters (checked below
        // against cutile's own launch) and point at live device memory.
        unsafe {
            cuda_core::launch_kernel(function.cu_function(), (grid, 1, 1), (1, 1, 1), 0, stream.cu_stream(), params)
        }
        .expect("cuLaunchKernel");
    };
    let mut params: [*mut c_void; 14] = [std::ptr::null_mut(); 14];
    params[0] = (&mut y_dev as *mut u64).cast();
    for (i, v) in ints[..8].iter_mut().enumerate() {
        params[1 + i] = (v as *mut i32).cast();
    }
    params[9] = (&mut x_dev as *mut u64).cast();
    for (i, v) in ints[8..].iter_mut().enumerate() {
        params[10 + i] = (v as *mut i32).cast();
    }
    raw_launch(&mut params);
    ctx.synchronize().expect("bare launch");
    let raw_out = download(raw_ptr, len);
    assert!(
        raw_out.iter().zip(&reference).all(|(a, b)| a.to_bits() == b.to_bits()),
        "the bare cuLaunchKernel's output differs from cutile's: its arguments are wrong"
    );

    // The kernel's parameter layout as the driver reports it, and whether the C export replays.
    // SAFETY: queries on a loaded function, writing locals; an index past the last fails.
    let layout: Vec<(usize, usize)> = (0..)
        .map_while(|i| unsafe {
            let (mut offset, mut size) = (0usize, 0usize);
            let rc = sys::cuFuncGetParamInfo(function.cu_function(), i, &mut offset, &mut size);
            (rc == sys::cudaError_enum_CUDA_SUCCESS).then_some((offset, size))
        })
        .collect();
    println!("kernel parameters (offset, size): {layout:?}");
    println!("links tile libraries: {}", kernel_cache_slot(&key).get().expect("cached").1);
    let before = cutile_ops::replay::replays();
    ffi();
    println!("the C export replayed its second launch: {}", cutile_ops::replay::replays() > before);

    let mut rows: Vec<(&str, f64)> = Vec::new();
    rows.push(("cutile_softmax, the C export (replayed after its first call)", time(&ctx, ffi)));
    rows.push((
        "read_desc x2 (descriptor checks)",
        time(&ctx, || unsafe {
            black_box(read_desc(black_box(&xd), "x").unwrap());
            black_box(read_desc(black_box(&yd), "y").unwrap());
        }),
    ));
    rows.push((
        "runtime::context (lock, bind_to_thread)",
        time(&ctx, || drop(black_box(runtime::context(0).unwrap()))),
    ));
    rows.push((
        "runtime::borrow_stream (lock, lookup)",
        time(&ctx, || drop(black_box(runtime::borrow_stream(&ctx, stream_handle)))),
    ));
    rows.push((
        "Tensor::borrow_raw_parts x2",
        time(&ctx, || drop(black_box(tensors(black_box(x_ptr), black_box(y_ptr))))),
    ));
    rows.push((
        "tensors + partition + launcher, not launched",
        time(&ctx, || {
            let (xt, mut yt) = tensors(x_ptr, y_ptr);
            let l = softmax_kernels::softmax_row_tile((&mut yt).partition(tile), &xt)
                .generics(generics())
                .compile_options(options.clone());
            drop(black_box(l));
        }),
    ));
    rows.push((
        "tensors + launcher + async_on (cutile's launch)",
        time(&ctx, || {
            let (xt, mut yt) = tensors(x_ptr, y_ptr);
            let l = softmax_kernels::softmax_row_tile((&mut yt).partition(tile), &xt)
                .generics(generics())
                .compile_options(options.clone());
            // SAFETY: the buffers outlive main's GPU work, drained by `time`.
            unsafe { l.async_on(&stream) }.expect("async_on");
        }),
    ));
    rows.push((
        "ExecutionContext::new, dropped",
        time(&ctx, || drop(black_box(ExecutionContext::new(stream.clone())))),
    ));
    rows.push(("Context::bind_to_thread", time(&ctx, || ctx.bind_to_thread().unwrap())));
    rows.push(("bare cuLaunchKernel, same kernel and arguments", time(&ctx, || raw_launch(&mut params))));

    println!("Host us per call, {m} x {n} float32 softmax (config {BLOCK_M}, {block_n}, {OCCUPANCY}, 0), best of {ROUNDS} rounds of {CALLS}:\n");
    println!("| step | us per call |\n| --- | --- |");
    for (what, us) in rows {
        println!("| {what} | {us:.2} |");
    }
    // SAFETY: every launch was drained by the last `time`.
    unsafe {
        for p in [x_ptr, y_ptr, raw_ptr] {
            check(sys::cuMemFree_v2(p), "cuMemFree");
        }
    }
}
