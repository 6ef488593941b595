//! include: matvec_batch_stage_put
//! include: matvec_batch_split_out
// The row-owning staged cooperative-matrix batched matvec (matvec_batch_cmr[_silu]_<dtype>,
// f16 and every block format): the same product, bindings, push constants, K split and
// tickets as matvec_batch_cmt (include/matvec_batch_cmt_body.wgsl), with the work of a
// workgroup cut the other way. The kernel file declares the bindings, NTT, SILU and SG
// (subgroups), and includes the staged kernels' 8-weight reader
// (include/matvec_batch_cmt_f16.wgsl, swapped for _cmt_q.wgsl by the block formats: `WRaw`,
// `fetch_w`, `put_w`) and the weight groups (include/matvec_batch_cmr_runs.wgsl, swapped for
// _h16.wgsl by the K-quants): KC (columns per K chunk), WR (runs of 8
// weights per group), `fetch_wg(sel, r, ch, g)` (group g of chunk ch of row r: WR runs),
// `put_wg(o, raw, ch, g)` (those runs to stage[o ..] as f16), `run_col(ch, p)` (the
// column of stage run p of chunk ch) and `put_x(o, v)` (an activation run to stage[o ..]
// in the weights' order within the run).
//
// A workgroup takes BR = 16 SG weight rows (gated: BR / 2 rows of the gate and the same
// rows of the up matrix), a token group of up to TT = 16 NTT tokens and one of `ksplit`
// runs of K chunks. Per chunk every invocation stages WU weight groups and XU activation
// runs (8 halves each) in shared memory, loaded one chunk ahead; subgroup s multiplies
// its own 16 staged weight rows by every token tile over the chunk's KC / 16 K steps, so
// no partials are summed across subgroups, and the activations are staged once per BR
// rows (matvec_batch_cmt: once per 32). With SG = 4 a workgroup is small (128
// invocations, 10-23 KB of shared memory), which lets more of them share a
// multiprocessor: on the H100 this runs matrices of 2^23+ weights 1.1-1.9x faster than
// matvec_batch_cmt and smaller ones slower (BENCHMARKS.md, tenth session), so
// `matvec_batch_cmt_layout` picks between the two by size (f16: from 12 Mi weights,
// eleventh session; block formats from 2 Mi, twenty-eighth session). The K-quants fetch
// and decode 16 weights at a time (Q4_K and Q5_K since the twentieth session, Q6_K the
// twenty-first; straight to f16 pairs: Q4_K the twenty-first, Q5_K and Q6_K the
// twenty-second), f16 and the other block formats 8;
// chunks are 32 columns in every format. A K-quant group fetched for the next chunk of
// the same block keeps the block's constant fields (scales, Q5_K's fifth bits, Q6_K's d)
// from the chunk before (`fetch_wg_next`; twenty-third session, 4B Q4_K_M engine +1.5-2%).
//
// Split K: each workgroup stores its tiles' partial sums straight from the matrix units
// and takes a ticket; the last of a cell's splits adds the partials in split order, up to
// four splits' loads in flight before their adds (twenty-eighth session: one load waited
// on per split and element, and the tiles parked through cs with two barriers each, had
// taken up to half of a split dispatch; H100, Q4_K at 32 tokens, qwen3-4b's o 33.1 ->
// 22.4 µs, down 54.2 -> 44.9, qwen3-0.6b's o 24.7 -> 11.6).
//
// Batch invariance: as matvec_batch_cmt (ksplit from the shape alone; each (row, token)
// sum runs over the K steps in one order whatever the other tokens). Needs rows multiples
// of 16, f16 cols and strides multiples of 8 halves (block formats: whole blocks).
// Dispatch [row groups (x, then z past 65535), token groups x ksplit, ...].
const NI: u32 = SG * 32u; // invocations
const TT: u32 = 16u * NTT; // tokens per workgroup
const BR: u32 = 16u * SG; // staged weight rows
const LS: u32 = KC + 8u; // halves per staged row (8 of padding against bank conflicts)
const GPR: u32 = KC / (8u * WR); // weight groups per staged row
const RPW: u32 = NI / GPR; // staged weight rows per pass of the workgroup
const WU: u32 = BR / RPW; // weight groups per invocation per chunk
const VPR: u32 = KC / 8u; // activation runs (8 halves) per staged row
const RPP: u32 = NI / VPR; // staged activation rows per pass
const XU: u32 = (TT + RPP - 1u) / RPP; // activation runs per invocation per chunk
const KS: u32 = KC / 16u; // K steps per chunk
const PART: u32 = BR * TT; // floats of one workgroup's partial sums
const SB: u32 = TT * LS;
// Four halves per element (stored 8 bytes at a time); the matrix loads count offsets and
// strides in elements.
var<workgroup> stage: array<vec4<f16>, (TT + BR) * LS / 4u>;
var<workgroup> cs: array<f32, SG * 256u>; // SG parked 16 x 16 tiles (the epilogue)

