enable f16;
enable wgpu_cooperative_matrix;
// Speed probe (no model path): f16 16x16x16 products with their operands loaded from shared
// memory in the layouts the staged kernels could use, to see what a cooperative load from
// shared memory costs on the device. One subgroup per workgroup, `reps` steps of four
// independent products (four accumulators); C (a 16 x 16 tile per workgroup, row-major at
// 256 * workgroup) holds the sum, meaningless. `mode`: 0 operands in registers; 1 A and B
// reloaded each step from `array<f16>` rows of 16 halves (dense); 2 rows of 24 halves; 3
// rows of 40 halves (the f16 staged kernels' 32 + 8); 4 as 3 from `array<vec4<f16>>`
// (offsets and stride in vec4s, as those kernels load); 5 as 4 with only A reloaded.
// Dispatch [groups, 1, 1].
struct Push { mode: u32, reps: u32 }

@group(0) @binding(0) var<storage, read_write> c: array<f32>;
var<immediate> pc: Push;

var<workgroup> zeros: array<f32, 256>;
// Three copies of A and B (16 rows each) at row pitch 40 halves, in both views.
var<workgroup> sh: array<f16, 3840>;
var<workgroup> sv: array<vec4<f16>, 960>;

@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    for (var e = li; e < 256u; e += 32u) {
        zeros[e] = 0.0;
    }
    for (var e = li; e < 3840u; e += 32u) {
        sh[e] = f16(f32(e % 7u) * 0.125);
    }
    for (var e = li; e < 960u; e += 32u) {
        sv[e] = vec4<f16>(f16(f32(e % 5u) * 0.25));
    }
    workgroupBarrier();
    var c0 = coopLoadT<coop_mat16x16<f32, C>>(&zeros[0], 16u);
    var c1 = c0;
    var c2 = c0;
    var c3 = c0;
    var ma = coopLoadT<coop_mat16x16<f16, A>>(&sh[0], 16u);
    var mb = coopLoad<coop_mat16x16<f16, B>>(&sh[640u], 16u);
    for (var i = 0u; i < pc.reps; i++) {
        let k = (i * 7u) % 3u;
        if (pc.mode == 1u) {
            ma = coopLoadT<coop_mat16x16<f16, A>>(&sh[1280u * k], 16u);
            mb = coopLoad<coop_mat16x16<f16, B>>(&sh[1280u * k + 640u], 16u);
        } else if (pc.mode == 2u) {
            ma = coopLoadT<coop_mat16x16<f16, A>>(&sh[1280u * k], 24u);
            mb = coopLoad<coop_mat16x16<f16, B>>(&sh[1280u * k + 640u], 24u);
        } else if (pc.mode == 3u) {
            ma = coopLoadT<coop_mat16x16<f16, A>>(&sh[1280u * k], 40u);
            mb = coopLoad<coop_mat16x16<f16, B>>(&sh[1280u * k + 640u], 40u);
        } else if (pc.mode == 4u) {
            ma = coopLoadT<coop_mat16x16<f16, A>>(&sv[320u * k], 10u);
            mb = coopLoad<coop_mat16x16<f16, B>>(&sv[320u * k + 160u], 10u);
        } else if (pc.mode == 5u) {
            ma = coopLoadT<coop_mat16x16<f16, A>>(&sv[320u * k], 10u);
        }
        c0 = coopMultiplyAdd(ma, mb, c0);
        c1 = coopMultiplyAdd(ma, mb, c1);
        c2 = coopMultiplyAdd(ma, mb, c2);
        c3 = coopMultiplyAdd(ma, mb, c3);
    }
    let s01 = c0 + c1;
    let s23 = c2 + c3;
    let s = s01 + s23;
    let p = &c[256u * wg.x];
    coopStoreT(s, p, 16u);
}
