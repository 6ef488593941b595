// The integer-dot batched matvec (matvec_batch_dp[_silu]_<format>_dp): the rows of a
// batched decode step against block-format weights, each weight unit loaded once per
// workgroup and dotted with the int8 activations of up to TB tokens. The kernel file
// declares the bindings (`w`, the gated kernel's second matrix read through
// `fn wb_raw(i)`, `xq`, `xd`, `y`) and SILU; the dtype snippet (dtype/<format>_dp.wgsl)
// the units (`q_unit`, `q_unit_dot`, QUNIT, QBLOCK). The activations come quantized from
// act_q8.wgsl (RMSNorm folded in): token t's int8 words from vec4 `t * xq_stride` of xq,
// its block scales from vec4 `t * xd_stride` of xd.
//
// A workgroup covers 256 / tpr groups of `tpr` lanes, each group NR rows (plain) or NR
// rows of the gate and of the up matrix (gated), and the tokens t0 .. t0 + TB - 1
// (t0 = TB * workgroup y). Lane l of a group takes units l, l + tpr, ... of its rows: it
// prepares each unit once (q_unit) and dots it with every token's x (q_unit_dot); the
// lanes' partial sums are added across the group (subgroup ops, then shared memory) in
// a fixed order. `tpr` comes from the matrix shape alone (`matvec_batch_dp_plan`), so a
// (row, token) result is the same sum in the same order whatever the other tokens of the
// dispatch (batch invariance). Measured on the H100 against variants (BENCHMARKS.md, sixth
// session): 4 rows per lane group, or the tokens' x staged in shared memory, were slower. The arithmetic per unit is the single-token `*_dp`
// matvec's (CPU model: `quant_dp::matvec_dp_cpu`). Dispatch [row groups (x, then z past
// 65535), token groups, ...].
struct Push { rows: u32, cols: u32, w_stride: u32, accumulate: u32, tokens: u32, xq_stride: u32, xd_stride: u32, y_stride: u32, tpr: u32, row_groups_x: u32, q8: u32, q8_words: u32, q8_blocks: u32 }
struct WVec { d: array<vec4<u32>> }

const WG: u32 = 256u;
const NR: u32 = 2u; // rows per lane group
const TB: u32 = 8u; // tokens per workgroup

// Partial sums per (segment of a lane group, token): rows 0, 1 (gated: of the gate) in
// x, y; the up matrix's rows 0, 1 in z, w. Segments are subgroup-sized (>= 4 lanes).
var<workgroup> red: array<vec4<f32>, 512>;

// The token whose x the unit dots read: its first vec4 in xq and in xd.
var<private> xqb: u32;
var<private> xdb: u32;

fn wraw(sel: bool, i: u32) -> vec4<u32> {
    if (sel) {
        return wb_raw(i);
    }
    return w.d[i];
}

// Int8 words i .. i + 3 of the current token's x (include/quant_dp.wgsl).
fn xw4(i: u32) -> vec4<u32> {
    return xq[xqb + i / 4u];
}

// Block b of the current token's x.
fn xdv(b: u32) -> vec4<f32> {
    return xd[xdb + b];
}

// Token t's contribution of unit u: the two rows (p0, p1) and, gated, the up matrix's
// (p2, p3); zero past the dispatch's tokens.
fn token_dot(t: u32, u: u32, p0: DpUnit, p1: DpUnit, p2: DpUnit, p3: DpUnit) -> vec4<f32> {
    if (t >= pc.tokens) {
        return vec4<f32>(0.0);
    }
    xqb = t * pc.xq_stride;
    xdb = t * pc.xd_stride;
    var v = vec4<f32>(q_unit_dot(p0, u, 0u), q_unit_dot(p1, u, 0u), 0.0, 0.0);
    if (SILU) {
        v.z = q_unit_dot(p2, u, 0u);
        v.w = q_unit_dot(p3, u, 0u);
    }
    return v;
}

// Sum over the `seg` lanes of this lane's segment (all its subgroup when seg is the
// subgroup size), in a fixed order.
fn seg_sum(v: vec4<f32>, seg: u32, sg: u32) -> vec4<f32> {
    if (seg == sg) {
        return subgroupAdd(v);
    }
    var s = v;
    for (var off = 1u; off < seg; off <<= 1u) {
        s += subgroupShuffleXor(s, off);
    }
    return s;
}

