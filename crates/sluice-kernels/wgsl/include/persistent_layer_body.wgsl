// One decoder layer of a decode step in one dispatch (the persistent lowering, decision
// 0006): `groups` workgroups, all resident at once, run the layer's five ops in order
//   qkv = W_qkv . rmsnorm(x) * attn_norm            (matvec, norm folded)
//   attn = attention_rope(qkv)                       (q/k norm, RoPE, KV append, split attention)
//   x += W_o . attn                                  (matvec, accumulate)
//   h = silu(W_gate . x') * (W_up . x'), x' = rmsnorm(x) * mlp_norm
//   x += W_down . h
// with a grid barrier between them instead of a pipeline barrier: every workgroup adds 1
// to sync[0] and spins until it reaches (op + 1) * groups. The spin is bounded: after
// SPIN_LIMIT polls a workgroup sets sync[1] (abort), every spinning workgroup leaves, the
// rest of the step computes garbage, and result[3] gets ABORT_BIT | (pos + 1) so the host
// reports a stall instead of a token (the device is never hung). The last workgroup to
// finish puts sync[0..3] back to 0, so every dispatch starts from zero.
//
// A matvec op gives each workgroup a contiguous block of ceil(rows / groups) rows, with
// `tpr` lanes per row (a power of two <= the subgroup size, as many as fit 256 threads) and
// a shuffle reduction within those lanes: no shared-memory reduction, no barrier. Its
// input (times the norm weight) is staged in shared memory once per workgroup, while the
// row's first weight loads are in flight. The kernel file includes the matvec ops for its
// weights, each defining `Pre`, `prefetch` and `matvec_op`: include/persistent_matvec_f16.wgsl
// or include/persistent_matvec_q.wgsl (block formats), both on the float input staging of
// include/persistent_stage.wgsl; and `qkv_op`, `down_prefetch`, `down_op`: the qkv and
// down ops, include/persistent_ops_one.wgsl (one format: q, k and v stacked) or
// include/persistent_ops_two.wgsl (a second format for v and down).
//
// While the attention runs on `splits * heads` workgroups, the others pull the weights the
// layer reads next (o, gate, up, down, then the next layer's qkv or the LM head) into L2,
// at most WARM_PER sectors each (warm_rest): the later ops then read L2, not DRAM
// (thirty-third session: 0.6B Q8_0 966 -> 995 tok/s, Q4_0 1018 -> 1055).
//
// Cross-workgroup data (x, qkv, attn, h, the attention partials) is @coherent: plain loads
// may be served stale from an SM's L1 (NOTES-toolchain, decision 0004). Weights are not.

struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct WVec { d: array<vec4<u32>> }
struct V4s { d: array<vec4<f32>> }
struct Counters { d: array<atomic<u32>> }
struct Push {
    // Attention (the names attention_rope_body reads).
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    capacity: u32,
    chunk: u32,
    splits: u32,
    scale: f32,
    flags: u32,
    eps: f32,
    theta: f32,
    k_offset: u32,
    v_offset: u32,
    // attention_rope's q8 output (0 here: the persistent layer has no integer-dot o).
    q8_at: u32,
    // Shapes: rows of the stacked qkv matrix, hidden size, q_dim (= o's columns),
    // intermediate size; each matrix's row stride in 8-element chunks.
    qkv_rows: u32,
    hidden: u32,
    q_dim: u32,
    inter: u32,
    stride_hidden: u32,
    stride_q: u32,
    stride_inter: u32,
    // Workgroups of the dispatch.
    groups: u32,
    // Row stride of a separate v matrix (kernels of two formats; else unused).
    stride_v: u32,
}

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) @coherent var<storage, read_write> xa: V4s;
@group(0) @binding(2) @coherent var<storage, read_write> qkv: F32s;
@group(0) @binding(3) @coherent var<storage, read_write> attn: F32s;
@group(0) @binding(4) @coherent var<storage, read_write> ha: V4s;
@group(0) @binding(5) var<storage, read> w_qkv: WVec;
@group(0) @binding(6) var<storage, read> w_o: WVec;
@group(0) @binding(7) var<storage, read> w_gate: WVec;
@group(0) @binding(8) var<storage, read> w_up: WVec;
@group(0) @binding(9) var<storage, read> w_down: WVec;
@group(0) @binding(10) var<storage, read> attn_norm: V4s;
@group(0) @binding(11) var<storage, read> mlp_norm: V4s;
@group(0) @binding(12) var<storage, read> q_norm: F32s;
@group(0) @binding(13) var<storage, read> k_norm: F32s;
@group(0) @binding(14) var<storage, read_write> kcache: U32s;
@group(0) @binding(15) var<storage, read_write> vcache: U32s;
@group(0) @binding(16) @coherent var<storage, read_write> partial: F32s;
@group(0) @binding(17) var<storage, read_write> counters: Counters;
@group(0) @binding(18) var<storage, read_write> sync: Counters;
@group(0) @binding(19) var<storage, read_write> result: U32s;
@group(0) @binding(20) var<storage, read> qkv_bias: F32s;
@group(0) @binding(21) var<storage, read> rope_freq: F32s;
// The v matrix of a layer of two formats (include/persistent_ops_two.wgsl); else bound to
// the qkv matrix and not read.
@group(0) @binding(22) var<storage, read> w_v: WVec;
// The next layer's stacked qkv matrix (after the last layer: the LM head), only warmed
// into L2 (warm_rest).
@group(0) @binding(23) var<storage, read> w_next: WVec;
var<immediate> pc: Push;

