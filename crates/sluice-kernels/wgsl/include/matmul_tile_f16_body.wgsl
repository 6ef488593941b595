//! include: batch_y_put
// The tiled f16 matmul of a prefill chunk (matmul_tile_f16, gated: matmul_tile_f16_silu):
// y[t, r] = W[r] . xh[t] (gated: silu(Wg[r] . xh[t]) * (Wu[r] . xh[t])) on the matrix
// units, with the same bindings, push constants and y modes as the register-built
// matvecs (include/matvec_batch_cmd_f16_body.wgsl), so a chunk may take either. The
// kernel file declares the bindings (w, gated w_b, xv, y), `pc`, SILU, `fn wb_raw(i)` and
// the y accessors (include/batch_y_f32.wgsl, gated include/batch_y_pairs.wgsl).
//
// A workgroup of NI = 256 invocations (8 subgroups of 32) computes BR = 128 rows x TT = 128
// tokens (gated: 64 rows of each matrix, subgroups 0-3 the gate's, 4-7 the up's): subgroup
// s owns rows 64 (s / 4) .. + 64 of the tile and tokens 32 (s % 4) .. + 32, as 2 x 4
// accumulators of 16 x 16 (f32), so each 16 columns load 2 token and 4 weight operands for
// 8 products. Both operands are staged through one shared buffer TK = 64 columns at a
// time, rows padded to KP = 72 halves (144 bytes: the 8 rows an operand load reads start
// in different banks): a step stores the words loaded during the previous one, then issues
// the next step's loads into registers before its products. The step's length is what
// measured (H200, BENCHMARKS.md fifty-first session): the kernel waits on its loads, and
// 64 columns a step ran 1.14-1.18x faster than 32 in two buffers (one barrier a step).
// Token tiles load row-major as A (coopLoadT), weight tiles column-major as B (coopLoad:
// B[k][n] = W[n][k]), as in include/matmul_cm_body.wgsl.
// Every (token, row) sum runs over K in one order whatever the other tokens or rows.
// Dispatch `matmul_tile_groups`: token groups along x, row groups along y (z past
// row_groups_x). Needs cols, w_stride and x_stride multiples of 8.
const NI: u32 = 256u;
const BR: u32 = 128u;
const TT: u32 = 128u;
const TK: u32 = 64u;
const KP: u32 = TK + 8u; // halves per staged row (8 of padding)
const CPR: u32 = TK / 8u; // 16-byte chunks per staged row
const WSV: u32 = BR * KP / 4u; // vec4<f16> of the weight tile
const XSV: u32 = TT * KP / 4u; // vec4<f16> of the token tile

var<workgroup> ws: array<vec4<f16>, WSV>;
var<workgroup> xs: array<vec4<f16>, XSV>;
var<workgroup> cs: array<f32, 8u * 256u>;

// One invocation's share of a step: chunks (8 halves) li + NI h of the weight tile (128
// rows x CPR chunks: gated, the gate's 64 rows then the up's) and of the token tile.
struct Stage { w0: vec4<u32>, w1: vec4<u32>, w2: vec4<u32>, w3: vec4<u32>, x0: vec4<u32>, x1: vec4<u32>, x2: vec4<u32>, x3: vec4<u32> }

// Chunk `c` (row c / CPR, chunk c % CPR of the step at column k0) of the weight tile whose
// first row is rb; zeros outside the matrix.
fn fetch_w(rb: u32, k0: u32, c: u32) -> vec4<u32> {
    let col = k0 + 8u * (c % CPR);
    var r = c / CPR;
    var up = false;
    if (SILU) {
        up = r >= BR / 2u;
        r = r % (BR / 2u);
    }
    let row = rb + r;
    var v = vec4<u32>(0u);
    if (row < pc.rows && col < pc.cols) {
        let at = (row * pc.w_stride + col) / 8u;
        if (SILU && up) {
            v = wb_raw(at);
        } else {
            v = w[at];
        }
    }
    return v;
}

// Chunk `c` (token c / CPR) of the token tile from t0; zeros past the tokens.
fn fetch_x(t0: u32, k0: u32, c: u32) -> vec4<u32> {
    let col = k0 + 8u * (c % CPR);
    let tok = t0 + c / CPR;
    var v = vec4<u32>(0u);
    if (tok < pc.tokens && col < pc.cols) {
        v = xv[(tok * pc.x_stride + col) / 8u];
    }
    return v;
}

fn fetch(rb: u32, t0: u32, k0: u32, li: u32) -> Stage {
    var s: Stage;
    s.w0 = fetch_w(rb, k0, li);
    s.w1 = fetch_w(rb, k0, li + NI);
    s.x0 = fetch_x(t0, k0, li);
    s.x1 = fetch_x(t0, k0, li + NI);
    s.w2 = fetch_w(rb, k0, li + 2u * NI);
    s.w3 = fetch_w(rb, k0, li + 3u * NI);
    s.x2 = fetch_x(t0, k0, li + 2u * NI);
    s.x3 = fetch_x(t0, k0, li + 3u * NI);
    return s;
}

// 8 halves as two vec4<f16>.
fn halves(v: vec4<u32>) -> array<vec4<f16>, 2> {
    let a = h2_bits(v.x);
    let b = h2_bits(v.y);
    let c = h2_bits(v.z);
    let d = h2_bits(v.w);
    return array<vec4<f16>, 2>(vec4<f16>(a, b), vec4<f16>(c, d));
}

