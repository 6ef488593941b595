// The activation tile of the matmul families (include/matmul_body.wgsl,
// include/matmul_cm_body.wgsl): each invocation loads two vec4s of a K step (tokens xt and
// xt + 32 of the tile, vec4 xv of the step) with `fetch_x` — loads only, so that they can
// be in flight while the previous step is multiplied — then `mask_x` zeroes what lies
// beyond cols and, with NORM, the caller adds the squares to the token's sum and scales
// by `norm_x` (the norm weights; zero beyond cols).
fn fetch_x(t0: u32, k0: u32, xt: u32, xv: u32) -> array<vec4<f32>, 2> {
    var v: array<vec4<f32>, 2>;
    let cols4 = (pc.cols + 3u) / 4u;
    let c4 = k0 / 4u + xv;
    for (var h = 0u; h < 2u; h++) {
        let tok = t0 + xt + 32u * h;
        v[h] = vec4<f32>(0.0);
        if (tok < pc.tokens && c4 < cols4) {
            v[h] = x.d[(tok * pc.x_stride) / 4u + c4];
        }
    }
    return v;
}

fn mask_x(v: vec4<f32>, k0: u32, xv: u32) -> vec4<f32> {
    let c = k0 + 4u * xv;
    var r = v;
    for (var e = 0u; e < 4u; e++) {
        if (c + e >= pc.cols) {
            r[e] = 0.0;
        }
    }
    return r;
}

fn norm_x(k0: u32, xv: u32) -> vec4<f32> {
    let c = k0 + 4u * xv;
    return vec4<f32>(norm1(c), norm1(c + 1u), norm1(c + 2u), norm1(c + 3u));
}
