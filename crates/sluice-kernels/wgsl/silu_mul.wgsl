// y[i] = silu(g[i]) * u[i] for i < n, silu(g) = g / (1 + exp(-g)).
// Workgroup 256: dispatch [groups_for(n, 256), 1, 1].

struct F32s { d: array<f32> }
struct Push { n: u32 }

@group(0) @binding(0) var<storage, read> g: F32s;
@group(0) @binding(1) var<storage, read> u: F32s;
@group(0) @binding(2) var<storage, read_write> y: F32s;
var<immediate> pc: Push;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < pc.n) {
        let v = g.d[i];
        y.d[i] = v / (1.0 + exp(-v)) * u.d[i];
    }
}
