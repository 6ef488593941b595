// Bindings and push constants of the batched paged attention kernels (batch_attention,
// batch_attention_gqa, batch_attention_gqa_hd128 and their _rope forms;
// `sluice_kernels::BatchAttnPush`), the score and value loops, the workgroup reductions and
// their split of long contexts (`split_range`, `settle_splits`). The caches (bindings 3, 4,
// 6 and 7) and `stage_heads` come from include/batch_attention_caches.wgsl (read only, the
// query staged as it is) or include/batch_attention_rope.wgsl (the _rope kernels: the
// query's and the new key's norm and rotation folded in, the key and value appended);
// `alias Lane` (f32: one query head; vec4<f32>: up to four heads as lanes), `NH`,
// `column_heads`, `lane_value`, `lane_with` and `put_q` from
// include/batch_attention_one_head.wgsl or include/batch_attention_gqa_heads.wgsl. The
// kernel's body declares the workgroup arrays `qs` (the scaled query, a Lane per dim), `ps`
// (a tile's weights, a Lane per key), `slots` (a tile's cache rows), `red` (a Lane per
// subgroup) and `part` (the key lanes' per-dim sums, at least 256 + head_dim Lanes), `WG`
// and `NEG`.
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct U32x4s { d: array<vec4<u32>> }
struct V4s { d: array<vec4<f32>> }
struct Push {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    capacity: u32,
    q_stride: u32,
    o_stride: u32,
    scale: f32,
    block: u32,
    max_blocks: u32,
    out_f16: u32,
    q8: u32,
    q8_words: u32,
    q8_blocks: u32,
    chunk: u32,
    splits: u32,
    // The _rope kernels only (include/batch_attention_rope.wgsl): batch_rope's flags, eps,
    // theta and the rows' k and v strides.
    rope_flags: u32,
    eps: f32,
    theta: f32,
    k_stride: u32,
    v_stride: u32,
}

@group(0) @binding(0) var<storage, read> rows: U32s;
@group(0) @binding(1) var<storage, read> table: U32s;
@group(0) @binding(2) var<storage, read> q: F32s;
// f32 bits per element, or (out_f16 = 1) f16 pairs per word: the matrix-unit matvec's
// activations, as act_f16.wgsl would make them from the f32 output (o_stride then counts
// halves).
@group(0) @binding(5) var<storage, read_write> out: U32s;
// With `q8` = 1 the output goes here instead of `out`, quantized to int8 per block of 32
// as act_q8.wgsl (without a norm) would make it of the f32 output, bit for bit: row r's
// words from `r * q8_words` of oq, its blocks' (d, d * sum of the first 16 q, d * sum of
// the last 16 q, 0) from vec4 `r * q8_blocks` of od (the integer-dot batched matvec's
// input; head_dim a multiple of 32).
@group(0) @binding(8) var<storage, read_write> oq: U32s;
@group(0) @binding(9) var<storage, read_write> od: V4s;
// Split contexts (`splits` > 1): each split's (m, l, per-dim sums) for the last split of
// its (row, workgroup column) to merge, and that cell's tickets (zero between dispatches;
// the merging workgroup puts its ticket back to 0). Declared @coherent: the merging
// workgroup reads what others wrote in this dispatch.
@group(0) @binding(10) @coherent var<storage, read_write> apart: array<Lane>;
@group(0) @binding(11) var<storage, read_write> atick: array<atomic<u32>>;
var<immediate> pc: Push;

var<workgroup> aticket: u32;
// What the output sums over after `settle_splits`: the inverse denominators and the key
// lanes of `part`.
var<private> out_inv: Lane;
var<private> out_nl: u32;

// Reduction over the workgroup of each lane (op 0: max, 1: sum): within each subgroup (the
// device's fixed order), then the subgroup results in subgroup order; every invocation
// gets the result. A row's workgroup holds only that row, so the order never depends on
// the batch.
fn reduce(sg: u32, lane: u32, nsg: u32, v: Lane, op: u32) -> Lane {
    var s = Lane(0.0);
    if (op == 0u) {
        s = subgroupMax(v);
    } else {
        s = subgroupAdd(v);
    }
    workgroupBarrier(); // red free (previous use read by everyone)
    if (lane == 0u) {
        red[sg] = s;
    }
    workgroupBarrier();
    var r = red[0];
    for (var i = 1u; i < nsg; i++) {
        if (op == 0u) {
            r = max(r, red[i]);
        } else {
            r = r + red[i];
        }
    }
    return r;
}

// Dim d's outputs summed over the nl key lanes' partials in `part`, in lane order.
fn dim_sum(d: u32, nl: u32, hd: u32) -> Lane {
    var sum = Lane(0.0);
    for (var k = 0u; k < nl; k++) {
        sum += part[k * hd + d];
    }
    return sum;
}

