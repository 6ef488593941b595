//! include: matvec_out
// The matvec family's body for block formats on integer dot products (the `*_dp` dtype
// variants; same bindings, push constants, work split and epilogues as
// include/matvec_q_body.wgsl, which stays the path for devices without
// shaderIntegerDotProduct). The dtype snippet defines QBLOCK, QUNIT and
// `q_dot8(sel, rb, nb, u, t0)` (include/quant_dp.wgsl): unit u of a row dotted with the
// quantized x of the tile that starts at element t0.
//
// x is quantized inside every workgroup (no extra dispatch), one tile of QX_TILE elements
// at a time: one thread per block of 32 elements reads them (times the RMSNorm weight in
// the NORM kernels; the scalar 1/rms is applied to the row sums at the end, as before),
// d = max|x| / 127, q = round(x * 127 / max|x|) (ties to even) as int8, packed 4 per u32
// in xq; xd holds (d, d * sum of the first 16 q, d * sum of the last 16 q): the Q4_0
// offset and K-quant min terms use these sums of the QUANTIZED x, so a row is exactly
// W . x_hat (x_hat = d * q). Exact float sums would add offset * sum(x_hat - x), an error
// that grows with the offset (8 d for Q4_0, dmin * m for Q4_K) instead of the weights.
// Lanes then read xq from shared memory (`xw4`, `xdv`) and do dot4I8Packed against the weight bytes. Same x, same xq: deterministic. The CPU model of
// this arithmetic is `quant::matvec_dp_cpu` (docs/decisions/0002-quant-layout.md).
//
// The quantized handoff (docs/decisions/0007): in the kernels with X_Q8 (matvec_xq8) the
// x binding already holds x quantized, one record of 3 vec4s per block of 32 ([d, d * sum
// of the first 16 q, d * sum of the last 16 q, 0], then the 8 int8 words as u32 bits), so
// the x step (loads, quantization, both barriers) is skipped and the lanes read the
// records from memory (no norm). With push field `q8_at` (non-zero) a kernel also writes
// its y rows so quantized, block b's record at float q8_at + 12 b of y: bit for bit the
// records the consumer would have made from those y values. The host sets it only where
// each workgroup owns whole blocks of 32 rows. (A run-time switch for the x source in the
// dot loop cost 5-11% of every integer-dot matvec on the H100, hence the kernel constant.)
//
// Two formats (TWO, matvec_norm_two; decision 0015): the workgroups from push field
// second_first run rows of a second matrix of another format (its unit dot `second_dot`,
// include/matvec_two_hooks.wgsl) with the same plan and x step; the other kernels' hooks
// (include/matvec_no_pick.wgsl, matvec_pick.wgsl) have no second format.
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct V4s { d: array<vec4<f32>> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32, eps: f32, tpr: u32, x_stride4: u32, y_stride: u32, q8_at: u32, pick_steps: u32, second_first: u32, second_rows: u32, second_stride8: u32, second_y: u32 }

const QWG: u32 = 256u;
const QROWS: u32 = 4u;
const Q_TPR: u32 = 32u;
// Elements of x quantized per pass (a multiple of 256; 256 blocks of 32 = one per thread).
const QX_TILE: u32 = 8192u;

var<workgroup> red: array<vec2<f32>, 256>;
var<workgroup> red_ss: array<f32, 64>;
var<workgroup> xq: array<u32, 2048>;
var<workgroup> xd: array<vec4<f32>, 256>;

fn wraw(sel: bool, i: u32) -> vec4<u32> {
    if (sel) {
        return wb_raw(i);
    }
    return w.d[i];
}

// With X_Q8: the vec4 of the token's first record, and the tile's first block.
var<private> xg0: u32;
var<private> xgt: u32;
// 1/rms of the row loop's x (NORM), for blocks that write their rows from the subgroups
// (`direct` in rows_block).
var<private> inv_direct: f32;

