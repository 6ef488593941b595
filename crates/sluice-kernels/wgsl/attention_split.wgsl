//! include: attention_chunk
//! include: attention_core
//! include: attention_finish
// Decode attention, split over the sequence (flash-decoding), both passes in one dispatch:
// every split writes its partial, and the last split of each head to finish merges them
// into attn (see include/attention_finish.wgsl; the same arithmetic as attention_combine);
// a lone non-empty split writes attn itself, with the same bits.
// With z workgroups (several tokens), token t attends causally over positions 0..=pos + t,
// reads its q t * q_stride floats later and writes partials and output after token t-1's.
// Dispatch [splits, heads, 1], workgroup 256. Workgroup (s, h) covers positions
// [s*chunk, min((s+1)*chunk, seq_len)) (chunk <= 256, head_dim even and <= 256) for query
// head h and kv head h / (heads / kv_heads), and writes, unnormalised,
//   partial[h, s, :] = (m = max score, l = sum exp(score - m), o[hd] = sum exp(score - m) v)
// with score = scale * q . k. An empty range writes m = -3e38, l = 0, o = 0 and returns
// at once. Caches: f16 pairs in u32, [kv_heads, capacity, head_dim].
//
// Scores: 16 lanes per position, each reading every 16th u32 of the key (coalesced); the
// 16 partial sums go to shared memory and are added after one barrier. Values: one lane
// per u32 column (f16 pair), 256 / (hd/2) position groups, summed in shared memory.

struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct Counters { d: array<atomic<u32>> }
struct Push {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    capacity: u32,
    chunk: u32,
    splits: u32,
    scale: f32,
    q_stride: u32,
}

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> q: F32s;
@group(0) @binding(2) var<storage, read> kcache: U32s;
@group(0) @binding(3) var<storage, read> vcache: U32s;
@group(0) @binding(4) @coherent var<storage, read_write> partial: F32s;
@group(0) @binding(5) var<storage, read_write> counters: Counters;
@group(0) @binding(6) var<storage, read_write> attn: F32s;
var<immediate> pc: Push;

// A head's output is written (include/attention_core.wgsl): nothing more here.
fn attn_written(tid: u32, out: u32, hd: u32, staged: bool) {}


@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let s = wg.x;
    let h = wg.y;
    let t = wg.z; // token (prefill): position pos + t, causal
    let hd = pc.head_dim;
    let pairs = hd / 2u;
    let obase = ((t * pc.heads + h) * pc.splits + s) * (hd + 2u);
    let seq = min(params.seq_len + t, pc.capacity);
    let chunk = attn_chunk(seq);
    let start = s * chunk;
    if (start >= seq) {
        return;
    }
    let n = min(seq - start, chunk);
    let kvh = h / (pc.heads / pc.kv_heads);
    // First u32 of position `start` of this kv head.
    let row0 = (kvh * pc.capacity + start) * pairs;

    if (tid < pairs) {
        let qb = t * pc.q_stride + h * hd + 2u * tid;
        qs[tid] = vec2<f32>(q.d[qb], q.d[qb + 1u]) * pc.scale;
    }
    workgroupBarrier();

    let used = min((seq + chunk - 1u) / chunk, pc.splits);
    attend(tid, sg_id, sg_lane, nsg, row0, n, obase, pairs, used == 1u, (t * pc.heads + h) * hd);
    if (used > 1u) {
        finish_head(tid, t * pc.heads + h, used, hd, pc.splits);
    }
}