// Keys [x, y) of the row's context of `len` positions that split z takes, and the splits
// that hold keys (z): with `splits` > 1, ceil(len / `chunk`) splits (at most `splits`) of
// equal length rounded up to whole key tiles (or to `chunk` where that is shorter), so
// no split adds a partial tile and a row's splits depend on its own context only (batch
// invariance); else one split of every key.
fn split_range(len: u32, z: u32) -> vec3<u32> {
    if (pc.splits <= 1u) {
        return vec3<u32>(0u, len, 1u);
    }
    let chunk = max(pc.chunk, 1u);
    let want = clamp((len + chunk - 1u) / chunk, 1u, pc.splits);
    let align = min(WG, chunk);
    let c = ((len + want - 1u) / want + align - 1u) / align * align;
    let k0 = min(z * c, len);
    return vec3<u32>(k0, min(k0 + c, len), (len + c - 1u) / c);
}

// Row r's keys [x, y) of its split z (of z' splits: (x, y, z', slot); z >= z' holds none)
// and its sequence slot: positions [0, p] of the row's position p whose blocks exist in
// the table.
fn row_split(r: u32, z: u32) -> vec4<u32> {
    let pos = rows.d[2u * r];
    let seq = rows.d[2u * r + 1u];
    let len = min(pos + 1u, pc.max_blocks * pc.block);
    return vec4<u32>(split_range(len, z), seq);
}

// The cache row of position j of sequence slot `seq` (through the block table, clamped to
// the pool).
fn cache_row(seq: u32, j: u32) -> u32 {
    return min(table.d[seq * pc.max_blocks + j / pc.block] * pc.block + j % pc.block,
               pc.capacity - 1u);
}

// After the tile loop of split z (of `used`) of cell `cell`, its nl key lanes' partial
// outputs in `part` (a barrier behind them), running max m and sum l: whether this
// workgroup writes the output, from out_nl lanes of `part` times out_inv. One split:
// itself (1 / l, nl). More: split_merge's last workgroup (the merged dims in
// part[0 .. hd), one lane, 1 / the merged sum); the others return false. Every invocation
// calls it.
fn settle_splits(li: u32, cell: u32, z: u32, used: u32, nl: u32, hd: u32, m: Lane, l: Lane) -> bool {
    out_inv = 1.0 / l;
    out_nl = nl;
    if (used <= 1u) {
        return true;
    }
    out_nl = 1u;
    return split_merge(li, cell, z, used, nl, hd, m, l);
}

// Split z's running max m, sum l and dims summed over the nl lanes of `part` go to the
// partials, then a ticket. The workgroup drawing the last one merges the `used` partials
// in split order (as include/attention_finish.wgsl), leaves the merged dims in
// part[0 .. hd) and 1 / their sum in `out_inv`, puts the ticket back, and returns true.
fn split_merge(li: u32, cell: u32, z: u32, used: u32, nl: u32, hd: u32, m: Lane, l: Lane) -> bool {
    let stride = hd + 2u;
    let base = (cell * pc.splits + z) * stride;
    if (li == 0u) {
        apart[base] = m;
        apart[base + 1u] = l;
    }
    for (var d = li; d < hd; d += WG) {
        apart[base + 2u + d] = dim_sum(d, nl, hd);
    }
    // Release: the partial reaches device scope before the ticket.
    storageBarrier();
    if (li == 0u) {
        aticket = atomicAdd(&atick[cell], 1u);
    }
    if (workgroupUniformLoad(&aticket) + 1u != used) {
        return false;
    }
    // Acquire: the other splits' partials (written before their tickets).
    storageBarrier();
    let first = cell * pc.splits * stride;
    var mx = Lane(NEG);
    for (var s = 0u; s < used; s++) {
        mx = max(mx, apart[first + s * stride]);
    }
    var ls = Lane(0.0);
    for (var s = 0u; s < used; s++) {
        let b = first + s * stride;
        ls += apart[b + 1u] * exp(apart[b] - mx);
    }
    out_inv = 1.0 / ls;
    for (var d = li; d < hd; d += WG) {
        var o = Lane(0.0);
        for (var s = 0u; s < used; s++) {
            let b = first + s * stride;
            o += apart[b + 2u + d] * exp(apart[b] - mx);
        }
        part[d] = o;
    }
    workgroupBarrier();
    if (li == 0u) {
        atomicStore(&atick[cell], 0u);
    }
    return true;
}

