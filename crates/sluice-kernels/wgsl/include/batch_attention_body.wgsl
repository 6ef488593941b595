//! include: batch_attention_io
//! include: quant_x8
// Batched decode / paged KV attention: row r (rows[2r] = position p, rows[2r + 1] =
// sequence slot s) attends causally to positions [0, p] of its own sequence, found through
// the block table (position j of slot s lives in cache row
// table[s * max_blocks + j / block] * block + j % block). Rows are independent: a row's
// result does not depend on the other rows of the batch (batch invariance) — key tiles
// start at the row's split boundaries, which follow its own context, and every reduction
// has a fixed order. Splits (push field `splits` > 1): workgroup z takes split z of the
// row's keys (`split_range`); the last split of a (row, head) to finish merges the
// splits' partials in split order (`split_merge`, include/batch_attention_io.wgsl).
// Workgroup 128, one (row, split) per workgroup and its query heads as a `Lane`: the kernel
// file includes include/batch_attention_one_head.wgsl (batch_attention: Lane f32, dispatch
// [heads, n, z]) or include/batch_attention_gqa_heads.wgsl (batch_attention_gqa: Lane a vec4
// of up to 4 query heads of one key/value head, so each key and value is read once for
// the heads that share it; dispatch [kv_heads * ceil(group / 4), n, z],
// `sluice_kernels::batch_attention_kernel`). Keys in tiles of 128, one key per invocation
// for the scores (its row loaded 32 words at a time as eight
// 16-byte loads, all in flight before the products). Values: invocation (g, kl) owns the 8
// dims of group g = li % G (G = ceil(head_dim / 8)) for the keys kl, kl + L, ... of each
// tile (L = 128 / G), eight keys' 16-byte words loaded together; the L partial sums of a
// dim are added in kl order at the end (head_dim even, <= 256; the 16-byte loads where
// head_dim is a multiple of 8, 4-byte ones otherwise). Loads batched this way:
// qwen3-0.6b 32-row steps 4.07 -> 3.38 ms, 1024-token contexts 8.98 -> 4.89 ms
// (BENCHMARKS.md, tenth session). Caches: f16 pairs in u32,
// [kv_heads, capacity, head_dim]. q of row r at float r * q_stride + h * head_dim
// (pre-scaled here by `scale`), out at r * o_stride + h * head_dim (f32, or f16 pairs
// with `out_f16`; int8 blocks instead with `q8`, include/batch_attention_io.wgsl).

const WG: u32 = 128u;
const NEG: f32 = -3.0e38;

var<workgroup> qs: array<Lane, 256>; // dim d: the Lane's heads' q[d]
var<workgroup> ps: array<Lane, 128>;
var<workgroup> slots: array<u32, 128>;
var<workgroup> red: array<Lane, 128>;
var<workgroup> part: array<Lane, 1024>; // L x head_dim partial outputs

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(num_subgroups) nsg: u32, @builtin(subgroup_size) sgs: u32) {
    // This workgroup's key/value head and query heads h0 .. h0 + nh - 1.
    let heads = column_heads(wg.x);
    let kvh = heads.x;
    let h0 = heads.y;
    let nh = heads.z;
    let r = wg.y;
    let hd = pc.head_dim;
    let pairs = hd / 2u;
    // Split wg.z of the row's context: keys [sp.x, sp.y) of sp.z splits.
    let rs = row_split(r, wg.z);
    let sp = rs.xyz;
    let seq = rs.w;
    if (wg.z >= sp.z) {
        return;
    }
    let kv0 = kvh * pc.capacity;
    // Value work split: dim group g (pairs 4g .. 4g + 3), key lane kl of nl.
    let ng = (pairs + 3u) / 4u;
    let nl = WG / ng;
    let g = li % ng;
    let kl = li / ng;

    let pos = rows.d[2u * r];
    stage_heads(li, sg, lane, sgs, nsg, r, h0, nh, kvh, sp.x <= pos && pos < sp.y, seq, pos);
    var m = Lane(NEG);
    var l = Lane(0.0);
    var o: array<Lane, 8>;
    for (var k = 0u; k < 8u; k++) {
        o[k] = Lane(0.0);
    }
    for (var kb = sp.x; kb < sp.y; kb += WG) {
        workgroupBarrier(); // qs written; ps and slots of the previous tile consumed
        let j = kb + li;
        var score = Lane(NEG);
        var slot = 0u;
        if (j < sp.y) {
            slot = cache_row(seq, j);
            score = key_score((kv0 + slot) * pairs, pairs);
        }
        slots[li] = slot;
        let mt = max(m, reduce(sg, lane, nsg, score, 0u));
        let pj = select(Lane(0.0), exp(score - mt), j < sp.y);
        ps[li] = pj;
        let alpha = exp(m - mt);
        l = l * alpha + reduce(sg, lane, nsg, pj, 1u); // its barriers also publish ps and slots
        for (var k = 0u; k < 8u; k++) {
            o[k] *= alpha;
        }
        let nk = min(WG, sp.y - kb);
        if (kl < nl) {
            o = add_values(o, kl, nl, nk, kv0, pairs, g);
        }
        m = mt;
    }
    // Partial outputs of the key lanes, summed in lane order.
    if (kl < nl) {
        for (var k = 0u; k < 8u; k++) {
            let d = 8u * g + k;
            if (d < hd) {
                part[kl * hd + d] = o[k];
            }
        }
    }
    workgroupBarrier();
    if (!settle_splits(li, r * nwg.x + wg.x, wg.z, sp.z, nl, hd, m, l)) {
        return;
    }
    put_outputs(li, r, h0, nh, hd);
}
