//! Capture -> schedule -> record once -> replay, on real dispatches: random DAG-shaped
//! workloads give the same bytes as direct in-order execution, every schedule is valid,
//! and replays pass synchronization validation.

use proptest::prelude::*;
use sluice::graph::GraphOptions;
use sluice::schedule::is_valid;
use sluice::testing::{test_device, ValidationGuard};
use sluice::{Buffer, Device, Encoder, ResourceClass};
use sluice_kernels::{AffinePush, AFFINE_U32};

const WORDS: u32 = 128; // per buffer; nodes bind one half or the whole buffer
const BUFFERS: usize = 6;

#[derive(Clone, Debug)]
struct Op {
    src: usize,
    dst: usize,
    half: Option<u8>,
    mul: u32,
    add: u32,
}

fn op() -> impl Strategy<Value = Op> {
    (
        0..BUFFERS,
        0..BUFFERS,
        prop::option::of(0u8..2),
        1u32..9,
        0u32..1000,
    )
        .prop_filter("src != dst", |(s, d, ..)| s != d)
        .prop_map(|(src, dst, half, mul, add)| Op {
            src,
            dst,
            half,
            mul,
            add,
        })
}

fn setup(d: &Device) -> Vec<Buffer> {
    (0..BUFFERS)
        .map(|i| {
            let b = d
                .create_buffer(&format!("b{i}"), WORDS as u64 * 4, ResourceClass::Generic)
                .unwrap();
            b.write(
                0,
                &(0..WORDS).map(|w| w * 31 + i as u32).collect::<Vec<_>>(),
            )
            .unwrap();
            b
        })
        .collect()
}

fn encode(enc: &mut Encoder, d: &Device, bufs: &[Buffer], ops: &[Op]) {
    let k = d.pipeline(&AFFINE_U32).unwrap();
    for o in ops {
        let (range, n) = match o.half {
            None => (0..WORDS as u64 * 4, WORDS),
            Some(h) => {
                let half = WORDS as u64 * 2;
                (h as u64 * half..(h as u64 + 1) * half, WORDS / 2)
            }
        };
        let p = AffinePush {
            mul: o.mul,
            add: o.add,
            n,
        };
        enc.dispatch(
            &k,
            [n.div_ceil(64), 1, 1],
            &[bufs[o.src].slice(range.clone()), bufs[o.dst].slice(range)],
            &p,
        )
        .unwrap();
    }
}

fn read_all(bufs: &[Buffer]) -> Vec<Vec<u32>> {
    bufs.iter()
        .map(|b| b.read(0, WORDS as usize).unwrap())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, .. ProptestConfig::default() })]
    #[test]
    fn replayed_optimized_graph_equals_direct_order(ops in prop::collection::vec(op(), 1..40), lookahead in 1usize..64) {
        let d = test_device();
        let _guard = ValidationGuard::new(&d);
        // Direct, in order, run twice.
        let direct = setup(&d);
        for _ in 0..2 {
            let mut enc = d.encoder().unwrap();
            encode(&mut enc, &d, &direct, &ops);
            enc.submit().unwrap();
        }
        let want = read_all(&direct);
        // Captured, reordered, recorded once, replayed twice.
        let replayed = setup(&d);
        let mut cap = d.capture();
        encode(&mut cap, &d, &replayed, &ops);
        let mut graph = cap.finish_capture().unwrap();
        let in_order_barriers = graph.schedule().barriers();
        graph.optimize(GraphOptions { reorder: true, lookahead });
        prop_assert!(is_valid(graph.dependencies(), graph.schedule()));
        prop_assert!(graph.schedule().barriers() <= in_order_barriers);
        let replay = graph.record().unwrap();
        replay.submit().unwrap();
        replay.submit().unwrap();
        prop_assert_eq!(read_all(&replayed), want);
    }
}

#[test]
fn reorder_merges_independent_chains() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let bufs = setup(&d);
    // Two chains interleaved badly: 0->1->2 and 3->4->5, captured chain by chain.
    let ops: Vec<Op> = [(0, 1), (1, 2), (3, 4), (4, 5)]
        .iter()
        .map(|&(src, dst)| Op {
            src,
            dst,
            half: None,
            mul: 3,
            add: 1,
        })
        .collect();
    let mut cap = d.capture();
    encode(&mut cap, &d, &bufs, &ops);
    let mut graph = cap.finish_capture().unwrap();
    // In order: 0->1 | 1->2 + 3->4 | 4->5  = 2 barriers; reordered: {0,2} | {1,3} = 1.
    assert_eq!(graph.schedule().barriers(), 2);
    graph.optimize(GraphOptions::default());
    assert_eq!(graph.schedule().barriers(), 1);
    assert_eq!(graph.schedule().groups, vec![vec![0, 2], vec![1, 3]]);
    let dump = graph.dump();
    assert_eq!(dump.edges, vec![(0, 1), (2, 3)]);
    assert!(graph.dump_text().contains("---- barrier ----"));
    let replay = graph.record().unwrap();
    assert_eq!(replay.counters().dispatches, 4);
    assert_eq!(replay.counters().barriers, 1 + 1); // + the submit-boundary barrier
    let before = d.counters();
    replay.submit().unwrap().wait().unwrap();
    let after = d.counters().since(&before);
    assert_eq!((after.dispatches, after.barriers, after.submits), (4, 2, 1));
}

#[test]
fn capture_rejects_what_cannot_be_replayed() {
    let d = test_device();
    let bufs = setup(&d);
    let mut cap = d.capture();
    assert!(cap.copy(bufs[0].slice(..), bufs[1].slice(..)).is_err());
    assert!(d.encoder().unwrap().finish_capture().is_err());
    assert!(d.capture().submit().is_err());
}
