enable f16;
enable wgpu_cooperative_matrix;
// Which elements of a 16 x 16 cooperative matrix each invocation of a subgroup holds, and
// whether a matrix built element by element in registers multiplies as one loaded from
// memory (tests/coop_element.rs; the element functions' bodies are written by build.rs,
// `coop_element_fixup`: naga's WGSL has no element access on matrices). One subgroup.
//
// `src` holds two 16 x 16 row-major matrices: I (element (r, c) = 16 r + c, exact in f16)
// and V (any values). out[0 .. 768): for use A, B and the f32 accumulator in turn, 32
// invocations x 8 slots: element i of invocation l of I loaded as that use (-1 past the
// invocation's element count); out[768 + u]: the element count of use u (A, B, C). Then
// out[800 .. 1056): E . Vb, row-major, where E is the identity (use A) and Vb is V built
// as a use-B matrix element by element: element i of invocation l set to V[I_b(l, i)],
// I_b being the index matrix loaded as use B, so the product is V exactly when setting
// element i writes the same place that reading element i reads.
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

var<workgroup> ih: array<f16, 256>;
var<workgroup> idf: array<f32, 256>;
var<workgroup> eye: array<f16, 256>;
var<workgroup> res: array<f32, 256>;

// Bodies replaced by build.rs (coop_element_fixup).
fn get_a(m: coop_mat16x16<f16, A>, i: u32) -> f16 {
    return f16(0.0);
}
fn get_b(m: coop_mat16x16<f16, B>, i: u32) -> f16 {
    return f16(0.0);
}
fn get_c(m: coop_mat16x16<f32, C>, i: u32) -> f32 {
    return 0.0;
}
fn len_a(m: coop_mat16x16<f16, A>) -> u32 {
    return 0u;
}
fn len_b(m: coop_mat16x16<f16, B>) -> u32 {
    return 0u;
}
fn len_c(m: coop_mat16x16<f32, C>) -> u32 {
    return 0u;
}
fn set_b(m: coop_mat16x16<f16, B>, i: u32, v: f16) -> coop_mat16x16<f16, B> {
    return m;
}

@compute @workgroup_size(32)
fn main(@builtin(local_invocation_index) li: u32) {
    for (var e = li; e < 256u; e += 32u) {
        ih[e] = f16(src[e]);
        idf[e] = src[e];
        eye[e] = select(f16(0.0), f16(1.0), e / 16u == e % 16u);
        res[e] = 0.0;
    }
    workgroupBarrier();
    let ma = coopLoad<coop_mat16x16<f16, A>>(&ih[0], 16u);
    let mb = coopLoad<coop_mat16x16<f16, B>>(&ih[0], 16u);
    let mc = coopLoad<coop_mat16x16<f32, C>>(&idf[0], 16u);
    let na = len_a(ma);
    let nb = len_b(mb);
    let nc = len_c(mc);
    for (var i = 0u; i < 8u; i++) {
        let o = li * 8u + i;
        out[o] = select(-1.0, f32(get_a(ma, i)), i < na);
        out[256u + o] = select(-1.0, f32(get_b(mb, i)), i < nb);
        out[512u + o] = select(-1.0, get_c(mc, i), i < nc);
    }
    if (li == 0u) {
        out[768u] = f32(na);
        out[769u] = f32(nb);
        out[770u] = f32(nc);
    }
    // V as use B, element by element from the index matrix's places.
    var vb = coopLoad<coop_mat16x16<f16, B>>(&eye[0], 16u);
    for (var i = 0u; i < 8u; i++) {
        if (i < nb) {
            let at = u32(get_b(mb, i));
            vb = set_b(vb, i, f16(src[256u + at]));
        }
    }
    let e = coopLoad<coop_mat16x16<f16, A>>(&eye[0], 16u);
    let z = coopLoad<coop_mat16x16<f32, C>>(&res[0], 16u);
    let p = coopMultiplyAdd(e, vb, z);
    coopStore(p, &res[0], 16u);
    workgroupBarrier();
    for (var k = li; k < 256u; k += 32u) {
        out[800u + k] = res[k];
    }
}
