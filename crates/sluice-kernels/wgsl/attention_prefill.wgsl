//! include: attention_prefill_io
// Flash-attention prefill: causal, GQA, online softmax over tiles of 16 queries x 16 keys,
// reading the KV cache after the chunk's keys/values were appended (qk_norm_rope).
// Query t of the chunk (position pos + t) attends to positions [0, min(seq_len + t,
// capacity)) with seq_len = pos + 1 from the params buffer { token, pos, seq_len, pad }.
// Dispatch [ceil(tokens / 16), heads, 1], workgroup 256; head_dim even, <= 256.
// Caches: f16 pairs in u32, [kv_heads, capacity, head_dim]. q of token t at float
// t * q_stride (+ h * head_dim); out of token t, head h at float t * o_stride + h * head_dim.
//
// Invocation li: query row i = li / 16 of the block and lane c = li % 16. Scores: one
// (query, key) pair per invocation (q scaled in shared memory, key tile as f16 pairs with
// a padded row); the value tile then takes the key tile's place (25 KiB of shared memory:
// lavapipe allows 32). Softmax and values: the 16 invocations of a row keep identical copies of
// its running max m and sum l and own output dims c, c + 16, ... in registers.

struct U32s { d: array<u32> }

@group(0) @binding(2) var<storage, read> kcache: U32s;
@group(0) @binding(3) var<storage, read> vcache: U32s;

const BQ: u32 = 16u;
const BK: u32 = 16u;
const KROW: u32 = 129u; // padded u32s per key row (head_dim / 2 <= 128)
const NEG: f32 = -3.0e38;

var<workgroup> qs: array<f32, 4096>; // BQ x head_dim
var<workgroup> kvs: array<u32, 2064>; // BK x KROW: the key tile, then the value tile
var<workgroup> sc: array<f32, 256>; // BQ x BK

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let q0 = wg.x * BQ;
    let h = wg.y;
    let hd = pc.head_dim;
    let pairs = hd / 2u;
    let kvh = h / (pc.heads / pc.kv_heads);
    let row0 = kvh * pc.capacity * pairs; // first u32 of this kv head
    let i = li / 16u;
    let c = li % 16u;

    for (var e = li; e < BQ * hd; e += 256u) {
        let t = q0 + e / hd;
        var v = 0.0;
        if (t < pc.tokens) {
            v = q.d[t * pc.q_stride + h * hd + e % hd] * pc.scale;
        }
        qs[e] = v;
    }
    // Keys visible to the block's last valid query.
    let last = min(q0 + BQ, pc.tokens) - 1u;
    let kend = min(params.seq_len + last, pc.capacity);
    let my_seq = min(params.seq_len + q0 + i, pc.capacity);

    var m = NEG;
    var l = 0.0;
    var o: array<f32, 16>;
    for (var k = 0u; k < 16u; k++) {
        o[k] = 0.0;
    }
    let nd = hd / 16u; // dims per invocation, rounded down
    let rem = hd % 16u;

    for (var kb = 0u; kb < kend; kb += BK) {
        workgroupBarrier(); // previous tile fully used (and qs written, first time)
        for (var e = li; e < BK * pairs; e += 256u) {
            let j = e / pairs;
            let p = e % pairs;
            var kw = 0u;
            if (kb + j < kend) {
                kw = kcache.d[row0 + (kb + j) * pairs + p];
            }
            kvs[j * KROW + p] = kw;
        }
        workgroupBarrier();
        // Score of (query i, key c).
        {
            var acc = 0.0;
            for (var p = 0u; p < pairs; p++) {
                let kv = unpack2x16float(kvs[c * KROW + p]);
                acc += qs[i * hd + 2u * p] * kv.x + qs[i * hd + 2u * p + 1u] * kv.y;
            }
            sc[i * BK + c] = select(NEG, acc, kb + c < my_seq);
        }
        workgroupBarrier(); // scores written, key tile no longer read
        for (var e = li; e < BK * pairs; e += 256u) {
            let j = e / pairs;
            let p = e % pairs;
            var vw = 0u;
            if (kb + j < kend) {
                vw = vcache.d[row0 + (kb + j) * pairs + p];
            }
            kvs[j * KROW + p] = vw;
        }
        workgroupBarrier();
        // Online softmax update of row i (identical in its 16 invocations).
        var mt = m;
        for (var j = 0u; j < BK; j++) {
            mt = max(mt, sc[i * BK + j]);
        }
        let alpha = exp(m - mt);
        l *= alpha;
        for (var k = 0u; k < 16u; k++) {
            o[k] *= alpha;
        }
        for (var j = 0u; j < BK; j++) {
            if (kb + j < my_seq) {
                let pj = exp(sc[i * BK + j] - mt);
                l += pj;
                for (var k = 0u; k < 16u; k++) {
                    let d = c + 16u * k;
                    if (d < hd) {
                        let vv = unpack2x16float(kvs[j * KROW + d / 2u]);
                        o[k] += pj * select(vv.x, vv.y, (d & 1u) == 1u);
                    }
                }
            }
        }
        m = mt;
    }
    let t = q0 + i;
    if (t < pc.tokens) {
        let inv = 1.0 / l;
        for (var k = 0u; k < 16u; k++) {
            let d = c + 16u * k;
            if (d < hd) {
                out.d[t * pc.o_stride + h * hd + d] = o[k] * inv;
            }
        }
    }
}
