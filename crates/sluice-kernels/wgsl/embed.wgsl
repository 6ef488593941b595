//! variants: f16 bf16 f32 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k
// Token embedding gather: x[c] = W[params.token, c] for c < cols. W: [vocab, stride8 * 8]
// (block formats: rows of stride8 vec4s in the GPU layout of quant.rs, decoded here).
// Workgroup of 64, one 8-element chunk per invocation: dispatch embed_groups(cols) =
// [ceil(stride8 / 64), 1, 1]. A token past the table's end writes zeros. A table split
// over several bindings (row ranges within the device's binding limit) runs one dispatch
// per part: the binding's rows are the table's from push field `first`, and a part writes
// only its own tokens (the last part, push field `last`, also those past the table).

// The params buffer may carry the prompt tokens of a prefill chunk after its header.
struct Params { token: u32, pos: u32, seq_len: u32, pad: u32, prompt: array<u32> }
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct Push { cols: u32, stride8: u32, prefill: u32, x_stride: u32, first: u32, last: u32 }

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> w: WVec;
@group(0) @binding(2) var<storage, read_write> x: F32s;
var<immediate> pc: Push;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>) {
    let c8 = gid.x;
    if (c8 * 8u >= pc.cols) {
        return;
    }
    let rows = arrayLength(&w.d) / (pc.stride8 * W_VEC4S);
    // Prefill: token wg.y of the prompt chunk, written x_stride floats after token wg.y - 1.
    var token = params.token;
    if (pc.prefill != 0u) {
        token = params.prompt[wg.y];
    }
    // Another part's token (a split table): that part's dispatch writes it.
    if (token < pc.first) {
        return;
    }
    let past = token - pc.first >= rows;
    if (past && pc.last == 0u) {
        return;
    }
    let xo = wg.y * pc.x_stride;
    var v = W8(vec4<f32>(0.0), vec4<f32>(0.0));
    if (!past) {
        v = load_w8_rc(token - pc.first, c8, pc.stride8, pc.cols);
    }
    let base = c8 * 8u;
    for (var k = 0u; k < 4u; k++) {
        if (base + k < pc.cols) {
            x.d[xo + base + k] = v.a[k];
        }
        if (base + 4u + k < pc.cols) {
            x.d[xo + base + 4u + k] = v.b[k];
        }
    }
}

// Raw weight vec4s for the block-format decoders (dtype/q*.wgsl).
fn wraw(sel: bool, i: u32) -> vec4<u32> {
    return w.d[i];
}
