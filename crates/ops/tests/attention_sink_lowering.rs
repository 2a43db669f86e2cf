//! The attention-sink kernels lower to Tile IR and assemble with tileiras for every
//! architecture we ship for, on a machine without a GPU: bfloat16 and float16, head
//! dims 64 and 128, the one-pass, split and combine kernels.

mod common;

use common::ARCHS;
use cutile_ops::attention_sink::kernel::attention_sink_kernels::__module_ast_self;

/// q/out `[B, S_q, H*D]` and k/v `[B, S_kv, H_kv*D]`, contiguous, 8 KV heads of `group` query heads.
fn strides(d: i32, group: i32) -> [(&'static str, Vec<i32>); 4] {
    let (hd, kvd) = (8 * group * d, 8 * d);
    [
        ("q", vec![1 << 20, hd, 1]),
        ("k", vec![1 << 20, kvd, 1]),
        ("v", vec![1 << 20, kvd, 1]),
        ("out", vec![1 << 20, hd, 1]),
    ]
}

fn lower(kernel: &str, generics: &[&str], strides: &[(&str, Vec<i32>)]) {
    let strides: Vec<(&str, &[i32])> = strides.iter().map(|(n, s)| (*n, s.as_slice())).collect();
    common::lower_and_assemble(__module_ast_self, "attention_sink_kernels", kernel, generics, &strides, &ARCHS);
}

#[test]
fn one_pass_kernel_lowers_for_both_dtypes_and_head_dims() {
    // (dtype, sinks, BQ, GT, D, BN, GROUP, LAT): prefill tiles of 16 positions x 8 heads, and one
    // head a tile; the K/V loads with tileiras' latency and with a hint.
    for (e, s, bq, gt, d, bn, group, lat) in [
        ("bf16", "bf16", 16, 8, 64, 64, 8, 0),
        ("f16", "f32", 16, 8, 128, 64, 8, 0),
        ("bf16", "f32", 64, 1, 64, 64, 6, 0),
        ("bf16", "bf16", 16, 8, 128, 128, 8, 6),
    ] {
        let (bm, gd) = ((bq * gt).to_string(), (gt * d).to_string());
        let g = [
            e,
            s,
            &bq.to_string(),
            &gt.to_string(),
            &bm,
            &d.to_string(),
            &gd,
            &bn.to_string(),
            &group.to_string(),
            &lat.to_string(),
        ];
        let mut st = strides(d, group).to_vec();
        st.push(("sinks", vec![1]));
        st.push(("start_q", vec![1]));
        lower("attention_sink", &g, &st);
    }
}

#[test]
fn split_and_combine_kernels_lower() {
    for (e, d) in [("bf16", 64), ("f16", 128)] {
        let (bq, gt, group) = (2, 8, 8);
        let (bm, gd, g2) = ((bq * gt).to_string(), (gt * d).to_string(), (2 * gt).to_string());
        let (bq, gt, d_s) = (bq.to_string(), gt.to_string(), d.to_string());
        let mut st = strides(d, group).to_vec();
        st[3] = ("acc_out", vec![1 << 20, 64 * d, 1]);
        st.push(("ml_out", vec![1 << 10, 128, 1]));
        st.push(("sinks", vec![1]));
        st.push(("start_q", vec![1]));
        lower("attention_sink_split", &[e, e, &bq, &gt, &bm, &d_s, &gd, &g2, "64", &group.to_string(), "3"], &st);
        // The partials as [splits, B, S_q, *], one head a CTA: a chunk of 16 (D 64) or 8 (D 128)
        // splits a load.
        let combine = [
            ("out", vec![1 << 20, 64 * d, 1]),
            ("acc_in", vec![1 << 21, 1 << 20, 64 * d, 1]),
            ("ml_in", vec![1 << 11, 1 << 10, 128, 1]),
            ("sinks", vec![1]),
        ];
        let ch = if d == 64 { "16" } else { "8" };
        lower("attention_sink_combine", &[e, e, &gt, &d_s, ch], &combine);
    }
}

#[test]
fn training_kernels_lower() {
    // The forward that saves lse, and the backward's query and key kernels: one head a tile
    // (prefill, Llama-style groups) and 4 heads a tile, head dims 64 and 128.
    for (e, s, bq, gt, d, bn, group) in [("bf16", "bf16", 64, 1, 128, 64, 4), ("f16", "f32", 16, 4, 64, 64, 8)] {
        let (bm, gd) = ((bq * gt).to_string(), (gt * d).to_string());
        let (bq, gt_s, d_s, bn, group_s) =
            (bq.to_string(), gt.to_string(), d.to_string(), bn.to_string(), group.to_string());
        let rows = vec![1 << 16, 8 * group, 1]; // [B, S_q, H] float32 statistics
        let mut st = strides(d, group).to_vec();
        st.extend([("lse_out", rows.clone()), ("sinks", vec![1]), ("start_q", vec![1])]);
        lower("attention_sink_lse", &[e, s, &bq, &gt_s, &bm, &d_s, &gd, &bn, &group_s, "0"], &st);

        let qd = strides(d, group)[0].1.clone();
        let kd = strides(d, group)[1].1.clone();
        let dq = [
            ("dq", qd.clone()),
            ("delta_out", rows.clone()),
            ("dsink_out", rows.clone()),
            ("q", qd.clone()),
            ("k", kd.clone()),
            ("v", kd.clone()),
            ("out", qd.clone()),
            ("dout", qd.clone()),
            ("lse", rows.clone()),
            ("sinks", vec![1]),
            ("start_q", vec![1]),
        ];
        lower("attention_sink_backward_dq", &[e, s, &bq, &gt_s, &bm, &d_s, &gd, &bn, &group_s, "0"], &dq);
        let dkdv = [
            ("dk", kd.clone()),
            ("dv", kd.clone()),
            ("q", qd.clone()),
            ("k", kd.clone()),
            ("v", kd.clone()),
            ("dout", qd),
            ("lse", rows.clone()),
            ("delta", rows),
            ("start_q", vec![1]),
        ];
        lower("attention_sink_backward_dkdv", &[e, &bq, &gt_s, &bm, &d_s, &gd, &bn, &group_s], &dkdv);
    }
}