// A head's output is written (include/attention_core.wgsl): o reads the floats.
fn attn_written(tid: u32, out: u32, hd: u32, staged: bool) {}

// Polls of the arrival counter before a workgroup gives up (below lavapipe's 65535-iteration
// loop cap, so the abort path runs there too; ~20 ms on the H100).
const SPIN_LIMIT: u32 = 60000u;
// 32-byte sectors each invocation of an idle workgroup warms into L2 during the attention
// (warm_rest): on the H100 12 / 16 / 20 / 28 / 36 ran the 0.6B Q8_0 at 988 / 993 / 995 /
// 987 / 948 tok/s (past ~20 the warm-up outlasts the attention and holds up the barrier);
// on the H200 20 / 28 / 40 ran the 0.6B f16 tg128 at 995 / 992 / 949 tok/s. Where the
// attention's splits hold 64+ positions it runs longer and warm_rest takes twice this (the
// 0.6B f16 at depth 512 / 1024: 872 -> 894, 757 -> 770 tok/s; Q8_0 at 1024: 801 -> 826;
// three and four times it at 128+ positions lost at depth 512: BENCHMARKS.md, forty-seventh
// session).
const WARM_PER: u32 = 20u;
// Marks result[3] (the sticky first-bad position) as a stall of the persistent lowering.
const ABORT_BIT: u32 = 0x80000000u;

// Matrices, activations and norms a matvec op names.
const M_QKV: u32 = 0u;
const M_O: u32 = 1u;
const M_GATE: u32 = 2u;
const M_UP: u32 = 3u;
const M_DOWN: u32 = 4u;
const M_V: u32 = 5u;
const M_NEXT: u32 = 6u;
const A_X: u32 = 0u;
const A_QKV: u32 = 1u;
const A_ATTN: u32 = 2u;
const A_H: u32 = 3u;
const A_V: u32 = 4u;
const N_NONE: u32 = 0u;
const N_ATTN: u32 = 1u;
const N_MLP: u32 = 2u;

var<workgroup> ssq: array<f32, 256>;

fn w_load(m: u32, i: u32) -> vec4<u32> {
    switch m {
        case 0u: { return w_qkv.d[i]; }
        case 1u: { return w_o.d[i]; }
        case 2u: { return w_gate.d[i]; }
        case 3u: { return w_up.d[i]; }
        case 4u: { return w_down.d[i]; }
        case 6u: { return w_next.d[i]; }
        default: { return w_v.d[i]; }
    }
}

// Four inputs from vec4 `j` of an activation (x and h are vec4 views; zero padded).
fn act_load4(a: u32, j: u32) -> vec4<f32> {
    switch a {
        case 0u: { return xa.d[j]; }
        case 3u: { return ha.d[j]; }
        default: {
            let i = 4u * j;
            return vec4<f32>(attn.d[i], attn.d[i + 1u], attn.d[i + 2u], attn.d[i + 3u]);
        }
    }
}

