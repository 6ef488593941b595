//! include: act_rms
// Activations to f16 for the cooperative-matrix batched matvec (matvec_batch_cm): token t
// (workgroup t) of x (f32, `x_stride` floats apart) becomes f16 words of xh (`h_words`
// u32 = 2 halves apart), times inverse RMS and the norm weight when `norm` is 1 (the
// RMSNorm the matvec family folds in). Tokens >= `tokens` (the padding up to the matrix
// tile) are written as zeros. cols even. Dispatch [padded tokens, 1, 1].
//
// Rows of up to 256 PR pairs (4096 columns) take one pass: invocation i loads pairs i,
// i + 256, .. and their norm weights at once, keeps them in registers, adds its squares,
// and writes its words once the inverse RMS is known. Longer rows load x twice. The sum
// of squares is per token in a fixed order (each invocation's pairs in order, subgroupAdd,
// then the subgroups' sums in subgroup order behind one barrier), so a token's result
// never depends on the others. (Until the twenty-ninth session: one loop of scalar loads
// per pass, each iteration's load waited on, and a nine-barrier tree; act_q8 was rebuilt
// the same way in the twenty-seventh.)
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct Push { cols: u32, tokens: u32, x_stride: u32, h_words: u32, norm: u32, eps: f32 }

@group(0) @binding(0) var<storage, read> x: F32s;
@group(0) @binding(1) var<storage, read> norm_w: F32s;
@group(0) @binding(2) var<storage, read_write> xh: U32s;
var<immediate> pc: Push;

// Pairs per invocation held in registers.
const PR: u32 = 8u;

// Pair p of the token row from float xo (the caller checks p < pairs).
fn pair(xo: u32, p: u32) -> vec2<f32> {
    return vec2<f32>(x.d[xo + 2u * p], x.d[xo + 2u * p + 1u]);
}

fn norm_pair(p: u32) -> vec2<f32> {
    if (pc.norm != 0u) {
        return vec2<f32>(norm_w.d[2u * p], norm_w.d[2u * p + 1u]);
    }
    return vec2<f32>(1.0);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_size) sgs: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let t = wg.x;
    let pairs = pc.cols / 2u;
    let ho = t * pc.h_words;
    let live = t < pc.tokens;
    let xo = t * pc.x_stride;
    let one_pass = pairs <= 256u * PR;
    // One pass: this invocation's pairs and their norm weights, all loads issued here.
    var v: array<vec2<f32>, PR>;
    var nw: array<vec2<f32>, PR>;
    var ss = 0.0;
    if (live) {
        if (one_pass) {
            for (var j = 0u; j < PR; j++) {
                let p = li + 256u * j;
                if (p < pairs) {
                    v[j] = pair(xo, p);
                    nw[j] = norm_pair(p);
                } else {
                    v[j] = vec2<f32>(0.0);
                }
            }
            for (var j = 0u; j < PR; j++) {
                ss += dot(v[j], v[j]);
            }
        } else {
            for (var p = li; p < pairs; p += 256u) {
                let a = pair(xo, p);
                ss += dot(a, a);
            }
        }
    }
    var inv = 1.0;
    if (pc.norm != 0u) {
        inv = inv_rms(li, sgs, lane, ss, pc.cols, pc.eps);
    }
    if (one_pass) {
        for (var j = 0u; j < PR; j++) {
            let p = li + 256u * j;
            if (p < pairs) {
                var o = vec2<f32>(0.0);
                if (live) {
                    o = v[j] * inv * nw[j];
                }
                xh.d[ho + p] = pack2x16float(o);
            }
        }
        return;
    }
    for (var p = li; p < pairs; p += 256u) {
        var o = vec2<f32>(0.0);
        if (live) {
            o = pair(xo, p) * inv * norm_pair(p);
        }
        xh.d[ho + p] = pack2x16float(o);
    }
}
