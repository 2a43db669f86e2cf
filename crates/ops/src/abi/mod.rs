//! What every C export does on the Rust side: reading and checking a
//! `TensorDesc`, and turning an op's error or panic into a status code and a
//! per-thread message. The C-visible types and constants are in `abi/ffi.rs`.

pub mod ffi;

pub use self::ffi::{
    TensorDesc, CUTILE_DTYPE_BF16, CUTILE_DTYPE_F16, CUTILE_DTYPE_F32, CUTILE_DTYPE_I32, CUTILE_ERR_COMPILE_FAILED,
    CUTILE_ERR_DEVICE_INIT, CUTILE_ERR_INVALID_ARGUMENT, CUTILE_ERR_LAUNCH_FAILED, CUTILE_ERR_NULL_POINTER,
    CUTILE_ERR_PANIC, CUTILE_ERR_UNSUPPORTED_DTYPE, CUTILE_MAX_DIMS, CUTILE_OK,
};
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An error an op reports through its status code and `cutile_last_error`.
#[derive(Debug)]
pub struct OpError {
    pub code: i32,
    pub message: String,
}

impl OpError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(CUTILE_ERR_INVALID_ARGUMENT, message)
    }
}

pub type OpResult<T> = Result<T, OpError>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // Interior NULs would truncate the C string; replace them.
    let clean = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = clean);
}

/// Runs an op's body at the ABI boundary: a returned error or a panic becomes
/// a status code and a message for `cutile_last_error`, never an unwind into C.
pub fn ffi_guard(body: impl FnOnce() -> OpResult<()>) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            set_last_error("");
            CUTILE_OK
        }
        Ok(Err(err)) => {
            set_last_error(&err.message);
            err.code
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic payload".to_string());
            set_last_error(&format!("internal error (Rust panic caught at the C ABI): {what}"));
            CUTILE_ERR_PANIC
        }
    }
}

/// This thread's last error message (`cutile_last_error`), valid until its next op call.
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Element types a kernel may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    F32,
    F16,
    BF16,
}

impl DType {
    pub fn from_code(code: i32) -> OpResult<Self> {
        match code {
            CUTILE_DTYPE_F32 => Ok(Self::F32),
            CUTILE_DTYPE_F16 => Ok(Self::F16),
            CUTILE_DTYPE_BF16 => Ok(Self::BF16),
            other => Err(OpError::new(
                CUTILE_ERR_UNSUPPORTED_DTYPE,
                format!("unsupported dtype code {other}: expected float32 (0), float16 (1) or bfloat16 (2)"),
            )),
        }
    }
    /// The name cutile's JIT takes as a generic argument.
    pub fn jit_name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
        }
    }
}

/// A `TensorDesc` checked for the kernels' i32 index space.
#[derive(Clone, Debug)]
pub struct CheckedTensor {
    pub ptr: u64,
    pub dtype: DType,
    pub shape: Vec<i32>,
    pub strides: Vec<i32>,
}

impl CheckedTensor {
    /// Whether the tensor is row-major with no gaps: each dim of more than one element
    /// strides by the product of the sizes after it (dims of size 0 or 1 take any stride).
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1i64;
        for (&size, &stride) in self.shape.iter().zip(&self.strides).rev() {
            if size > 1 && i64::from(stride) != expected {
                return false;
            }
            expected *= i64::from(size);
        }
        true
    }
}

/// Reads and validates a descriptor pointer from C.
///
/// # Safety
/// `desc` must be null or point to a readable `TensorDesc`.
pub unsafe fn read_desc(desc: *const TensorDesc, name: &str) -> OpResult<CheckedTensor> {
    let (d, shape, strides) = unsafe { read_extents(desc, name) }?;
    Ok(CheckedTensor { ptr: d.ptr, dtype: DType::from_code(d.dtype)?, shape, strides })
}

/// An int32 tensor an op reads indices or offsets from (e.g. attention's `start_q`).
#[derive(Clone, Debug)]
pub struct IndexTensor {
    pub ptr: u64,
    pub shape: Vec<i32>,
    pub strides: Vec<i32>,
}