// Int8 words i .. i + 3 of the tile's x (include/quant_dp.wgsl).
fn xw4(i: u32) -> vec4<u32> {
    if (X_Q8) {
        return bitcast<vec4<u32>>(x.d[xg0 + 3u * (xgt + i / 8u) + 1u + (i % 8u) / 4u]);
    }
    return vec4<u32>(xq[i], xq[i + 1u], xq[i + 2u], xq[i + 3u]);
}

// The tile's x block b: (d, d * sum of its first 16 q, d * sum of its last 16 q, 0).
fn xdv(b: u32) -> vec4<f32> {
    if (X_Q8) {
        return x.d[xg0 + 3u * (xgt + b)];
    }
    return xd[b];
}

// The q8 records of this workgroup's `n` rows (a multiple of 32, from row `first`), their
// values v (invocation li < n holds row first + li): to y from float q8_at, for the blocks
// that start before `rows` (a multiple of 32: a last workgroup may reach past it). Every
// invocation calls it (it holds a barrier) after the barrier that ends the dot products,
// so xq is free.
fn put_q8(li: u32, n: u32, first: u32, v: f32) {
    if (li < n) {
        xq[li] = bitcast<u32>(v);
    }
    workgroupBarrier();
    if (li < n / 32u && first + 32u * li < pc.rows) {
        var vs: array<vec4<f32>, 8>;
        for (var k = 0u; k < 8u; k++) {
            let j = 32u * li + 4u * k;
            vs[k] = bitcast<vec4<f32>>(vec4<u32>(xq[j], xq[j + 1u], xq[j + 2u], xq[j + 3u]));
        }
        var qw: array<u32, 8>;
        let dv = quantize_x32(&vs, &qw);
        let o = pc.q8_at + 12u * ((first + 32u * li) / 32u);
        y.d[o] = dv.x;
        y.d[o + 1u] = dv.y;
        y.d[o + 2u] = dv.z;
        y.d[o + 3u] = 0.0;
        for (var k = 0u; k < 8u; k++) {
            y.d[o + 4u + k] = bitcast<f32>(qw[k]);
        }
    }
}

// The row loop over one x tile with a group's lanes inside one subgroup: each group
// writes its rows itself (rows_block), no shared-memory step or barrier per block (1/rms
// from the first block's x step). The LM heads' plan (16 lanes x 4 rows) on NVIDIA; on the
// H200 the 0.6B Q8_0 decode 1050 -> 1059 tok/s, the Q6_K heads of Q4_0 / Q6_K / Q4_K_M
// within 0.3% either way.
fn direct_rows(sg: u32) -> bool {
    return ROW_LOOP && single_tile() && lanes_rows().x <= sg;
}

// x quantized once into xq for the whole row: one tile, not handed over quantized, not
// handing y over.
fn single_tile() -> bool {
    return !X_Q8 && pc.cols <= QX_TILE && pc.q8_at == 0u;
}

// 1/rms of x from the subgroups' sums of squares in red_ss (NORM).
fn red_inv(sg: u32) -> f32 {
    var sq = 0.0;
    for (var k = 0u; k < QWG / sg; k++) {
        sq += red_ss[k];
    }
    return inverseSqrt(sq / f32(pc.cols) + pc.eps);
}

// Row `rr`'s sums written (rows of the `direct` blocks; nothing past the matrix).
fn direct_write(a: vec2<f32>, rr: u32, yo: u32) {
    if (rr < pc.rows) {
        row_write(a, select(1.0, inv_direct, NORM), yo + rr, rr);
    }
}

// Lanes per row group and rows per group (x, y) of the dispatch: push field tpr, lanes in
// its low 16 bits (0: Q_TPR), a rows code above (0: QROWS, else 1 or 2).
fn lanes_rows() -> vec2<u32> {
    let t = pc.tpr & 0xFFFFu;
    let code = pc.tpr >> 16u;
    return vec2<u32>(clamp(select(Q_TPR, t, t != 0u), 4u, QWG),
                     select(QROWS, code, code == 1u || code == 2u));
}

