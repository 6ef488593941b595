enable f16;
enable wgpu_cooperative_matrix;
// Int8 products scaled in registers (docs/decisions/0008-int8-matrix-units.md): C[r][t] =
// (A . B)[r][t] * sa[r] * sb[t], A an M x K and B a K x N int8 matrix (int8 marker types,
// rewritten by build.rs as in mma_i8_probe), the int32 product converted and divided
// element-wise by R = (1 / sa) (1 / sb)^T, an f16 outer product on the matrix units
// (`i8_scaled`, whose body build.rs replaces: naga has no conversion or element-wise
// product of matrices). One subgroup per 16 x 16 tile. `mode` 0: all of K, C as above.
// `mode` 1 (speed): the first 32 columns of K, `reps` steps of four independent chains,
// each step one int8 product, one f16 product for R and the scaling; C = 4 reps times the
// first 32 columns' result. Needs M, N multiples of 16, K of 32. Dispatch [M / 16, N / 16, 1].
struct Push { m: u32, n: u32, k: u32, mode: u32, reps: u32 }

// A row-major (K / 4 floats per row), B as its transpose; sa (M floats) then sb (N); C
// row-major floats.
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> bt: array<f32>;
@group(0) @binding(2) var<storage, read> sc: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
var<immediate> pc: Push;

var<workgroup> zeros: array<f32, 256>;
// R's factors: column 0 of ra = 1 / sa of the tile's rows, row 0 of rb = 1 / sb of its
// columns, zeros elsewhere (row-major 16 x 16 each).
var<workgroup> ra: array<f16, 256>;
var<workgroup> rb: array<f16, 256>;

// Replaced by build.rs (int8_matrix_fixup): f32(p) / r, element-wise.
fn i8_scaled(p: coop_mat8x8<f32, C>, r: coop_mat16x16<f32, C>) -> coop_mat16x16<f32, C> {
    return r;
}

@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let r0 = wg.x * 16u;
    let n0 = wg.y * 16u;
    for (var e = li; e < 256u; e += 32u) {
        zeros[e] = 0.0;
        var x = 0.0;
        var y = 0.0;
        if (e % 16u == 0u) {
            x = 1.0 / sc[r0 + e / 16u];
        }
        if (e < 16u) {
            y = 1.0 / sc[pc.m + n0 + e];
        }
        ra[e] = f16(x);
        rb[e] = f16(y);
    }
    workgroupBarrier();
    var zc = coopLoadT<coop_mat8x8<f32, C>>(&zeros[0], 16u);
    var zf = coopLoadT<coop_mat16x16<f32, C>>(&zeros[0], 16u);
    var f0 = zf;
    var f1 = zf;
    var f2 = zf;
    var f3 = zf;
    let ma16 = coopLoadT<coop_mat16x16<f16, A>>(&ra[0], 16u);
    let mb16 = coopLoadT<coop_mat16x16<f16, B>>(&rb[0], 16u);
    let hs = pc.k / 4u;
    if (pc.mode == 0u) {
        var acc = zc;
        for (var k0 = 0u; k0 < pc.k; k0 += 32u) {
            let ma = coopLoadT<coop_mat8x8<f32, A>>(&a[r0 * hs + k0 / 4u], hs);
            let mb = coopLoad<coop_mat8x8<f32, B>>(&bt[n0 * hs + k0 / 4u], hs);
            acc = coopMultiplyAdd(ma, mb, acc);
        }
        let r = coopMultiplyAdd(ma16, mb16, zf);
        f0 = i8_scaled(acc, r);
    } else {
        let ma = coopLoadT<coop_mat8x8<f32, A>>(&a[r0 * hs], hs);
        let mb = coopLoad<coop_mat8x8<f32, B>>(&bt[n0 * hs], hs);
        for (var i = 0u; i < pc.reps; i++) {
            let r = coopMultiplyAdd(ma16, mb16, zf);
            let p0 = coopMultiplyAdd(ma, mb, zc);
            f0 = f0 + i8_scaled(p0, r);
            let p1 = coopMultiplyAdd(ma, mb, zc);
            f1 = f1 + i8_scaled(p1, r);
            let p2 = coopMultiplyAdd(ma, mb, zc);
            f2 = f2 + i8_scaled(p2, r);
            let p3 = coopMultiplyAdd(ma, mb, zc);
            f3 = f3 + i8_scaled(p3, r);
        }
        let s01 = f0 + f1;
        let s23 = f2 + f3;
        let s = s01 + s23;
        f0 = s;
    }
    let v = f0;
    let stride = pc.n;
    let p = &c[r0 * pc.n + n0];
    coopStoreT(v, p, stride);
}