// Staged weight row j's matrix row (gated: the first BR / 2 are the gate's).
fn w_row(r0: u32, j: u32) -> u32 {
    if (SILU) {
        return r0 + j % (BR / 2u);
    }
    return r0 + j;
}

@compute @workgroup_size(SG * 32u)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32) {
    let rg = wg.x + wg.z * pc.row_groups_x;
    let tg = wg.y / pc.ksplit;
    let ks = wg.y % pc.ksplit;
    let r0 = rg * select(BR, BR / 2u, SILU);
    let t0 = tg * TT;
    let left = pc.tokens - min(t0, pc.tokens);
    let nt = min((left + 15u) / 16u, NTT);
    for (var e = li; e < SG * 256u; e += NI) {
        cs[e] = 0.0;
    }
    workgroupBarrier();
    var c0 = coopLoadT<coop_mat16x16<f32, C>>(&cs[0], 16u);
    var c1 = c0;
    var c2 = c0;
    var c3 = c0;
    // This invocation's activation row (within a pass) and run, and its weight row and
    // group.
    let pr = li / VPR;
    let cv = li % VPR;
    let pw = li / GPR;
    let gw = li % GPR;
    let chunks = (pc.cols + KC - 1u) / KC;
    let ch0 = min(ks * pc.kchunks, chunks);
    let ch1 = min(ch0 + pc.kchunks, chunks);
    // The chunk's registers, loaded here and again at the end of each chunk's staging
    // (kept in this function: passing them to a helper by pointer measured ~2x slower
    // together with a double-buffered stage, BENCHMARKS.md, tenth session).
    var a: array<vec4<u32>, XU>;
    var b: array<WRaw, WU>;
    var kx = run_col(ch0, cv);
    for (var i = 0u; i < XU; i++) {
        if (pr + i * RPP < nt * 16u) {
            a[i] = fetch_x(t0 + pr + i * RPP, kx);
        }
    }
    for (var i = 0u; i < WU; i++) {
        let j = pw + i * RPW;
        b[i] = fetch_wg(SILU && j >= BR / 2u, w_row(r0, j), ch0, gw);
    }
    let so = pr * LS + cv * 8u;
    let sw = SB + pw * LS + gw * 8u * WR;
    let wo = SB + sg * 16u * LS;
    for (var ch = ch0; ch < ch1; ch++) {
        for (var i = 0u; i < XU; i++) {
            if (pr + i * RPP < nt * 16u) {
                put_x(so + i * RPP * LS, a[i]);
            }
        }
        for (var i = 0u; i < WU; i++) {
            put_wg(sw + i * RPW * LS, b[i], ch, gw);
        }
        workgroupBarrier();
        if (ch + 1u < ch1) {
            kx = run_col(ch + 1u, cv);
            for (var i = 0u; i < XU; i++) {
                if (pr + i * RPP < nt * 16u) {
                    a[i] = fetch_x(t0 + pr + i * RPP, kx);
                }
            }
            for (var i = 0u; i < WU; i++) {
                let j = pw + i * RPW;
                b[i] = fetch_wg_next(SILU && j >= BR / 2u, w_row(r0, j), ch + 1u, gw, b[i]);
            }
        }
        for (var s = 0u; s < KS; s++) {
            let kk = s * 16u;
            let wt = coopLoad<coop_mat16x16<f16, B>>(&stage[(wo + kk) / 4u], LS / 4u);
            {
                let x = coopLoadT<coop_mat16x16<f16, A>>(&stage[kk / 4u], LS / 4u);
                c0 = coopMultiplyAdd(x, wt, c0);
            }
            if (nt > 1u) {
                let x = coopLoadT<coop_mat16x16<f16, A>>(&stage[(16u * LS + kk) / 4u], LS / 4u);
                c1 = coopMultiplyAdd(x, wt, c1);
            }
            if (nt > 2u) {
                let x = coopLoadT<coop_mat16x16<f16, A>>(&stage[(32u * LS + kk) / 4u], LS / 4u);
                c2 = coopMultiplyAdd(x, wt, c2);
            }
            if (nt > 3u) {
                let x = coopLoadT<coop_mat16x16<f16, A>>(&stage[(48u * LS + kk) / 4u], LS / 4u);
                c3 = coopMultiplyAdd(x, wt, c3);
            }
        }
        workgroupBarrier();
    }
    finish(li, sg, rg, tg, ks, r0, t0, nt, c0, c1, c2, c3);
}
