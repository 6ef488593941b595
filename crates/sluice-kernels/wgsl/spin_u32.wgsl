// A deliberately slow kernel for sync tests: each invocation iterates `iters` times of an
// integer hash and stores the result, dst[i] = hash^iters(src[i]).
struct Words { d: array<u32> }
struct Push { iters: u32, n: u32 }

@group(0) @binding(0) var<storage, read> src: Words;
@group(0) @binding(1) var<storage, read_write> dst: Words;
var<immediate> pc: Push;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= pc.n) {
        return;
    }
    var x = src.d[i];
    for (var k = 0u; k < pc.iters; k++) {
        x = (x ^ (x >> 15u)) * 2246822519u + k;
    }
    dst.d[i] = x;
}
