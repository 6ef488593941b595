//! include: matmul_x
// The cooperative-matrix matmul family (matmul_cm, matmul_cm_norm, matmul_cm_silu,
// matmul_cm_silu_norm): what the portable family computes (include/matmul_body.wgsl:
// same bindings, push constants and epilogues) on the matrix units. Each kernel file
// declares its bindings, NORM, SILU, `fn wb_raw(i)` (vec4 i of the second matrix, SILU) and `fn norm1(c)`.
//
// A workgroup of 256 invocations = 8 subgroups of 32 (the device flag
// coopmat_f16_16x16 requires subgroups of 32) computes a TT x TR = 64 tokens x 128 rows
// tile: subgroup s owns tokens 32 * (s % 2) .. +32 and rows 32 * (s / 2) .. +32 as 2 x 2
// accumulators of 16 x 16 (f32). Per step of TK = 32 columns, x (times norm_w) and the
// weights are converted to f16 into shared memory: xs [token][k] and ws [row][k], both
// with row stride KP = 40 halves (80 bytes: rows start on different banks), written 8
// bytes at a time. x tiles load row-major as A (coopLoadT), weight tiles column-major as
// B (coopLoad: B[k][n] = W[n][k]).
// The steps are software pipelined: the words of step k + 1 are loaded into registers
// (fetch_w, fetch_x) right after step k's tiles are in shared memory, so the loads are in
// flight during step k's multiplications; they are decoded and stored after them.
// The epilogue goes through shared memory one 16 x 16 tile per subgroup at a time: the
// per-token inverse RMS, SiLU, residual add and the bounds are applied there.
// Dispatch [ceil(rows / 128), ceil(tokens / 64), 1].
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct V4s { d: array<vec4<f32>> }
struct Push { rows: u32, cols: u32, stride8: u32, tokens: u32, x_stride: u32, y_stride: u32, accumulate: u32, eps: f32 }

const TT: u32 = 64u;
const TR: u32 = 128u;
const TK: u32 = 32u;
const KP: u32 = 40u;

// Four halves per element (stored 8 bytes at a time); offsets and strides below count
// halves and are divided by 4 where an element is addressed.
var<workgroup> xs: array<vec4<f16>, 640>; // TT * KP / 4
var<workgroup> ws: array<vec4<f16>, 1280>; // TR * KP / 4
var<workgroup> wsb: array<vec4<f16>, 1280>; // TR * KP / 4, the second matrix (SILU)
var<workgroup> cs: array<f32, 2048>; // 8 subgroups x 16 x 16
// The same for the second matrix (SILU). Full size in every variant: the non-SILU kernels
// keep (never executed) cooperative loads/stores of these arrays in their SPIR-V.
var<workgroup> csb: array<f32, 2048>;
var<workgroup> red: array<f32, 512>;
var<workgroup> inv_s: array<f32, 64>;

// One invocation's share of a K step's weight tile: 128 rows x 4 chunks of 8, chunks
// li and li + 256 (`ok`: inside the matrix), as loaded words (fetch_w) that store_w
// decodes into ws / wsb after the step before has used them.
struct WStage { a0: WRaw, a1: WRaw, b0: WRaw, b1: WRaw, ok0: bool, ok1: bool }

fn stage_at(r0: u32, k0: u32, idx: u32) -> vec2<u32> {
    return vec2<u32>(r0 + idx / 4u, k0 / 8u + idx % 4u);
}

fn stage_ok(at: vec2<u32>) -> bool {
    return at.x < pc.rows && at.y * 8u < pc.cols;
}

fn fetch_w(r0: u32, k0: u32, li: u32) -> WStage {
    var s: WStage;
    let p0 = stage_at(r0, k0, li);
    let p1 = stage_at(r0, k0, li + 256u);
    s.ok0 = stage_ok(p0);
    s.ok1 = stage_ok(p1);
    if (s.ok0) {
        s.a0 = fetch8(false, p0.x, p0.y);
        if (SILU) {
            s.b0 = fetch8(true, p0.x, p0.y);
        }
    }
    if (s.ok1) {
        s.a1 = fetch8(false, p1.x, p1.y);
        if (SILU) {
            s.b1 = fetch8(true, p1.x, p1.y);
        }
    }
    return s;
}

// Chunk `idx` of the tile (its words `a`, `b`) decoded to f16 in shared memory (zeros
// outside the matrix).
fn store_chunk(k0: u32, idx: u32, ok: bool, a: WRaw, b: WRaw) {
    let chunk = k0 / 8u + idx % 4u;
    var wa = W8(vec4<f32>(0.0), vec4<f32>(0.0));
    var wb = W8(vec4<f32>(0.0), vec4<f32>(0.0));
    if (ok) {
        wa = decode8(a, chunk);
        if (SILU) {
            wb = decode8(b, chunk);
        }
    }
    let o = ((idx / 4u) * KP + (idx % 4u) * 8u) / 4u;
    ws[o] = vec4<f16>(wa.a);
    ws[o + 1u] = vec4<f16>(wa.b);
    if (SILU) {
        wsb[o] = vec4<f16>(wb.a);
        wsb[o + 1u] = vec4<f16>(wb.b);
    }
}