// The block of rows from row `first` (x of this token from vec4 xo, y from float yo) of
// the matrix, or with `second` (TWO kernels only) of the second format's matrix (rows,
// stride and unit from push fields second_*, include/matvec_two_hooks.wgsl).
// `again`: not the workgroup's first block (x then stays quantized in xq when one tile
// holds it, and the sum of squares `ss` of this invocation's x values is not added to
// again).
fn rows_block(first: u32, again: bool, xo: u32, yo: u32, li: u32, sg: u32, sgi: u32,
              ss: ptr<function, f32>, second: bool) {
    let lr = lanes_rows();
    let tpr = lr.x;
    let nr = lr.y;
    let groups = QWG / tpr;
    let grp = li / tpr;
    let lane = li % tpr;
    let nb = pc.cols / QBLOCK;
    let single = single_tile();
    let direct = direct_rows(sg);
    let row0 = first + grp * nr;
    let rows = select(pc.rows, pc.second_rows, second);
    let stride = select(pc.stride8, pc.second_stride8, second);
    let unit = select(QUNIT, SECOND_UNIT, second);
    var a0 = vec2<f32>(0.0, 0.0);
    var a1 = vec2<f32>(0.0, 0.0);
    var a2 = vec2<f32>(0.0, 0.0);
    var a3 = vec2<f32>(0.0, 0.0);
    let last = max(rows, 1u) - 1u;
    let rb0 = min(row0, last) * stride;
    let rb1 = min(row0 + 1u, last) * stride;
    let rb2 = min(row0 + 2u, last) * stride;
    let rb3 = min(row0 + 3u, last) * stride;
    for (var t0 = 0u; t0 < pc.cols; t0 += QX_TILE) {
        let len = min(QX_TILE, pc.cols - t0);
        xgt = t0 / 32u;
        // The previous tile's readers are done before its xq is overwritten.
        // With X_Q8 x is already quantized: no x step.
        if (!X_Q8 && !(single && again)) {
            workgroupBarrier();
            if (li < len / 32u) {
                var vs: array<vec4<f32>, 8>;
                for (var k = 0u; k < 8u; k++) {
                    let i = t0 / 4u + 8u * li + k;
                    var v = x.d[xo + i];
                    if (NORM) {
                        if (!again) {
                            *ss += dot(v, v);
                        }
                        v *= norm4(i);
                    }
                    vs[k] = v;
                }
                var qw: array<u32, 8>;
                xd[li] = vec4<f32>(quantize_x32(&vs, &qw), 0.0);
                for (var k = 0u; k < 8u; k++) {
                    xq[8u * li + k] = qw[k];
                }
            }
            workgroupBarrier();
            if (direct && NORM) {
                let t = subgroupAdd(*ss);
                if (sgi == 0u) {
                    red_ss[li / sg] = t;
                }
                workgroupBarrier();
                inv_direct = red_inv(sg);
            }
        }
        if (row0 < rows && second) {
            // The second format's rows (TWO kernels): plain rows, no gate/up.
            let u1 = (t0 + len) / unit;
            for (var u = t0 / unit + lane; u < u1; u += tpr) {
                a0.x += second_dot(rb0, nb, u, t0);
                if (nr >= 2u) {
                    a1.x += second_dot(rb1, nb, u, t0);
                }
                if (nr == 4u) {
                    a2.x += second_dot(rb2, nb, u, t0);
                    a3.x += second_dot(rb3, nb, u, t0);
                }
            }
        } else if (row0 < rows) {
            let u1 = (t0 + len) / QUNIT;
            for (var u = t0 / QUNIT + lane; u < u1; u += tpr) {
                a0.x += q_dot8(false, rb0, nb, u, t0);
                if (SILU) {
                    a0.y += q_dot8(true, rb0, nb, u, t0);
                }
                if (nr >= 2u) {
                    a1.x += q_dot8(false, rb1, nb, u, t0);
                    if (SILU) {
                        a1.y += q_dot8(true, rb1, nb, u, t0);
                    }
                }
                if (nr == 4u) {
                    a2.x += q_dot8(false, rb2, nb, u, t0);
                    a3.x += q_dot8(false, rb3, nb, u, t0);
                    if (SILU) {
                        a2.y += q_dot8(true, rb2, nb, u, t0);
                        a3.y += q_dot8(true, rb3, nb, u, t0);
                    }
                }
            }
        }
    }
    // Sum of x^2 over the whole workgroup (each block's thread holds its part).
    var ss_sg = 0.0;
    if (NORM) {
        ss_sg = subgroupAdd(*ss);
    }
    // Sum over the lanes of each group: `seg` lanes in registers, the rest in shared memory.
    let seg = min(tpr, sg);
    if (tpr >= sg) {
        a0 = subgroupAdd(a0);
        a1 = subgroupAdd(a1);
        a2 = subgroupAdd(a2);
        a3 = subgroupAdd(a3);
    } else {
        for (var off = 1u; off < seg; off <<= 1u) {
            a0 += subgroupShuffleXor(a0, off);
            a1 += subgroupShuffleXor(a1, off);
            a2 += subgroupShuffleXor(a2, off);
            a3 += subgroupShuffleXor(a3, off);
        }
    }
    if (direct) {
        if (lane == 0u) {
            direct_write(a0, row0, yo);
            if (nr >= 2u) {
                direct_write(a1, row0 + 1u, yo);
            }
            if (nr == 4u) {
                direct_write(a2, row0 + 2u, yo);
                direct_write(a3, row0 + 3u, yo);
            }
        }
        return;
    }
    if (sgi % seg == 0u) {
        let s = li / seg;
        red[s * QROWS] = a0;
        red[s * QROWS + 1u] = a1;
        red[s * QROWS + 2u] = a2;
        red[s * QROWS + 3u] = a3;
    }
    if (NORM && sgi == 0u) {
        red_ss[li / sg] = ss_sg;
    }
    workgroupBarrier();
    var out = 0.0;
    if (li < groups * nr) {
        let g = li / nr;
        let r = li % nr;
        let per = tpr / seg;
        var sum = vec2<f32>(0.0, 0.0);
        for (var k = 0u; k < per; k++) {
            sum += red[(g * per + k) * QROWS + r];
        }
        let rr = first + li;
        let o = yo + rr;
        if (rr < rows) {
            var inv = 1.0;
            if (NORM) {
                inv = red_inv(sg);
            }
            out = row_write(sum, inv, o, rr);
        }
    }
    if (pc.q8_at != 0u) {
        put_q8(li, groups * nr, first, out);
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_size) sg: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let lr = lanes_rows();
    let per_wg = QWG / lr.x * lr.y;
    var xo = 0u;
    var yo = 0u;
    if (BATCHED) {
        xo = wg.z * pc.x_stride4;
        yo = wg.z * pc.y_stride;
    }
    xg0 = xo;
    let lin = wg.x + wg.y * nwg.x;
    var ss = 0.0;
    pick_begin(nwg.x * nwg.y);
    if (ROW_LOOP) {
        // Blocks of per_wg rows strided over a grid smaller than the matrix (the LM head,
        // matvec_resident_grid); x of one tile is quantized once per workgroup and kept in
        // xq for all its blocks.
        let nblk = (pc.rows + per_wg - 1u) / per_wg;
        for (var blk = lin; blk < nblk; blk += nwg.x * nwg.y) {
            rows_block(blk * per_wg, blk != lin, xo, yo, li, sg, sgi, &ss, false);
            // This block's readers of `red` are done before the next block writes it
            // (rows_block's `direct` blocks use no `red`).
            if (!direct_rows(sg)) {
                workgroupBarrier();
            }
        }
    } else {
        // TWO kernels: the workgroups from second_first take the second matrix's rows
        // (its y rows from second_y).
        let second = TWO && lin >= pc.second_first;
        let blk = select(lin, lin - pc.second_first, second);
        rows_block(blk * per_wg, false, xo, select(yo, yo + pc.second_y, second), li, sg, sgi,
                   &ss, second);
    }
    pick_end(lin, nwg.x * nwg.y, li, sg, sgi);
}
