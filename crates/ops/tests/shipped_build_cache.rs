//! The shipped-kernel build cache ($TILEGYM_CUTILE_RS_SHIP_CACHE), on a machine without a
//! GPU: a rebuild of an unchanged kernel takes its entry from the cache, byte for byte, a
//! changed kernel misses and compiles, and a damaged cache file is compiled again.
//! (Its own test binary: the variable is process-wide.)

use cutile_ops::abi::ffi::{TensorDesc, CUTILE_DTYPE_BF16, CUTILE_OK};
use cutile_ops::ffi::{cutile_describe_begin, cutile_describe_end, cutile_shipped_build};
use cutile_ops::shipped::{cache_reused, SHIP_CACHE_ENV};
use cutile_ops::softmax::ffi::cutile_softmax;
use std::ffi::CString;
use std::path::Path;

fn view(m: i64, n: i64) -> TensorDesc {
    TensorDesc { ptr: 1 << 40, ndim: 2, shape: [m, n, 0, 0, 0], strides: [n, 1, 0, 0, 0], dtype: CUTILE_DTYPE_BF16 }
}

/// Describes one sm_90 softmax launch of `[4096, n]` bfloat16 with tiles `[1, block_n]`,
/// then builds what was described into `out`; returns the entries written.
fn build(out: &Path, n: i64, block_n: i32) -> i32 {
    let arch = CString::new("sm_90").unwrap();
    let (x, y) = (view(4096, n), view(4096, n));
    unsafe {
        assert_eq!(cutile_describe_begin(arch.as_ptr()), CUTILE_OK);
        assert_eq!(cutile_softmax(&x, &y, 1, block_n, 0, 0, 0, -1, 0), CUTILE_OK);
    }
    let mut described = 0;
    assert_eq!(unsafe { cutile_describe_end(&mut described) }, CUTILE_OK);
    let out = CString::new(out.to_str().unwrap()).unwrap();
    let mut written = 0;
    assert_eq!(unsafe { cutile_shipped_build(out.as_ptr(), 1, &mut written) }, CUTILE_OK);
    written
}

fn entry(out: &Path) -> Vec<u8> {
    let mut files: Vec<_> = std::fs::read_dir(out.join("sm_90")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1);
    std::fs::read(files.pop().unwrap()).unwrap()
}

#[test]
fn unchanged_kernels_come_from_the_cache_and_changed_ones_compile() {
    let root = std::env::temp_dir().join(format!("shipped_build_cache_{}", std::process::id()));
    let cache = root.join("cache");
    std::env::set_var(SHIP_CACHE_ENV, &cache);

    assert_eq!(build(&root.join("a"), 4096, 4096), 1);
    assert_eq!(cache_reused(), 0);
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1);

    // The same kernel again: served by the cache, the very entry tileiras made.
    assert_eq!(build(&root.join("b"), 4096, 4096), 1);
    assert_eq!(cache_reused(), 1);
    assert_eq!(entry(&root.join("a")), entry(&root.join("b")));

    // Another kernel (other tiles, so other generics): a miss, compiled and stored.
    assert_eq!(build(&root.join("c"), 4096, 2048), 1);
    assert_eq!(cache_reused(), 1);
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 2);
    assert_ne!(entry(&root.join("a")), entry(&root.join("c")));

    // A damaged cache file is not reused: the kernel compiles again, and the file is replaced.
    for file in std::fs::read_dir(&cache).unwrap() {
        let path = file.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        std::fs::write(&path, bytes).unwrap();
    }
    assert_eq!(build(&root.join("d"), 4096, 4096), 1);
    assert_eq!(cache_reused(), 1);
    assert_eq!(entry(&root.join("a")), entry(&root.join("d")));
    assert_eq!(build(&root.join("e"), 4096, 4096), 1);
    assert_eq!(cache_reused(), 2);

    std::env::remove_var(SHIP_CACHE_ENV);
    let _ = std::fs::remove_dir_all(&root);
}
