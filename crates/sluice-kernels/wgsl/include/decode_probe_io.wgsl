// What the decode probes (decode16h_probe: a test kernel, no model path)
// share: the weight matrix (binding 0, the GPU layout), the f32 output (binding 1), the
// push constants (rows, cols: a multiple of QBLOCK, w_stride: 16-byte vec4s between rows)
// and the entry point. Invocation i takes group g = i % (cols / 16) of row r =
// i / (cols / 16) (16 weights from column 16 g) and calls the probe's
// `probe_group(o, rb, nb, c8)` (o = r * cols + 16 g: its first output index; rb: the row's
// first vec4; nb: blocks per row; c8 = 2 g). Dispatch [ceil(rows * cols / 16 / 64), 1, 1].
struct WVec { d: array<vec4<u32>> }
struct Push { rows: u32, cols: u32, w_stride: u32 }

@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
var<immediate> pc: Push;

fn wraw(sel: bool, i: u32) -> vec4<u32> {
    return w.d[i];
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let gpr = pc.cols / 16u;
    if (gid.x >= pc.rows * gpr) {
        return;
    }
    let r = gid.x / gpr;
    let c8 = 2u * (gid.x % gpr);
    probe_group(r * pc.cols + 8u * c8, r * pc.w_stride, pc.cols / QBLOCK, c8);
}