// Float r of x (the only activation an op accumulates into).
fn x_load(r: u32) -> f32 {
    return xa.d[r >> 2u][r & 3u];
}

fn act_store(a: u32, r: u32, v: f32) {
    switch a {
        case 0u: { xa.d[r >> 2u][r & 3u] = v; }
        case 1u: { qkv.d[r] = v; }
        case 4u: { qkv.d[pc.v_offset + r] = v; }
        default: { ha.d[r >> 2u][r & 3u] = v; }
    }
}

fn norm_load4(n: u32, j: u32) -> vec4<f32> {
    switch n {
        case 1u: { return attn_norm.d[j]; }
        case 2u: { return mlp_norm.d[j]; }
        default: { return vec4<f32>(1.0); }
    }
}

// Sum over the workgroup (all invocations call it).
fn wg_total(v: f32, li: u32, sg_id: u32, sg_lane: u32, nsg: u32) -> f32 {
    let s = subgroupAdd(v);
    if (sg_lane == 0u) {
        ssq[sg_id] = s;
    }
    workgroupBarrier();
    var t = 0.0;
    for (var j = 0u; j < nsg; j++) {
        t += ssq[j];
    }
    workgroupBarrier();
    return t;
}

// The workgroups that share the matvec op being run (pc.groups, but fewer while the qkv
// phase of a two-format layer splits them between q/k and v: persistent_ops_two.wgsl);
// `wgi` counts within them.
var<private> op_groups: u32;

// Which rows a workgroup owns in a matvec op and how its invocations map onto them:
// rows [r0, r1), tpr lanes per row (a power of two <= the subgroup), rpp rows per pass.
struct RowMap { r0: u32, r1: u32, tpr: u32, rpp: u32, lane: u32 }

fn row_map(rows: u32, wgi: u32, li: u32, sg: u32) -> RowMap {
    let per = (rows + op_groups - 1u) / op_groups;
    let r0 = min(wgi * per, rows);
    let want = max(256u / max(per, 1u), 1u);
    let tpr = min(1u << (31u - countLeadingZeros(want)), sg);
    return RowMap(r0, min(r0 + per, rows), tpr, 256u / tpr, li % tpr);
}



// Grid barrier number `k` (1-based) of the dispatch: release this workgroup's writes,
// arrive, wait for every workgroup (bounded), acquire theirs.
fn grid_sync(k: u32, li: u32) {
    storageBarrier();
    if (li == 0u) {
        atomicAdd(&sync.d[0], 1u);
        let goal = k * pc.groups;
        var polls = 0u;
        loop {
            if (atomicLoad(&sync.d[0]) >= goal || atomicLoad(&sync.d[1]) != 0u) {
                break;
            }
            polls += 1u;
            if (polls >= SPIN_LIMIT) {
                atomicStore(&sync.d[1], 1u);
                break;
            }
        }
    }
    workgroupBarrier();
    storageBarrier();
}

// XOR of one word of each 32-byte sector t, t + n, ... < sectors of matrix `m` (L2
// warm-up loads, four in flight).
fn warm_matrix(m: u32, sectors: u32, t: u32, n: u32) -> u32 {
    var acc = 0u;
    var s = t;
    for (; s + 3u * n < sectors; s += 4u * n) {
        acc ^= w_load(m, 2u * s).x ^ w_load(m, 2u * (s + n)).x ^ w_load(m, 2u * (s + 2u * n)).x
            ^ w_load(m, 2u * (s + 3u * n)).x;
    }
    for (; s < sectors; s += n) {
        acc ^= w_load(m, 2u * s).x;
    }
    return acc;
}

// warm_matrix over the first min(sectors of `m` (len4 vec4s), *left) sectors; takes them
// from the budget *left.
fn warm_part(m: u32, len4: u32, t: u32, n: u32, left: ptr<function, u32>) -> u32 {
    let sectors = min(len4 / 2u, *left);
    *left -= sectors;
    return warm_matrix(m, sectors, t, n);
}

