// What the persistent layer's matvec ops share (include/persistent_matvec_f16.wgsl,
// include/persistent_matvec_q.wgsl): the input staging (an op's input times its norm
// weight, XT floats per tile, in shared memory) and a row's output.

// Staged input floats per tile (16 KiB of shared memory, attention_core's `part`).
const XT: u32 = 4096u;

// The staged input tile lives in attention_core's `part` (XT floats; the attention op and
// the matvec ops never hold it at the same time), so the kernel fits 32 KiB of shared
// memory (lavapipe's limit). Vec4 j sits at slot j ^ ((j / 8) % 8): the lanes of a row
// read vec4s 8 apart in the block formats (one 32-element unit each) and 2 apart for f16,
// which without the swizzle fall into the same few banks.
fn xt_slot(j: u32) -> u32 {
    return 4u * (j ^ ((j >> 3u) & 7u));
}

fn xt_load(j: u32) -> vec4<f32> {
    let i = xt_slot(j);
    return vec4<f32>(part[i], part[i + 1u], part[i + 2u], part[i + 3u]);
}

fn xt_store(j: u32, v: vec4<f32>) {
    let i = xt_slot(j);
    part[i] = v.x;
    part[i + 1u] = v.y;
    part[i + 2u] = v.z;
    part[i + 3u] = v.w;
}

// Stages vec4s [j0, j0 + n4) of activation `a_in` times norm `nrm` as the tile (all
// invocations call it; it holds two barriers, the first so that the previous tile's
// readers are done); returns this invocation's sum of squares of the raw inputs. Four
// vec4s in flight per invocation.
fn stage_tile(a_in: u32, nrm: u32, j0: u32, n4: u32, li: u32) -> f32 {
    var ss = 0.0;
    workgroupBarrier();
    for (var j = li; j < n4; j += 1024u) {
        var v0 = vec4<f32>(0.0);
        var v1 = vec4<f32>(0.0);
        var v2 = vec4<f32>(0.0);
        var v3 = vec4<f32>(0.0);
        v0 = act_load4(a_in, j0 + j);
        if (j + 256u < n4) { v1 = act_load4(a_in, j0 + j + 256u); }
        if (j + 512u < n4) { v2 = act_load4(a_in, j0 + j + 512u); }
        if (j + 768u < n4) { v3 = act_load4(a_in, j0 + j + 768u); }
        ss += dot(v0, v0) + dot(v1, v1) + dot(v2, v2) + dot(v3, v3);
        xt_store(j, v0 * norm_load4(nrm, j0 + j));
        if (j + 256u < n4) { xt_store(j + 256u, v1 * norm_load4(nrm, j0 + j + 256u)); }
        if (j + 512u < n4) { xt_store(j + 512u, v2 * norm_load4(nrm, j0 + j + 512u)); }
        if (j + 768u < n4) { xt_store(j + 768u, v3 * norm_load4(nrm, j0 + j + 768u)); }
    }
    workgroupBarrier();
    return ss;
}

// Adds up a row's `acc` over its tpr lanes and, in the lane that `writes`, stores the
// row's output: silu(acc.x * inv) * (acc.y * inv) for a gated op, else old + acc.x * inv.
fn row_out(acc_in: vec2<f32>, inv: f32, tpr: u32, writes: bool, gated: bool, a_out: u32,
           row: u32, old: f32) {
    var acc = acc_in;
    for (var o = tpr / 2u; o > 0u; o /= 2u) {
        acc += subgroupShuffleXor(acc, o);
    }
    if (writes) {
        let g = acc.x * inv;
        if (gated) {
            act_store(a_out, row, g / (1.0 + exp(-g)) * (acc.y * inv));
        } else {
            act_store(a_out, row, old + g);
        }
    }
}
