// A head's output (hd floats at attn[out ..], written by this workgroup) also as q8
// records for the integer-dot o projection (`matvec_xq8`, the quantized handoff of
// docs/decisions/0007), attention_rope_q8's `attn_written` (include/attention_core.wgsl),
// when q8_at is set: block b of the attn row at float q8_at + 12 b,
// [d, d * sum of the first 16 q, d * sum of the last 16 q, 0, 8 words of int8], exactly
// what o's x step would make of the same floats (include/quant_x8.wgsl). hd a multiple of
// 32 (the host sets q8_at only then). Every invocation calls it (a barrier inside).
// `staged` (a lone split): the floats are read from attention_core's copy in workgroup
// memory (sc) behind a workgroup barrier instead of from attn behind a storage barrier
// (H200, tg128: Qwen3-4B Q4_K_M 400.0 -> 405.7 tok/s, Q4_0 479.5 -> 484.9, Q8_0 415.3 ->
// 420.2; BENCHMARKS.md, forty-third session).
fn attn_written(tid: u32, out: u32, hd: u32, staged: bool) {
    if (pc.q8_at == 0u) {
        return;
    }
    // This workgroup's output, visible to its invocations: in workgroup memory (sc, the
    // single-split path: no round trip through memory) or in attn (finish_head).
    if (staged) {
        workgroupBarrier();
    } else {
        storageBarrier();
    }
    if (tid < hd / 32u) {
        let b = out + 32u * tid;
        var vs: array<vec4<f32>, 8>;
        for (var k = 0u; k < 8u; k++) {
            let e = 32u * tid + 4u * k;
            if (staged) {
                vs[k] = vec4<f32>(sc[e], sc[e + 1u], sc[e + 2u], sc[e + 3u]);
            } else {
                let g = out + e;
                vs[k] = vec4<f32>(attn.d[g], attn.d[g + 1u], attn.d[g + 2u], attn.d[g + 3u]);
            }
        }
        var qw: array<u32, 8>;
        let dv = quantize_x32(&vs, &qw);
        let o = pc.q8_at + 12u * (b / 32u);
        attn.d[o] = dv.x;
        attn.d[o + 1u] = dv.y;
        attn.d[o + 2u] = dv.z;
        attn.d[o + 3u] = 0.0;
        for (var k = 0u; k < 8u; k++) {
            attn.d[o + 4u + k] = bitcast<f32>(qw[k]);
        }
    }
}
