// out[i] = in[i] * mul + add (wrapping u32), for i < n. Exact, so GPU == CPU bit for bit.
struct Words { d: array<u32> }
struct Push { mul: u32, add: u32, n: u32 }

@group(0) @binding(0) var<storage, read> src: Words;
@group(0) @binding(1) var<storage, read_write> dst: Words;
var<immediate> pc: Push;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < pc.n) {
        dst.d[i] = src.d[i] * pc.mul + pc.add;
    }
}