// After `settle_splits` returned true: row r's outputs of heads h0 .. h0 + nh - 1 (dims
// summed over the out_nl lanes of `part`, times out_inv) in the form the push constants
// ask for: int8 blocks (`q8`, staged in `qs`, whose last readers, the key scores, are
// behind settle_splits' barrier), f16 pairs (`out_f16`) or f32. Every invocation calls it.
fn put_outputs(li: u32, r: u32, h0: u32, nh: u32, hd: u32) {
    let inv = out_inv;
    let nlo = out_nl;
    let ob = r * pc.o_stride + h0 * hd;
    if (pc.q8 != 0u) {
        for (var d = li; d < hd; d += WG) {
            qs[d] = dim_sum(d, nlo, hd) * inv;
        }
        put_q8_heads(li, r, h0, nh, hd);
    } else if (pc.out_f16 != 0u) {
        for (var p = li; p < hd / 2u; p += WG) {
            let d = 2u * p;
            let v0 = dim_sum(d, nlo, hd) * inv;
            let v1 = dim_sum(d + 1u, nlo, hd) * inv;
            for (var i = 0u; i < nh; i++) {
                put_out2(ob + i * hd + d, vec2<f32>(lane_value(v0, i), lane_value(v1, i)));
            }
        }
    } else {
        for (var d = li; d < hd; d += WG) {
            let v = dim_sum(d, nlo, hd) * inv;
            for (var i = 0u; i < nh; i++) {
                put_out(ob + i * hd + d, lane_value(v, i));
            }
        }
    }
}

// Head i's staged output of dim d (in `qs`) for the q8 output.
fn q8_value(i: u32, d: u32) -> f32 {
    return lane_value(qs[d], i);
}

// Row r's outputs of heads h0 .. h0 + nh - 1 to oq / od (`q8` = 1): one invocation per
// block of 32 (all invocations call it), from head i's dim d staged where `q8_value(i, d)`
// reads it (in `qs`, free once the keys are scored, so the kernels take no more shared
// memory than without the q8 output).
fn put_q8_heads(li: u32, r: u32, h0: u32, nh: u32, hd: u32) {
    workgroupBarrier();
    for (var b = li; b < nh * hd / 32u; b += WG) {
        var vs: array<vec4<f32>, 8>;
        for (var k = 0u; k < 8u; k++) {
            let e = 32u * b + 4u * k;
            let i = e / hd;
            let d = e % hd;
            vs[k] = vec4<f32>(
                q8_value(i, d),
                q8_value(i, d + 1u),
                q8_value(i, d + 2u),
                q8_value(i, d + 3u),
            );
        }
        var qw: array<u32, 8>;
        let dv = quantize_x32(&vs, &qw);
        let gb = h0 * hd / 32u + b;
        for (var k = 0u; k < 8u; k++) {
            oq.d[r * pc.q8_words + 8u * gb + k] = qw[k];
        }
        od.d[r * pc.q8_blocks + gb] = vec4<f32>(dv, 0.0);
    }
}

// Output element i as f32.
fn put_out(i: u32, v: f32) {
    out.d[i] = bitcast<u32>(v);
}

// Output elements i, i + 1 (i even) as one word of two halves.
fn put_out2(i: u32, v: vec2<f32>) {
    out.d[i / 2u] = pack2x16float(v);
}

// Key pairs at .. at + 15 (f16 pairs as f32; `at` a multiple of 4), all loaded before
// any is used, so the four 16-byte loads are in flight together (a loop that uses each
// load first waits for every one).
fn key_pairs16(at: u32) -> array<vec2<f32>, 16> {
    var kk: array<vec2<f32>, 16>;
    for (var i = 0u; i < 4u; i++) {
        let v = kcache4.d[at / 4u + i];
        kk[4u * i] = unpack2x16float(v.x);
        kk[4u * i + 1u] = unpack2x16float(v.y);
        kk[4u * i + 2u] = unpack2x16float(v.z);
        kk[4u * i + 3u] = unpack2x16float(v.w);
    }
    return kk;
}

// acc plus the query times key pairs p .. p + 15 (kk), added 4 pairs at a time.
fn key_sum16(acc: Lane, kk: array<vec2<f32>, 16>, p: u32) -> Lane {
    var a = acc;
    for (var i = 0u; i < 16u; i += 4u) {
        let e = 2u * (p + i);
        a += qs[e] * kk[i].x + qs[e + 1u] * kk[i].y
           + qs[e + 2u] * kk[i + 1u].x + qs[e + 3u] * kk[i + 1u].y
           + qs[e + 4u] * kk[i + 2u].x + qs[e + 5u] * kk[i + 2u].y
           + qs[e + 6u] * kk[i + 3u].x + qs[e + 7u] * kk[i + 3u].y;
    }
    return a;
}

