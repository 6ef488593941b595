//! variants: f16 bf16 f32
// x[c] = W[params.token, c]; one thread per 8-element chunk.
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct Push { cols: u32, stride8: u32 }

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> w: WVec;
@group(0) @binding(2) var<storage, read_write> x: F32s;
var<immediate> pc: Push;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    if (c >= pc.stride8) {
        return;
    }
    let i = (params.token * pc.stride8 + c) * WPC;
    let v = decode8(w.d[i], w.d[i + WPC - 1u]);
    let vals = array<f32, 8>(v.a.x, v.a.y, v.a.z, v.a.w, v.b.x, v.b.y, v.b.z, v.b.w);
    for (var k = 0u; k < 8u; k++) {
        let col = c * 8u + k;
        if (col < pc.cols) {
            x.d[col] = vals[k];
        }
    }
}
