//! include: matvec_out
// The matvec family's body for block formats (replaces include/matvec_body.wgsl for the
// q* variants; same bindings, push constants and epilogues). The dtype snippet defines
// QBLOCK, QUNIT (elements per work unit: 32 or 64), q_xv4 (where unit u's k-th x vec4
// lies), q_load and q_raw_dot, whose composition q_dot (include/quant_common.wgsl) dots
// unit u of a row with its x values, decoded in registers.
//
// Push fields: `stride8` is the row stride of the GPU layout in vec4s (16 bytes; see
// quant.rs); `cols` is a multiple of QBLOCK; x holds exactly `cols` floats per token.
//
// Layout of the work (docs/decisions/0002-quant-layout.md): a workgroup of QWG threads is
// split into groups of TPR threads (low 16 bits of push field tpr, clamped to 4..=QWG;
// 0 = Q_TPR); each group owns NR adjacent rows (bits 16.. of the field: 0 = 4, 1 = 1,
// 2 = 2). Lane i of a group takes units i, i + TPR, ... and, per unit, loads its x values
// once into registers and dots them with the unit of all NR rows, so x traffic is 1/NR of
// a row-per-group layout (x is 4 bytes per element, the weights 0.56..1.06). Small
// matrices use NR < 4 and more lanes per row (more threads in flight, shorter per-thread
// chains); large ones NR = 4 and few lanes (`quant_matvec_plan` in src/lib.rs). Lane sums: subgroupAdd when TPR >= the subgroup, else a butterfly
// of subgroupShuffleXor inside the TPR lanes; then one shared-memory step. The host rule
// is `matvec_groups_dt` (src/lib.rs).
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct V4s { d: array<vec4<f32>> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32, eps: f32, tpr: u32, x_stride4: u32, y_stride: u32, q8_at: u32, pick_steps: u32, second_first: u32, second_rows: u32, second_stride8: u32, second_y: u32 }

const QWG: u32 = 256u;
const QROWS: u32 = 4u;
const Q_TPR: u32 = 32u;

// Partial (W.x', W_b.x') per (lane segment, row) and sum of x^2 per lane segment
// (segments of at least 4 lanes).
var<workgroup> red: array<vec2<f32>, 256>;
var<workgroup> red_ss: array<f32, 64>;

fn wraw(sel: bool, i: u32) -> vec4<u32> {
    if (sel) {
        return wb_raw(i);
    }
    return w.d[i];
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_size) sg: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let t = pc.tpr & 0xFFFFu;
    let tpr = clamp(select(Q_TPR, t, t != 0u), 4u, QWG);
    let code = pc.tpr >> 16u;
    let nr = select(QROWS, code, code == 1u || code == 2u);
    let groups = QWG / tpr;
    let first = (wg.x + wg.y * nwg.x) * groups * nr;
    let grp = li / tpr;
    let lane = li % tpr;
    let row0 = first + grp * nr;
    var xo = 0u;
    var yo = 0u;
    if (BATCHED) {
        xo = wg.z * pc.x_stride4;
        yo = wg.z * pc.y_stride;
    }
    // The up to QROWS = 4 rows are spelled out (no arrays indexed by a loop variable: those can
    // end up in local memory when the driver does not unroll the loop).
    var a0 = vec2<f32>(0.0, 0.0);
    var a1 = vec2<f32>(0.0, 0.0);
    var a2 = vec2<f32>(0.0, 0.0);
    var a3 = vec2<f32>(0.0, 0.0);
    var ss = 0.0;
    if (row0 < pc.rows) {
        // Rows past the end repeat the last row (read in bounds, never written).
        let last = pc.rows - 1u;
        let rb0 = min(row0, last) * pc.stride8;
        let rb1 = min(row0 + 1u, last) * pc.stride8;
        let rb2 = min(row0 + 2u, last) * pc.stride8;
        let rb3 = min(row0 + 3u, last) * pc.stride8;
        let nb = pc.cols / QBLOCK;
        let units = pc.cols / QUNIT;
        for (var u = lane; u < units; u += tpr) {
            var xs: array<vec4<f32>, 16>;
            for (var k = 0u; k < QUNIT / 4u; k++) {
                let i = q_xv4(u, k);
                var v = x.d[xo + i];
                if (NORM) {
                    ss += dot(v, v);
                    v *= norm4(i);
                }
                xs[k] = v;
            }
            a0.x += q_dot(false, rb0, nb, u, &xs);
            if (SILU) {
                a0.y += q_dot(true, rb0, nb, u, &xs);
            }
            if (nr >= 2u) {
                a1.x += q_dot(false, rb1, nb, u, &xs);
                if (SILU) {
                    a1.y += q_dot(true, rb1, nb, u, &xs);
                }
            }
            if (nr == 4u) {
                a2.x += q_dot(false, rb2, nb, u, &xs);
                a3.x += q_dot(false, rb3, nb, u, &xs);
                if (SILU) {
                    a2.y += q_dot(true, rb2, nb, u, &xs);
                    a3.y += q_dot(true, rb3, nb, u, &xs);
                }
            }
        }
    }
    // Sum over the lanes of each group: `seg` lanes in registers, the rest in shared memory.
    let seg = min(tpr, sg);
    if (tpr >= sg) {
        a0 = subgroupAdd(a0);
        a1 = subgroupAdd(a1);
        a2 = subgroupAdd(a2);
        a3 = subgroupAdd(a3);
        if (NORM) {
            ss = subgroupAdd(ss);
        }
    } else {
        for (var off = 1u; off < seg; off <<= 1u) {
            a0 += subgroupShuffleXor(a0, off);
            a1 += subgroupShuffleXor(a1, off);
            a2 += subgroupShuffleXor(a2, off);
            a3 += subgroupShuffleXor(a3, off);
            if (NORM) {
                ss += subgroupShuffleXor(ss, off);
            }
        }
    }
    if (sgi % seg == 0u) {
        let s = li / seg;
        red[s * QROWS] = a0;
        red[s * QROWS + 1u] = a1;
        red[s * QROWS + 2u] = a2;
        red[s * QROWS + 3u] = a3;
        red_ss[s] = ss;
    }
    workgroupBarrier();
    if (li < groups * nr) {
        let g = li / nr;
        let r = li % nr;
        let per = tpr / seg;
        var sum = vec2<f32>(0.0, 0.0);
        var sq = 0.0;
        for (var k = 0u; k < per; k++) {
            sum += red[(g * per + k) * QROWS + r];
            sq += red_ss[g * per + k];
        }
        let rr = first + li;
        let o = yo + rr;
        if (rr < pc.rows) {
            var inv = 1.0;
            if (NORM) {
                inv = inverseSqrt(sq / f32(pc.cols) + pc.eps);
            }
            row_write(sum, inv, o, rr);
        }
    }
}
