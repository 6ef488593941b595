// The matvec family's body for block formats (replaces include/matvec_body.wgsl for the
// q* variants; same bindings, push constants and epilogues). The dtype snippet defines
// QBLOCK, QUNIT (elements per work unit: 32 or 64), q_xv4 (where unit u's k-th x vec4
// lies) and q_dot (unit u of a row dotted with its x values, decoded in registers).
//
// Push fields: `stride8` is the row stride of the GPU layout in vec4s (16 bytes; see
// quant.rs); `cols` is a multiple of QBLOCK; x holds exactly `cols` floats per token.
// Rows are handled by TPR threads (push field tpr; 0 = 64), lane i taking units
// i, i + TPR, ...; subgroup sums and one shared-memory step as in matvec_body.
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct V4s { d: array<vec4<f32>> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32, eps: f32, tpr: u32, x_stride4: u32, y_stride: u32 }

var<workgroup> red: array<vec3<f32>, 256>;

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
    let tpr = select(64u, pc.tpr, pc.tpr != 0u);
    let rows_per_wg = 256u / tpr;
    let first = (wg.x + wg.y * nwg.x) * rows_per_wg;
    let row = first + li / tpr;
    let lane = li % tpr;
    var xo = 0u;
    var yo = 0u;
    if (BATCHED) {
        xo = wg.z * pc.x_stride4;
        yo = wg.z * pc.y_stride;
    }
    var acc = vec3<f32>(0.0, 0.0, 0.0);
    if (row < pc.rows) {
        let rb = row * pc.stride8;
        let nb = pc.cols / QBLOCK;
        let units = pc.cols / QUNIT;
        for (var u = lane; u < units; u += tpr) {
            var xs: array<vec4<f32>, 16>;
            for (var k = 0u; k < QUNIT / 4u; k++) {
                let i = q_xv4(u, k);
                var v = x.d[xo + i];
                if (NORM) {
                    acc.z += dot(v, v);
                    v *= norm4(i);
                }
                xs[k] = v;
            }
            acc.x += q_dot(false, rb, nb, u, &xs);
            if (SILU) {
                acc.y += q_dot(true, rb, nb, u, &xs);
            }
        }
    }
    let s = subgroupAdd(acc);
    if (sgi == 0u) {
        red[li / sg] = s;
    }
    workgroupBarrier();
    if (li < rows_per_wg) {
        let per = max(tpr / sg, 1u);
        var sum = vec3<f32>(0.0, 0.0, 0.0);
        for (var k = 0u; k < per; k++) {
            sum += red[li * per + k];
        }
        let rr = first + li;
        let r = yo + rr;
        if (rr < pc.rows) {
            var inv = 1.0;
            if (NORM) {
                inv = inverseSqrt(sum.z / f32(pc.cols) + pc.eps);
            }
            let g = sum.x * inv;
            if (SILU) {
                y.d[r] = g / (1.0 + exp(-g)) * (sum.y * inv);
            } else if (pc.accumulate != 0u) {
                y.d[r] = y.d[r] + g;
            } else {
                y.d[r] = g;
            }
        }
    }
}