// Writes (row r, token t) from the sums s (rows r, r + 1; gated: the up's in z, w); with
// the q8 output (gated) also stages them as row j, token tl of the workgroup's n rows.
fn emit(r: u32, t: u32, s: vec4<f32>, j: u32, tl: u32, n: u32) {
    if (t >= pc.tokens) {
        return;
    }
    let o = t * pc.y_stride + r;
    for (var k = 0u; k < NR; k++) {
        if (r + k < pc.rows) {
            let g = select(s.x, s.y, k == 1u);
            if (SILU) {
                let v = g / (1.0 + exp(-g)) * select(s.z, s.w, k == 1u);
                y[o + k] = v;
                if (pc.q8 != 0u) {
                    stage_h(tl, j + k, n, v);
                }
            } else if (pc.accumulate != 0u) {
                y[o + k] = y[o + k] + g;
            } else {
                y[o + k] = g;
            }
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_size) sg: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let tpr = clamp(pc.tpr, 4u, WG);
    let groups = WG / tpr;
    let first = (wg.x + wg.z * pc.row_groups_x) * groups * NR;
    let grp = li / tpr;
    let lane = li % tpr;
    let row0 = first + grp * NR;
    let t0 = wg.y * TB;
    let last = max(pc.rows, 1u) - 1u;
    let rb0 = min(row0, last) * pc.w_stride;
    let rb1 = min(row0 + 1u, last) * pc.w_stride;
    let nb = pc.cols / QBLOCK;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    var a4 = vec4<f32>(0.0);
    var a5 = vec4<f32>(0.0);
    var a6 = vec4<f32>(0.0);
    var a7 = vec4<f32>(0.0);
    if (row0 < pc.rows) {
        for (var u = lane; u < pc.cols / QUNIT; u += tpr) {
            let p0 = q_unit(false, rb0, nb, u);
            let p1 = q_unit(false, rb1, nb, u);
            var p2 = p0;
            var p3 = p1;
            if (SILU) {
                p2 = q_unit(true, rb0, nb, u);
                p3 = q_unit(true, rb1, nb, u);
            }
            a0 += token_dot(t0, u, p0, p1, p2, p3);
            a1 += token_dot(t0 + 1u, u, p0, p1, p2, p3);
            a2 += token_dot(t0 + 2u, u, p0, p1, p2, p3);
            a3 += token_dot(t0 + 3u, u, p0, p1, p2, p3);
            a4 += token_dot(t0 + 4u, u, p0, p1, p2, p3);
            a5 += token_dot(t0 + 5u, u, p0, p1, p2, p3);
            a6 += token_dot(t0 + 6u, u, p0, p1, p2, p3);
            a7 += token_dot(t0 + 7u, u, p0, p1, p2, p3);
        }
    }
    // Each segment of seg lanes sums in registers, then its first lane parks the sums.
    let seg = min(tpr, sg);
    a0 = seg_sum(a0, seg, sg);
    a1 = seg_sum(a1, seg, sg);
    a2 = seg_sum(a2, seg, sg);
    a3 = seg_sum(a3, seg, sg);
    a4 = seg_sum(a4, seg, sg);
    a5 = seg_sum(a5, seg, sg);
    a6 = seg_sum(a6, seg, sg);
    a7 = seg_sum(a7, seg, sg);
    if (sgi % seg == 0u) {
        let s = (li / seg) * TB;
        red[s] = a0;
        red[s + 1u] = a1;
        red[s + 2u] = a2;
        red[s + 3u] = a3;
        red[s + 4u] = a4;
        red[s + 5u] = a5;
        red[s + 6u] = a6;
        red[s + 7u] = a7;
    }
    workgroupBarrier();
    // (lane group, token) pairs: the group's segments added in order.
    let per = tpr / seg;
    for (var e = li; e < groups * TB; e += WG) {
        let g = e / TB;
        let t = e % TB;
        var sum = vec4<f32>(0.0);
        for (var k = 0u; k < per; k++) {
            sum += red[(g * per + k) * TB + t];
        }
        emit(first + g * NR, t0 + t, sum, g * NR, t, groups * NR);
    }
    if (SILU && pc.q8 != 0u) {
        put_h_q8(li, first, groups * NR, t0);
    }
}
