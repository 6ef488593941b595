//! The persistent layer kernel's safety net, on whatever Vulkan device exists, validation
//! on: with more workgroups than can ever be resident at once its grid barriers give up
//! after a bounded spin, the stall is reported in the token result, and the sync words and
//! attention counters are left zero for the next dispatch; with the residency bound the
//! same dispatch reports nothing, for the f16 kernels, a block-format one and a two-format
//! one. (Their arithmetic is checked through the model: sluice-llm tests/persistent.rs.)

use sluice::kernel::KernelDesc;
use sluice::testing::{test_device, ValidationGuard};
use sluice::{Buffer, Device, ResourceClass};
use sluice_kernels::*;

mod common;
use common::*;

/// What one run leaves: result words, sync words, attention counters, x after the layer.
type Outcome = (Vec<u32>, Vec<u32>, Vec<u32>, Vec<f32>);

/// Runs the kernel once over a small layer (weights zero, or random with `rng`) with
/// `groups` workgroups.
fn run(d: &Device, kernel: &KernelDesc, groups: u32, mut rng: Option<&mut Rng>) -> Outcome {
    let (heads, kv_heads, hd, capacity) = (2u32, 1u32, 8u32, 16u32);
    // inter > 4096: the down projection stages its input in two tiles.
    let (hidden, q_dim, inter, qkv_rows) = (512u32, heads * hd, 4608u32, 32u32);
    let pos = 3u32;
    let f32s = |name: &str, n: u32| {
        f32_buffer(d, name, &vec![0.5; n as usize], ResourceClass::TokenScratch)
    };
    let u32s =
        |name: &str, n: u32| u32_buffer(d, name, &vec![0; n as usize], ResourceClass::TokenScratch);
    // f16 matrices: rows x stride8 chunks of 8 values (four u32 of f16 pairs).
    let mut w = |name: &str, rows: u32, cols: u32| -> Buffer {
        let n = (rows * cols.div_ceil(8) * 8) as usize;
        let values = match rng.as_deref_mut() {
            Some(r) => r.vec(n, 0.25),
            None => vec![0.0; n],
        };
        u32_buffer(
            d,
            name,
            &pack_f16_pairs(&values),
            ResourceClass::TokenScratch,
        )
    };
    let params = u32_buffer(d, "params", &[1, pos, pos + 1, 0], ResourceClass::Generic);
    let bufs = [
        params,
        f32s("x", hidden),
        f32s("qkv", qkv_rows),
        f32s("attn", q_dim),
        f32s("h", inter),
        w("w_qkv", qkv_rows, hidden),
        w("w_o", hidden, q_dim),
        w("w_gate", inter, hidden),
        w("w_up", inter, hidden),
        w("w_down", hidden, inter),
        f32s("attn_norm", hidden),
        f32s("mlp_norm", hidden),
        f32s("q_norm", hd),
        f32s("k_norm", hd),
        u32s("k", kv_heads * capacity * hd / 2),
        u32s("v", kv_heads * capacity * hd / 2),
        f32s("partial", heads * (hd + 2)),
        u32s("counters", heads),
        u32s("sync", PERSISTENT_SYNC_WORDS as u32),
        u32s("result", 4),
        f32s("qkv_bias", qkv_rows),
        f32s("rope_freq", hd / 2),
        w("w_v", kv_heads * hd, hidden),
        w("w_next", qkv_rows, hidden),
    ];
    let push = PersistentLayerPush {
        attn: AttnRopePush {
            theta: 10000.0,
            ..decode_push(
                (heads, kv_heads, hd),
                capacity,
                (q_dim, q_dim + kv_heads * hd),
            )
        },
        qkv_rows,
        hidden,
        q_dim,
        inter,
        stride_hidden: hidden.div_ceil(8),
        stride_q: q_dim.div_ceil(8),
        stride_inter: inter.div_ceil(8),
        groups,
        // The two-format kernel runs its mixed path (v and down in the second format).
        stride_v: if kernel.name.contains("mix") {
            hidden.div_ceil(8)
        } else {
            0
        },
    };
    let k = d.pipeline(kernel).unwrap();
    let mut enc = d.encoder().unwrap();
    let slices: Vec<_> = bufs.iter().map(|b| b.slice(..)).collect();
    enc.dispatch(&k, [groups, 1, 1], &slices, &push).unwrap();
    enc.submit().unwrap().wait().unwrap();
    (
        bufs[19].read::<u32>(0, 4).unwrap(),
        bufs[18].read::<u32>(0, PERSISTENT_SYNC_WORDS).unwrap(),
        bufs[17].read::<u32>(0, heads as usize).unwrap(),
        bufs[1].read::<f32>(0, hidden as usize).unwrap(),
    )
}

#[test]
fn too_many_workgroups_stall_cleanly_and_leave_the_sync_words_zero() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    // The block-format kernels share the grid barriers and the exit path (their matvec ops
    // differ); zero Q8_0, Q4_K and Q6_K weights fit the f16 buffers and strides.
    for kernel in [
        &PERSISTENT_LAYER,
        &PERSISTENT_LAYER_B4,
        &PERSISTENT_LAYER_Q_Q8_0,
        &PERSISTENT_LAYER_MIX_Q4_K__Q6_K,
    ] {
        let name = kernel.name;
        // No device holds 4096 workgroups of 256 invocations at once (an H100: at most 8
        // per SM x 132): the first ones give up waiting, the rest see the abort flag.
        let (result, sync, counters, _) = run(&d, kernel, 4096, None);
        assert_eq!(
            result[3],
            PERSISTENT_ABORT_BIT | 4,
            "{name}: stall at position 3"
        );
        assert_eq!(
            sync,
            vec![0; PERSISTENT_SYNC_WORDS],
            "{name}: sync words reset"
        );
        assert_eq!(counters, vec![0, 0], "{name}: attention counters left zero");
        // Within the residency bound: no stall, and the words are zero again.
        let bound = persistent_residency(d.info().compute_units);
        let (result, sync, counters, _) = run(&d, kernel, bound, None);
        assert_eq!(result[3], 0, "{name}: no stall with {bound} workgroups");
        assert_eq!(sync, vec![0; PERSISTENT_SYNC_WORDS], "{name}");
        assert_eq!(counters, vec![0, 0], "{name}");
    }
}

#[test]
fn both_batch_widths_compute_the_same_layer() {
    // The model tests check the four-load kernel against the CPU reference (tiny models);
    // the eight-load one must agree with it up to summation order.
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let bound = persistent_residency(d.info().compute_units);
    let x8 = run(&d, &PERSISTENT_LAYER, bound, Some(&mut Rng::new(5))).3;
    let x4 = run(&d, &PERSISTENT_LAYER_B4, bound, Some(&mut Rng::new(5))).3;
    assert!(x4.iter().any(|&v| v != 0.5), "the layer changed x: {x4:?}");
    assert_nmse("x after the layer, 8 vs 4 loads", &x8, &x4, 1e-10);
}

#[test]
fn residency_bound_is_one_per_compute_unit_and_one_when_unknown() {
    assert_eq!(persistent_residency(0), 1);
    assert_eq!(persistent_residency(132), 132);
    assert_eq!(persistent_layer(1024).name, "persistent_layer_b4");
    assert_eq!(persistent_layer(2560).name, "persistent_layer");
}