// Chunk c's place in a tile (vec4<f16> index): row c / CPR, halves 8 (c % CPR) ..
fn slot(c: u32) -> u32 {
    return ((c / CPR) * KP + 8u * (c % CPR)) / 4u;
}

fn put1(v: vec4<u32>, at: u32, weights: bool) {
    let h = halves(v);
    if (weights) {
        ws[at] = h[0];
        ws[at + 1u] = h[1];
    } else {
        xs[at] = h[0];
        xs[at + 1u] = h[1];
    }
}

// A stage's words into the tiles.
fn put(s: Stage, li: u32) {
    put1(s.w0, slot(li), true);
    put1(s.w1, slot(li + NI), true);
    put1(s.w2, slot(li + 2u * NI), true);
    put1(s.w3, slot(li + 3u * NI), true);
    put1(s.x0, slot(li), false);
    put1(s.x1, slot(li + NI), false);
    put1(s.x2, slot(li + 2u * NI), false);
    put1(s.x3, slot(li + 3u * NI), false);
}

@compute @workgroup_size(NI)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let rg = wg.y + wg.z * pc.row_groups_x;
    let rb = rg * select(BR, BR / 2u, SILU);
    let t0 = wg.x * TT;
    // This subgroup's operands in the tiles: tokens 32 (sg % 4) .., weight rows 64 (sg / 4) ..
    let xo = (32u * (sg % 4u)) * KP / 4u;
    let wo = (64u * (sg / 4u)) * KP / 4u;
    for (var e = li; e < 8u * 256u; e += NI) {
        cs[e] = 0.0;
    }
    let steps = (pc.cols + TK - 1u) / TK;
    var st = fetch(rb, t0, 0u, li);
    workgroupBarrier();
    var c00 = coopLoadT<coop_mat16x16<f32, C>>(&cs[0], 16u);
    var c01 = c00;
    var c02 = c00;
    var c03 = c00;
    var c10 = c00;
    var c11 = c00;
    var c12 = c00;
    var c13 = c00;
    for (var s = 0u; s < steps; s++) {
        // The step's words stored once every subgroup is done with the previous step's,
        // the next step's loads issued before the products.
        if (s > 0u) {
            workgroupBarrier();
        }
        put(st, li);
        workgroupBarrier();
        if (s + 1u < steps) {
            st = fetch(rb, t0, (s + 1u) * TK, li);
        }
        for (var kk = 0u; kk < TK; kk += 16u) {
            let k = kk / 4u;
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[xo + k], KP / 4u);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[xo + 4u * KP + k], KP / 4u);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&ws[wo + k], KP / 4u);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&ws[wo + 4u * KP + k], KP / 4u);
            let b2 = coopLoad<coop_mat16x16<f16, B>>(&ws[wo + 8u * KP + k], KP / 4u);
            let b3 = coopLoad<coop_mat16x16<f16, B>>(&ws[wo + 12u * KP + k], KP / 4u);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
        }
    }
    let tb = t0 + 32u * (sg % 4u);
    let rs = 64u * (sg / 4u);
    // Each tile through this subgroup's 256 floats of cs (element e: token e / 16, row
    // e % 16), in the same order in every subgroup (the barriers).
    for (var i = 0u; i < 2u; i++) {
        for (var j = 0u; j < 4u; j++) {
            let p = &cs[sg * 256u];
            switch (4u * i + j) {
                case 0u: { coopStoreT(c00, p, 16u); }
                case 1u: { coopStoreT(c01, p, 16u); }
                case 2u: { coopStoreT(c02, p, 16u); }
                case 3u: { coopStoreT(c03, p, 16u); }
                case 4u: { coopStoreT(c10, p, 16u); }
                case 5u: { coopStoreT(c11, p, 16u); }
                case 6u: { coopStoreT(c12, p, 16u); }
                default: { coopStoreT(c13, p, 16u); }
            }
            workgroupBarrier();
            let tok0 = tb + 16u * i;
            if (SILU) {
                // The gate's subgroups (0-3) write silu(gate) * up; the up's tile of the
                // same rows and tokens is in subgroup sg + 4's floats.
                if (sg < 4u) {
                    emit_gated(sg * 256u, lane, tok0, rb + 16u * j);
                }
            } else {
                for (var e = lane; e < 256u; e += 32u) {
                    let tok = tok0 + e / 16u;
                    let r = rb + rs + 16u * j + e % 16u;
                    if (tok < pc.tokens && r < pc.rows) {
                        put_y(tok * pc.y_stride + r, cs[sg * 256u + e]);
                    }
                }
            }
            workgroupBarrier();
        }
    }
}

// silu(gate) * up of one 16 x 16 tile (the gate's at cs[g..], the up's 1024 floats on),
// tokens from tok0, rows from r0: as f16 pairs (Y_F16_PAIRS) or f32.
fn emit_gated(g: u32, lane: u32, tok0: u32, r0: u32) {
    for (var e = 2u * lane; e < 256u; e += 64u) {
        let tok = tok0 + e / 16u;
        let r = r0 + e % 16u;
        if (tok >= pc.tokens || r >= pc.rows) {
            continue;
        }
        let v = silu_mul(vec2<f32>(cs[g + e], cs[g + e + 1u]), vec2<f32>(cs[g + 1024u + e], cs[g + 1024u + e + 1u]));
        put_pair(tok * pc.y_stride + r, r, v);
    }
}

