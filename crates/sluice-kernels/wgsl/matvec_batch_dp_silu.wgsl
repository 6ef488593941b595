//! variants: q8_0_dp q4_0_dp q4_1_dp q5_0_dp q5_1_dp q4_k_dp q5_k_dp q6_k_dp
//! include: matvec_batch_dp_body
// Integer-dot batched gate/up: y[t, r] = SiLU(W_gate[r] . x_hat[t]) * (W_up[r] .
// x_hat[t]), x_hat the tokens' quantized activations (act_q8.wgsl). See
// include/matvec_batch_dp_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> w_b: WVec;
@group(0) @binding(2) var<storage, read> xq: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> xd: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
// With push field `q8` = 1 the output also goes here quantized to int8 per block of 32,
// as act_q8.wgsl (without a norm) would make it of y, bit for bit: token t's words from
// `t * q8_words` of hq, its blocks' (d, d * sum of the first 16 q, d * sum of the last 16
// q, 0) from vec4 `t * q8_blocks` of hd (the down projection's input). A workgroup's rows
// must be whole blocks of 32 (`sluice_kernels::matvec_batch_dp_q8_plan`).
@group(0) @binding(5) var<storage, read_write> hq: array<u32>;
@group(0) @binding(6) var<storage, read_write> hd: array<vec4<f32>>;
var<immediate> pc: Push;
const SILU: bool = true;
fn wb_raw(i: u32) -> vec4<u32> {
    return w_b.d[i];
}

// The workgroup's outputs (token t, row j of its `n` rows at t * n + j) for the q8 output.
var<workgroup> hs: array<f32, 1024>;

fn stage_h(t: u32, j: u32, n: u32, v: f32) {
    hs[t * n + j] = v;
}

// The staged outputs of tokens t0 .. t0 + TB - 1, rows first .. first + n - 1, to hq / hd:
// one invocation per (token, block of 32); blocks from `rows` on are not written.
fn put_h_q8(li: u32, first: u32, n: u32, t0: u32) {
    workgroupBarrier();
    let nb = n / 32u;
    for (var e = li; e < TB * nb; e += WG) {
        let t = e / nb;
        let b = e % nb;
        if (t0 + t >= pc.tokens || first + 32u * b >= pc.rows) {
            continue;
        }
        var vs: array<vec4<f32>, 8>;
        for (var k = 0u; k < 8u; k++) {
            let i = t * n + 32u * b + 4u * k;
            vs[k] = vec4<f32>(hs[i], hs[i + 1u], hs[i + 2u], hs[i + 3u]);
        }
        var qw: array<u32, 8>;
        let dv = quantize_x32(&vs, &qw);
        let gb = first / 32u + b;
        for (var k = 0u; k < 8u; k++) {
            hq[(t0 + t) * pc.q8_words + 8u * gb + k] = qw[k];
        }
        hd[(t0 + t) * pc.q8_blocks + gb] = vec4<f32>(dv, 0.0);
    }
}
