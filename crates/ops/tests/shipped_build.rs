//! The shipped-kernel build through the C ABI, on a machine without a GPU: a described
//! softmax launch compiles into an entry for each architecture, the same launch then
//! resolves to it, a launch of another shape does not, and a damaged entry is refused.

use cutile_ops::abi::ffi::{TensorDesc, CUTILE_DTYPE_BF16, CUTILE_OK};
use cutile_ops::ffi::{
    cutile_describe_begin, cutile_describe_end, cutile_shipped_build, cutile_shipped_enable, cutile_shipped_resolve,
};
use cutile_ops::softmax::ffi::cutile_softmax;
use std::ffi::CString;

fn view(m: i64, n: i64) -> TensorDesc {
    TensorDesc { ptr: 1 << 40, ndim: 2, shape: [m, n, 0, 0, 0], strides: [n, 1, 0, 0, 0], dtype: CUTILE_DTYPE_BF16 }
}

/// Describes one softmax launch of `[m, n]` bfloat16 with tiles `[block_m, block_n]` for `arch`.
fn describe(arch: &str, m: i64, n: i64, block_m: i32, block_n: i32) {
    let arch = CString::new(arch).unwrap();
    let (x, y) = (view(m, n), view(m, n));
    unsafe {
        assert_eq!(cutile_describe_begin(arch.as_ptr()), CUTILE_OK);
        // Device -1 and stream 0: describe mode never touches either.
        assert_eq!(cutile_softmax(&x, &y, block_m, block_n, 0, 0, 0, -1, 0), CUTILE_OK);
    }
    let mut described = 0;
    assert_eq!(unsafe { cutile_describe_end(&mut described) }, CUTILE_OK);
    assert_eq!(described, 1);
}

fn resolve() -> (i32, i32) {
    let (mut found, mut described) = (0, 0);
    assert_eq!(unsafe { cutile_shipped_resolve(&mut found, &mut described) }, CUTILE_OK);
    (found, described)
}

#[test]
fn a_described_launch_builds_resolves_and_is_checked() {
    let dir = std::env::temp_dir().join(format!("shipped_build_{}", std::process::id()));
    let out = CString::new(dir.to_str().unwrap()).unwrap();
    for arch in ["sm_80", "sm_90"] {
        describe(arch, 4096, 4096, 1, 4096);
        describe(arch, 4096, 4096, 1, 4096); // the same kernel twice: built once
    }
    let mut written = 0;
    assert_eq!(unsafe { cutile_shipped_build(out.as_ptr(), 2, &mut written) }, CUTILE_OK);
    assert_eq!(written, 2);
    for arch in ["sm_80", "sm_90"] {
        assert_eq!(std::fs::read_dir(dir.join(arch)).unwrap().count(), 1, "{arch}");
    }

    assert_eq!(unsafe { cutile_shipped_enable(out.as_ptr(), 0) }, CUTILE_OK);
    describe("sm_90", 4096, 4096, 1, 4096);
    describe("sm_90", 1000, 4096, 1, 4096); // another row count class: another kernel
    describe("sm_100", 4096, 4096, 1, 4096); // another architecture
    assert_eq!(resolve(), (1, 3));

    let entry = std::fs::read_dir(dir.join("sm_90")).unwrap().next().unwrap().unwrap().path();
    let mut bytes = std::fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&entry, bytes).unwrap();
    describe("sm_90", 4096, 4096, 1, 4096);
    assert_eq!(resolve(), (0, 1));
    let _ = std::fs::remove_dir_all(&dir);
}
