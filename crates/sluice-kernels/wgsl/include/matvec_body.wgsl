//! include: matvec_out
// The matvec family (matvec, matvec_norm, matvec_silu, matvec_silu_norm) shares this body;
// each kernel file declares its bindings and the constants NORM, SILU and BATCHED, plus
// `fn w_b8(i)` (second matrix, SILU) and `fn norm4(i)` (norm weight, NORM).
//
// y[r] = epilogue(W[r] . x'), x' = x * norm_w (NORM) with inv = 1/sqrt(mean(x^2) + eps)
// computed from the same pass over x (every row's threads read all of x once, so the sum
// of squares costs no extra memory traffic). Rows are handled by TPR threads each (64; the
// host uses the same rule; push field tpr overrides it), 16-byte loads for weights and x,
// four chunks per thread in flight (the same sums in the same order as one at a time;
// Qwen3-4B f16 decode 318.8 -> 320.5 tok/s on the H200 against two, eight lost 0.6%),
// subgroup sums, one shared-memory step — none where a row is one subgroup (tpr = the
// subgroup size: the float LM head's plan on NVIDIA; 4B f16 +0.9%, 0.6B +0.4%).
// x (and norm_w) must be bound with stride8 * 8 floats, zero beyond cols. A dispatch with
// several workgroups in z handles several tokens (prefill): token t reads x from vec4
// t * x_stride4 and writes y from float t * y_stride.
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct V4s { d: array<vec4<f32>> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32, eps: f32, tpr: u32, x_stride4: u32, y_stride: u32, q8_at: u32, pick_steps: u32, second_first: u32, second_rows: u32, second_stride8: u32, second_y: u32 }

var<workgroup> red: array<vec3<f32>, 256>;

fn threads_per_row(stride8: u32) -> u32 {
    // 64 measured best on the H100 for every row length of Qwen3-0.6B/4B (BENCHMARKS.md).
    return 64u;
}

// Adds chunk c of row `base` to acc = (W.x', W_b.x', sum x^2); x of this token starts at
// vec4 `xo`.
fn step(base: u32, c: u32, xo: u32, acc: ptr<function, vec3<f32>>) {
    let i = (base + c) * W_VEC4S;
    let wa = decode_w8(w.d[i], w.d[i + W_VEC4S - 1u]);
    var xa = x.d[xo + 2u * c];
    var xb = x.d[xo + 2u * c + 1u];
    if (NORM) {
        (*acc).z += dot(xa, xa) + dot(xb, xb);
        xa *= norm4(2u * c);
        xb *= norm4(2u * c + 1u);
    }
    (*acc).x += dot(wa.a, xa) + dot(wa.b, xb);
    if (SILU) {
        let wb = w_b8(i);
        (*acc).y += dot(wb.a, xa) + dot(wb.b, xb);
    }
}

// Row `rr`'s whole sums (W.x', W_b.x', sum x^2) written to y[o] (1/rms from the last, NORM).
fn row_end(sum: vec3<f32>, o: u32, rr: u32) {
    var inv = 1.0;
    if (NORM) {
        inv = inverseSqrt(sum.z / f32(pc.cols) + pc.eps);
    }
    row_write(sum.xy, inv, o, rr);
}

// The block of 256 / tpr rows from row `first` (x of this token from vec4 xo, y from
// float yo).
fn rows_block(first: u32, tpr: u32, xo: u32, yo: u32, li: u32, sg: u32, sgi: u32) {
    let rows_per_wg = 256u / tpr;
    let lane = li % tpr;
    let row = first + li / tpr;
    var acc = vec3<f32>(0.0, 0.0, 0.0);
    if (row < pc.rows) {
        let base = row * pc.stride8;
        var c = lane;
        for (; c + 3u * tpr < pc.stride8; c += 4u * tpr) {
            step(base, c, xo, &acc);
            step(base, c + tpr, xo, &acc);
            step(base, c + 2u * tpr, xo, &acc);
            step(base, c + 3u * tpr, xo, &acc);
        }
        for (; c < pc.stride8; c += tpr) {
            step(base, c, xo, &acc);
        }
    }
    let s = subgroupAdd(acc);
    if (tpr == sg) {
        // A row per subgroup: its sums are whole here, no shared-memory step.
        if (sgi == 0u && row < pc.rows) {
            row_end(s, yo + row, row);
        }
        return;
    }
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
        if (rr < pc.rows) {
            row_end(sum, yo + rr, rr);
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_size) sg: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let tpr = select(threads_per_row(pc.stride8), pc.tpr, pc.tpr != 0u);
    let rows_per_wg = 256u / tpr;
    // Token wg.z (prefill kernels, BATCHED): x and y of token t start x_stride4 vec4s /
    // y_stride floats later. The decode kernels fold this away (4% on Qwen3-0.6B decode).
    var xo = 0u;
    var yo = 0u;
    if (BATCHED) {
        xo = wg.z * pc.x_stride4;
        yo = wg.z * pc.y_stride;
    }
    let lin = wg.x + wg.y * nwg.x;
    pick_begin(nwg.x * nwg.y);
    if (ROW_LOOP) {
        // Blocks of rows_per_wg rows strided over a grid smaller than the matrix (the LM
        // head, matvec_resident_grid).
        let nblk = (pc.rows + rows_per_wg - 1u) / rows_per_wg;
        for (var blk = lin; blk < nblk; blk += nwg.x * nwg.y) {
            rows_block(blk * rows_per_wg, tpr, xo, yo, li, sg, sgi);
            // This block's readers of `red` are done before the next block writes it
            // (blocks of a row per subgroup use no `red`).
            if (tpr != sg) {
                workgroupBarrier();
            }
        }
    } else {
        rows_block(lin * rows_per_wg, tpr, xo, yo, li, sg, sgi);
    }
    pick_end(lin, nwg.x * nwg.y, li, sg, sgi);
}