/// Reads and validates a descriptor of an int32 tensor from C.
///
/// # Safety
/// As for [`read_desc`].
pub unsafe fn read_index_desc(desc: *const TensorDesc, name: &str) -> OpResult<IndexTensor> {
    let (d, shape, strides) = unsafe { read_extents(desc, name) }?;
    if d.dtype != CUTILE_DTYPE_I32 {
        return Err(OpError::new(
            CUTILE_ERR_UNSUPPORTED_DTYPE,
            format!("{name}: dtype code {} is not int32 ({CUTILE_DTYPE_I32})", d.dtype),
        ));
    }
    Ok(IndexTensor { ptr: d.ptr, shape, strides })
}

/// A descriptor's extents, checked: rank, non-negative sizes and strides that fit i32
/// element offsets, a data pointer wherever there is data.
unsafe fn read_extents(desc: *const TensorDesc, name: &str) -> OpResult<(TensorDesc, Vec<i32>, Vec<i32>)> {
    if desc.is_null() {
        return Err(OpError::new(CUTILE_ERR_NULL_POINTER, format!("{name}: TensorDesc pointer is null")));
    }
    let d = unsafe { *desc };
    if d.ndim < 1 || d.ndim > CUTILE_MAX_DIMS {
        return Err(OpError::invalid(format!("{name}: ndim {} is outside 1..={CUTILE_MAX_DIMS}", d.ndim)));
    }
    let n = d.ndim as usize;
    let to_i32 = |v: i64, what: &str| -> OpResult<i32> {
        i32::try_from(v)
            .map_err(|_| OpError::invalid(format!("{name}: {what} {v} does not fit the kernels' 32-bit index type")))
    };
    let mut shape = Vec::with_capacity(n);
    let mut strides = Vec::with_capacity(n);
    for i in 0..n {
        if d.shape[i] < 0 {
            return Err(OpError::invalid(format!("{name}: negative size {} in dim {i}", d.shape[i])));
        }
        if d.strides[i] < 0 {
            return Err(OpError::invalid(format!("{name}: negative stride {} in dim {i}", d.strides[i])));
        }
        shape.push(to_i32(d.shape[i], "size")?);
        strides.push(to_i32(d.strides[i], "stride")?);
    }
    let numel: i64 = d.shape[..n].iter().product();
    if numel > 0 && d.ptr == 0 {
        return Err(OpError::new(CUTILE_ERR_NULL_POINTER, format!("{name}: data pointer is null")));
    }
    // The furthest element must be addressable with i32 element offsets.
    let extent: i64 = d.shape[..n].iter().zip(&d.strides[..n]).map(|(s, st)| (s - 1).max(0) * st).sum();
    to_i32(extent, "largest element offset")?;
    Ok((d, shape, strides))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        unsafe { CStr::from_ptr(last_error_ptr()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_becomes_a_status_and_the_thread_keeps_working() {
        assert_eq!(ffi_guard(|| panic!("boom {}", 42)), CUTILE_ERR_PANIC);
        assert!(last().contains("Rust panic caught at the C ABI): boom 42"), "{}", last());
        assert_eq!(ffi_guard(|| panic!("static")), CUTILE_ERR_PANIC);
        assert!(last().ends_with("static"));
        assert_eq!(ffi_guard(|| Ok(())), CUTILE_OK);
        assert_eq!(last(), "");
    }

    #[test]
    fn contiguity_ignores_the_strides_of_dims_of_one_element() {
        let t = |shape: &[i32], strides: &[i32]| CheckedTensor {
            ptr: 0x1000,
            dtype: DType::F16,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        };
        assert!(t(&[2, 3, 4], &[12, 4, 1]).is_contiguous());
        assert!(t(&[1, 3, 1], &[99, 1, 7]).is_contiguous());
        assert!(t(&[0, 3], &[5, 1]).is_contiguous());
        assert!(!t(&[2, 3, 4], &[16, 4, 1]).is_contiguous());
        assert!(!t(&[2, 3], &[1, 2]).is_contiguous());
    }

    #[test]
    fn errors_keep_their_code_and_message_per_thread() {
        assert_eq!(ffi_guard(|| Err(OpError::invalid("bad x\0y"))), CUTILE_ERR_INVALID_ARGUMENT);
        assert_eq!(last(), "bad x y");
        let other = std::thread::spawn(|| (ffi_guard(|| Ok(())), last())).join().unwrap();
        assert_eq!(other, (CUTILE_OK, String::new()));
        assert_eq!(last(), "bad x y");
    }
}