fn store_w(s: WStage, k0: u32, li: u32) {
    store_chunk(k0, li, s.ok0, s.a0, s.b0);
    store_chunk(k0, li + 256u, s.ok1, s.a1, s.b1);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let r0 = wg.x * TR;
    let t0 = wg.y * TT;
    let sm = (sg % 2u) * 32u; // first token of this subgroup (in the tile)
    let sn = (sg / 2u) * 32u; // first row of this subgroup (in the tile)
    let xt = li / 8u;
    let xv = li % 8u;
    var ss = vec2<f32>(0.0);
    // Accumulators start as zeros loaded from shared memory (not the zero-value
    // constructor, which naga emits as an OpConstantNull variable initializer).
    let slot = sg * 256u;
    for (var e = lane; e < 256u; e += 32u) {
        cs[slot + e] = 0.0;
    }
    workgroupBarrier();
    var c00 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c01 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c10 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c11 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d00 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d01 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d10 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d11 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    // Software pipelined: the next step's weights and activations are loaded into
    // registers while this step's tiles are multiplied; they are decoded and written to
    // shared memory once the multiplications are done (the barrier after them).
    var pw = fetch_w(r0, 0u, li);
    var px = fetch_x(t0, 0u, xt, xv);
    for (var k0 = 0u; k0 < pc.cols; k0 += TK) {
        store_w(pw, k0, li);
        // Activations: 64 tokens x 8 vec4s, two per invocation, masked beyond cols.
        for (var h = 0u; h < 2u; h++) {
            var v = mask_x(px[h], k0, xv);
            if (NORM) {
                ss[h] += dot(v, v);
                v *= norm_x(k0, xv);
            }
            xs[((xt + 32u * h) * KP) / 4u + xv] = vec4<f16>(v);
        }
        workgroupBarrier();
        if (k0 + TK < pc.cols) {
            pw = fetch_w(r0, k0 + TK, li);
            px = fetch_x(t0, k0 + TK, xt, xv);
        }
        for (var kk = 0u; kk < TK; kk += 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(sm * KP + kk) / 4u], KP / 4u);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[((sm + 16u) * KP + kk) / 4u], KP / 4u);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&ws[(sn * KP + kk) / 4u], KP / 4u);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&ws[((sn + 16u) * KP + kk) / 4u], KP / 4u);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            if (SILU) {
                let e0 = coopLoad<coop_mat16x16<f16, B>>(&wsb[(sn * KP + kk) / 4u], KP / 4u);
                let e1 = coopLoad<coop_mat16x16<f16, B>>(&wsb[((sn + 16u) * KP + kk) / 4u], KP / 4u);
                d00 = coopMultiplyAdd(a0, e0, d00);
                d01 = coopMultiplyAdd(a0, e1, d01);
                d10 = coopMultiplyAdd(a1, e0, d10);
                d11 = coopMultiplyAdd(a1, e1, d11);
            }
        }
        workgroupBarrier();
    }
    if (NORM) {
        red[li] = ss.x;
        red[li + 256u] = ss.y;
        workgroupBarrier();
        if (li < TT) {
            let base = (li % 32u) * 8u + (li / 32u) * 256u;
            var s = 0.0;
            for (var e = 0u; e < 8u; e++) {
                s += red[base + e];
            }
            inv_s[li] = inverseSqrt(s / f32(pc.cols) + pc.eps);
        }
    }
    // Epilogue: tile (i, j) of every subgroup through its 16 x 16 slot of cs (naga 30.0.1
    // needs the stored value and the pointer bound to lets).
    workgroupBarrier();
    {
        let r = c00;
        let p = &cs[slot];
        coopStoreT(r, p, 16u);
        if (SILU) {
            let rb = d00;
            let pb = &csb[slot];
            coopStoreT(rb, pb, 16u);
        }
    }
    workgroupBarrier();
    emit(slot, t0 + sm, r0 + sn, sm, lane);
    workgroupBarrier();
    {
        let r = c01;
        let p = &cs[slot];
        coopStoreT(r, p, 16u);
        if (SILU) {
            let rb = d01;
            let pb = &csb[slot];
            coopStoreT(rb, pb, 16u);
        }
    }
    workgroupBarrier();
    emit(slot, t0 + sm, r0 + sn + 16u, sm, lane);
    workgroupBarrier();
    {
        let r = c10;
        let p = &cs[slot];
        coopStoreT(r, p, 16u);
        if (SILU) {
            let rb = d10;
            let pb = &csb[slot];
            coopStoreT(rb, pb, 16u);
        }
    }
    workgroupBarrier();
    emit(slot, t0 + sm + 16u, r0 + sn, sm + 16u, lane);
    workgroupBarrier();
    {
        let r = c11;
        let p = &cs[slot];
        coopStoreT(r, p, 16u);
        if (SILU) {
            let rb = d11;
            let pb = &csb[slot];
            coopStoreT(rb, pb, 16u);
        }
    }
    workgroupBarrier();
    emit(slot, t0 + sm + 16u, r0 + sn + 16u, sm + 16u, lane);
}

// Writes the 16 x 16 tile in cs[slot..] (row-major, [token][row]) for tokens tok0.. and
// rows row0..; tl0 is the first token's index in the workgroup tile (for inv_s).
fn emit(slot: u32, tok0: u32, row0: u32, tl0: u32, lane: u32) {
    for (var e = lane; e < 256u; e += 32u) {
        let tok = tok0 + e / 16u;
        let row = row0 + e % 16u;
        if (tok < pc.tokens && row < pc.rows) {
            var inv = 1.0;
            if (NORM) {
                inv = inv_s[tl0 + e / 16u];
            }
            let o = tok * pc.y_stride + row;
            let g = cs[slot + e] * inv;
            if (SILU) {
                y.d[o] = g / (1.0 + exp(-g)) * (csb[slot + e] * inv);
            } else if (pc.accumulate != 0u) {
                y.d[o] = y.d[o] + g;
            } else {
                y.d[o] = g;
            }
        }
    }
}
