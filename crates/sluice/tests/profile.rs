//! Profiling of a replayed stream: one GPU span per dispatch, ordered by the barriers,
//! counters consistent, and zero queries when profiling is off.

use sluice::graph::GraphOptions;
use sluice::profile::{idle_ns, layer_table, op_table, DispatchTiming};
use sluice::testing::{test_device, ValidationGuard};
use sluice::ResourceClass;
use sluice_kernels::{AffinePush, AFFINE_U32};

fn capture(d: &sluice::Device) -> sluice::graph::Graph {
    let k = d.pipeline(&AFFINE_U32).unwrap();
    let bufs: Vec<_> = (0..4)
        .map(|i| {
            d.create_buffer(&format!("b{i}"), 1024, ResourceClass::Generic)
                .unwrap()
        })
        .collect();
    let mut cap = d.capture();
    for step in 0..6u32 {
        for chain in 0..2usize {
            let (a, b) = if step % 2 == 0 {
                (2 * chain, 2 * chain + 1)
            } else {
                (2 * chain + 1, 2 * chain)
            };
            cap.set_label(&format!(
                "{} L{step}",
                if chain == 0 { "left" } else { "right" }
            ));
            cap.dispatch(
                &k,
                [4, 1, 1],
                &[bufs[a].slice(..), bufs[b].slice(..)],
                &AffinePush {
                    mul: 3,
                    add: step,
                    n: 256,
                },
            )
            .unwrap();
        }
    }
    let mut g = cap.finish_capture().unwrap();
    g.optimize(GraphOptions::default());
    g
}

#[test]
fn profiled_replay_has_one_ordered_span_per_dispatch() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let graph = capture(&d);
    let replay = graph.record_with(true).unwrap();
    assert_eq!(
        replay.counters().timestamp_queries,
        2 * replay.counters().dispatches
    );
    let before = d.counters();
    replay.submit().unwrap().wait().unwrap();
    let delta = d.counters().since(&before);
    assert_eq!(delta.dispatches, 12);
    assert_eq!(delta.timestamp_queries, 24);
    assert_eq!(delta.barriers, replay.counters().barriers);
    let t = replay.timings().unwrap();
    assert_eq!(t.len(), 12, "one span per dispatch");
    for s in &t {
        assert!(s.end_ns >= s.begin_ns, "{s:?}");
    }
    // A barrier separates groups: every dispatch of group g+1 starts after group g ended.
    for a in &t {
        for b in &t {
            if b.group > a.group {
                assert!(b.begin_ns >= a.end_ns, "{b:?} began before {a:?} ended");
            }
        }
    }
    let ops = op_table(&t, |_| Some(2048));
    assert_eq!(ops.len(), 2);
    assert_eq!(ops.iter().map(|o| o.count).sum::<usize>(), 12);
    assert!((ops.iter().map(|o| o.share).sum::<f64>() - 1.0).abs() < 1e-9);
    // Bytes known for some dispatches of an op only: the op sums the known ones.
    let part = op_table(&t, |n| (n % 2 == 0).then_some(100));
    for o in &part {
        let known = t
            .iter()
            .filter(|s| s.op() == o.op && s.node % 2 == 0)
            .count() as u64;
        assert_eq!(o.bytes, (known > 0).then_some(100 * known), "{}", o.op);
    }
    assert!(idle_ns(&t) >= 0.0);
    // Per layer: six layers (the labels' L0..L5), each one dispatch of both ops, in order.
    let layers = layer_table(&t);
    assert_eq!(
        layers.iter().map(|r| r.layer).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    for r in &layers {
        let ops: Vec<&str> = r.ops.iter().map(|o| o.op.as_str()).collect();
        assert_eq!(ops, ["left", "right"], "layer {}", r.layer);
        for o in &r.ops {
            let want: Vec<f64> = t
                .iter()
                .filter(|s| s.label == format!("{} L{}", o.op, r.layer))
                .map(|s| s.us())
                .collect();
            assert_eq!(o.us, want, "{} L{}", o.op, r.layer);
            assert_eq!(o.kernels, [AFFINE_U32.name], "{} L{}", o.op, r.layer);
        }
    }
}

/// The per-layer table: an op's several dispatches in one layer kept apart in the order
/// they ran, layers sorted by number whatever order they ran in, unnumbered ops left out.
#[test]
fn layer_table_keeps_each_dispatch_of_a_layer() {
    let span = |label: &str, kernel: &str, begin: f64, us: f64| DispatchTiming {
        label: label.into(),
        kernel: kernel.into(),
        node: 0,
        group: 0,
        begin_ns: begin,
        end_ns: begin + us * 1e3,
    };
    let t = [
        span("embed", "embed_f16", 0.0, 1.0),
        span("attn.qkv L1", "q6", 9000.0, 3.0),
        span("attn.qkv L1", "q4", 8000.0, 5.0),
        span("attention L1", "attn", 12000.0, 2.0),
        span("attn.qkv L0", "q4", 1000.0, 4.0),
        span("lm_head", "head", 20000.0, 7.0),
    ];
    let rows = layer_table(&t);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].layer, 0);
    assert_eq!(rows[0].ops.len(), 1);
    assert_eq!(rows[1].layer, 1);
    let qkv = &rows[1].ops[0];
    assert_eq!(qkv.op, "attn.qkv");
    assert_eq!(qkv.us, [5.0, 3.0]);
    assert_eq!(qkv.kernels, ["q4", "q6"]);
    assert_eq!(rows[1].ops[1].op, "attention");
}

#[test]
fn profiling_off_records_no_queries() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let replay = capture(&d).record().unwrap();
    assert_eq!(replay.counters().timestamp_queries, 0);
    let before = d.counters();
    replay.submit().unwrap().wait().unwrap();
    assert_eq!(d.counters().since(&before).timestamp_queries, 0);
    assert!(replay.timings().is_err());
}