// Workgroup k of n (those without an attention item) pulls the weights the layer reads
// next (o, gate, up, down, then w_next) into L2 while the attention runs: at most WARM_PER
// sectors per invocation, so few idle workgroups (long contexts) never hold up the grid
// barrier. The loaded words reach only sync word 3, written when their XOR is one value
// (never read), so the loads cannot be dropped.
fn warm_rest(k: u32, n: u32, li: u32) {
    let t = k * 256u + li;
    let tn = n * 256u;
    // Twice the sectors where the attention's splits hold 64+ positions (see WARM_PER).
    // Derived here, by idle workgroups only: main derives the chunk only with
    // ITEMS_BY_CONTEXT, and the mixture kernel's attention workgroups should not.
    let seq = min(params.seq_len, pc.capacity);
    let per = select(WARM_PER, 2u * WARM_PER, attn_chunk(seq) >= 64u);
    var left = per * tn;
    var acc = warm_part(M_O, arrayLength(&w_o.d), t, tn, &left);
    acc ^= warm_part(M_GATE, arrayLength(&w_gate.d), t, tn, &left);
    acc ^= warm_part(M_UP, arrayLength(&w_up.d), t, tn, &left);
    acc ^= warm_part(M_DOWN, arrayLength(&w_down.d), t, tn, &left);
    acc ^= warm_part(M_NEXT, arrayLength(&w_next.d), t, tn, &left);
    if (acc == 0x5eed1e55u) {
        atomicStore(&sync.d[3], acc);
    }
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_size) sg: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let wgi = wg.x;
    let hs = pc.stride_hidden;
    op_groups = pc.groups;
    qkv_op(wgi, li, sg, sg_id, sg_lane, nsg);
    grid_sync(1u, li);
    // Attention items (split s, head h), splits outermost so that the non-empty first
    // splits spread over the first workgroups; the workgroups past the items warm L2.
    // ITEMS_BY_CONTEXT: only the splits the context reaches (the others would return at
    // once; the new position's split is among them), so that at the default contexts
    // (4352 positions: 17 splits x 16 heads > 132 workgroups) idle workgroups are left to
    // warm L2 at all (see the kernel files).
    var items = pc.splits * pc.heads;
    if (ITEMS_BY_CONTEXT) {
        let seq = min(params.seq_len, pc.capacity);
        let chunk = attn_chunk(seq);
        items = max(min((seq + chunk - 1u) / chunk, pc.splits), 1u) * pc.heads;
    }
    for (var v = wgi; v < items; v += pc.groups) {
        workgroupBarrier();
        attention_rope_wg(v / pc.heads, v % pc.heads, li, sg_id, sg_lane, nsg);
    }
    if (wgi >= items) {
        warm_rest(wgi - items, pc.groups - items, li);
    }
    let po = prefetch(M_O, M_O, false, pc.hidden, pc.q_dim, pc.stride_q, wgi, li, sg);
    grid_sync(2u, li);
    matvec_op(M_O, M_O, false, A_ATTN, A_X, N_NONE, true, pc.hidden, pc.q_dim, pc.stride_q, po,
              wgi, li, sg, sg_id, sg_lane, nsg);
    let pg = prefetch(M_GATE, M_UP, true, pc.inter, pc.hidden, hs, wgi, li, sg);
    grid_sync(3u, li);
    matvec_op(M_GATE, M_UP, true, A_X, A_H, N_MLP, false, pc.inter, pc.hidden, hs, pg, wgi, li,
              sg, sg_id, sg_lane, nsg);
    let pd = down_prefetch(wgi, li, sg);
    grid_sync(4u, li);
    down_op(pd, wgi, li, sg, sg_id, sg_lane, nsg);

    // Leave: report a stall, and the last workgroup out resets the sync words.
    storageBarrier();
    if (li == 0u) {
        if (atomicLoad(&sync.d[1]) != 0u && result.d[3] == 0u) {
            result.d[3] = ABORT_BIT | (params.pos + 1u);
        }
        if (atomicAdd(&sync.d[2], 1u) + 1u == pc.groups) {
            atomicStore(&sync.d[0], 0u);
            atomicStore(&sync.d[1], 0u);
            atomicStore(&sync.d[2], 0u);
        }
    }
}
