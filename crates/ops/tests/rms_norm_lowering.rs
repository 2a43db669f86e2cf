//! The RMSNorm kernels lower to Tile IR for every dtype and assemble with tileiras for
//! every architecture we ship for, on a machine without a GPU.

mod common;

use common::ARCHS;
use cutile_ops::rms_norm::kernel::rms_norm_kernels::__module_ast_self;

const N: i32 = 4096;

fn lower(kernel: &str, generics: &[&str], strides: &[(&str, &[i32])]) {
    common::lower_and_assemble(__module_ast_self, "rms_norm_kernels", kernel, generics, strides, &ARCHS);
}

#[test]
fn forward_lowers_for_every_dtype_and_architecture() {
    // A row shorter than its tile (GPT-OSS's 2880 in a 4096-wide tile).
    lower("rms_norm_forward", &["bf16", "1", "4096", "2880"], &[("y", &[2880, 1]), ("x", &[2880, 1]), ("w", &[1])]);
    for dtype in ["f32", "f16", "bf16"] {
        lower("rms_norm_forward", &[dtype, "2", "4096", "4096"], &[("y", &[N, 1]), ("x", &[N, 1]), ("w", &[1])]);
    }
}

#[test]
fn backward_and_dw_lower_for_every_dtype_and_architecture() {
    for dtype in ["f32", "f16", "bf16"] {
        let strides: &[(&str, &[i32])] =
            &[("dx", &[N, 1]), ("dw_part", &[N, 1]), ("dy", &[N, 1]), ("x", &[N, 1]), ("w", &[1])];
        lower("rms_norm_backward", &[dtype, "1", "4096", "4096", "16"], strides);
        lower("rms_norm_dw", &[dtype, "32", "128"], &[("dw", &[1]), ("dw_part", &[N, 1])]);
    }
}
