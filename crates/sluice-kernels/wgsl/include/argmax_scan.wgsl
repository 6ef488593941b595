// The greedy-pick kernels' scan of a logits binding (argmax.wgsl, argmax_advance.wgsl,
// argmax_rows.wgsl: kernel binding `logits`) and the pick they write when every logit is NaN.

// A settled pick as the kernels write it: with no pick (every logit NaN) index 0 and the
// value of logit `first`, the range's first (kernel binding `logits`).
fn written(b: Best, first: u32) -> Best {
    if (b.i == NONE) {
        return Best(logits.d[first], 0u, b.bad);
    }
    return b;
}

// This invocation's best pair and non-finite count over logits base + i for i = first,
// first + step, ... < n (kernel binding `logits`), four loads in flight per round.
fn scan(base: u32, n: u32, first: u32, step: u32) -> Best {
    var bv = bitcast<f32>(0xff800000u); // -inf
    var bi = NONE;
    var bad = 0u;
    var i = first;
    for (; i + 3u * step < n; i += 4u * step) {
        let v0 = logits.d[base + i];
        let v1 = logits.d[base + i + step];
        let v2 = logits.d[base + i + 2u * step];
        let v3 = logits.d[base + i + 3u * step];
        bad += nonfinite(v0) + nonfinite(v1) + nonfinite(v2) + nonfinite(v3);
        if (better(v0, i, bv, bi)) { bv = v0; bi = i; }
        if (better(v1, i + step, bv, bi)) { bv = v1; bi = i + step; }
        if (better(v2, i + 2u * step, bv, bi)) { bv = v2; bi = i + 2u * step; }
        if (better(v3, i + 3u * step, bv, bi)) { bv = v3; bi = i + 3u * step; }
    }
    for (; i < n; i += step) {
        let v = logits.d[base + i];
        bad += nonfinite(v);
        if (better(v, i, bv, bi)) { bv = v; bi = i; }
    }
    return Best(bv, bi, bad);
}