// The score of the key whose words start at `at`: the query times its pairs, added 4 at a
// time in pair order (one order whatever the batch). With head_dim a multiple of 8 the
// pairs are read as 16-byte words, 32 (then 16) pairs in flight together.
fn key_score(at: u32, pairs: u32) -> Lane {
    var acc = Lane(0.0);
    var p = 0u;
    for (; pairs % 4u == 0u && p + 32u <= pairs; p += 32u) {
        let ka = key_pairs16(at + p);
        let kz = key_pairs16(at + p + 16u);
        acc = key_sum16(key_sum16(acc, ka, p), kz, p + 16u);
    }
    for (; pairs % 4u == 0u && p + 16u <= pairs; p += 16u) {
        acc = key_sum16(acc, key_pairs16(at + p), p);
    }
    for (; p + 4u <= pairs; p += 4u) {
        let k0 = unpack2x16float(kcache.d[at + p]);
        let k1 = unpack2x16float(kcache.d[at + p + 1u]);
        let k2 = unpack2x16float(kcache.d[at + p + 2u]);
        let k3 = unpack2x16float(kcache.d[at + p + 3u]);
        acc += qs[2u * p] * k0.x + qs[2u * p + 1u] * k0.y
             + qs[2u * p + 2u] * k1.x + qs[2u * p + 3u] * k1.y
             + qs[2u * p + 4u] * k2.x + qs[2u * p + 5u] * k2.y
             + qs[2u * p + 6u] * k3.x + qs[2u * p + 7u] * k3.y;
    }
    for (; p < pairs; p++) {
        let kv = unpack2x16float(kcache.d[at + p]);
        acc += qs[2u * p] * kv.x + qs[2u * p + 1u] * kv.y;
    }
    return acc;
}

// Value pairs 4g .. 4g + 3 of the tile's keys jj + u nl (u = 0..3; pairs a multiple of 4),
// loaded together: [4u + k] = key u's pair 4g + k.
fn value_pairs4x4(jj: u32, nl: u32, kv0: u32, pairs: u32, g: u32) -> array<vec2<f32>, 16> {
    var vv: array<vec2<f32>, 16>;
    for (var u = 0u; u < 4u; u++) {
        let v = vcache4.d[((kv0 + slots[jj + u * nl]) * pairs + 4u * g) / 4u];
        vv[4u * u] = unpack2x16float(v.x);
        vv[4u * u + 1u] = unpack2x16float(v.y);
        vv[4u * u + 2u] = unpack2x16float(v.z);
        vv[4u * u + 3u] = unpack2x16float(v.w);
    }
    return vv;
}

// o plus the weighted values vv of keys jj + u nl (u = 0..3), key by key.
fn add_values4(o: array<Lane, 8>, vv: array<vec2<f32>, 16>, jj: u32, nl: u32) -> array<Lane, 8> {
    var r = o;
    for (var u = 0u; u < 4u; u++) {
        let pv = ps[jj + u * nl];
        for (var k = 0u; k < 4u; k++) {
            r[2u * k] += pv * vv[4u * u + k].x;
            r[2u * k + 1u] += pv * vv[4u * u + k].y;
        }
    }
    return r;
}

// o (dims 8g .. 8g + 7) plus the tile's keys kl, kl + nl, ... below nk, each weighted by
// its ps, added key by key (one order whatever the batch). With head_dim a multiple of 8
// the values are read as 16-byte words, eight (then four) keys' in flight together.
fn add_values(o: array<Lane, 8>, kl: u32, nl: u32, nk: u32, kv0: u32, pairs: u32, g: u32) -> array<Lane, 8> {
    var r = o;
    var jj = kl;
    let vec_ok = pairs % 4u == 0u;
    for (; vec_ok && jj + 7u * nl < nk; jj += 8u * nl) {
        let va = value_pairs4x4(jj, nl, kv0, pairs, g);
        let vz = value_pairs4x4(jj + 4u * nl, nl, kv0, pairs, g);
        r = add_values4(add_values4(r, va, jj, nl), vz, jj + 4u * nl, nl);
    }
    for (; vec_ok && jj + 3u * nl < nk; jj += 4u * nl) {
        r = add_values4(r, value_pairs4x4(jj, nl, kv0, pairs, g), jj, nl);
    }
    for (; jj < nk; jj += nl) {
        let at = (kv0 + slots[jj]) * pairs + 4u * g;
        let pv = ps[jj];
        for (var k = 0u; k < 4u; k++) {
            if (4u * g + k < pairs) {
                let v = unpack2x16float(vcache.d[at + k]);
                r[2u * k] += pv * v.x;
                r[2u * k + 1u] += pv * v.y;
            }
        }
    }
    return r;
}
