enable wgpu_cooperative_matrix;
// Int8 matrix units (docs/decisions/0008-int8-matrix-units.md): C = A . B with A an M x K
// and B a K x N matrix of int8, C of int32, on 16 x 16 x 32 s8 cooperative matrices. The
// 8x8 types below are rewritten by build.rs (`int8_matrix_fixup`): coop_mat8x8<f32, A> is
// a 16 x 32 s8 matrix, <f32, B> 32 x 16 s8, <f32, C> 16 x 16 s32. The int8 bytes sit in
// `array<f32>` buffers (four per float, moved, never computed on), so strides and
// offsets count floats.
//
// One subgroup per 16 x 16 tile of C (workgroup (x, y): rows 16 x, columns 16 y). `mode`
// 0: the K loop over memory, C = A . B. `mode` 1 (speed): the first 32 columns of K only,
// loaded once and multiplied `reps` times into four accumulators in turn (four
// independent chains), C = 4 reps A[:, 0..32] . B[0..32, :]. Modes 2-4 (speed, as 1, C
// then meaningless): before each product A and B are loaded again from a shared-memory
// copy of the first 32 columns (one of three offsets): 2 from 16-byte elements, 3 from
// 4-byte ones, 4 as 2 and each product also stored to shared memory. Needs M, N multiples
// of 16 and K of 32. Dispatch [M / 16, N / 16, 1].
struct Push { m: u32, n: u32, k: u32, mode: u32, reps: u32 }

// A row-major (K / 4 floats per row), B given as its transpose (N rows of K bytes), C as
// s32 bits in f32 words, row-major.
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> bt: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
var<immediate> pc: Push;

var<workgroup> zeros: array<f32, 256>;
// Modes 2-4: three copies of A's and B's first 32 columns (16 rows of 32 bytes, 80-byte
// pitch), as 16-byte and as 4-byte elements; a product's store.
var<workgroup> s16: array<vec4<f32>, 240>;
var<workgroup> s4: array<f32, 960>;
var<workgroup> sp: array<f32, 256>;

@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    for (var e = li; e < 256u; e += 32u) {
        zeros[e] = 0.0;
    }
    workgroupBarrier();
    // Accumulators start as zeros loaded from memory (not naga's null constructor).
    var c0 = coopLoadT<coop_mat8x8<f32, C>>(&zeros[0], 16u);
    var c1 = coopLoadT<coop_mat8x8<f32, C>>(&zeros[0], 16u);
    var c2 = coopLoadT<coop_mat8x8<f32, C>>(&zeros[0], 16u);
    var c3 = coopLoadT<coop_mat8x8<f32, C>>(&zeros[0], 16u);
    let r0 = wg.x * 16u;
    let n0 = wg.y * 16u;
    let hs = pc.k / 4u;
    if (pc.mode == 0u) {
        for (var k0 = 0u; k0 < pc.k; k0 += 32u) {
            let ma = coopLoadT<coop_mat8x8<f32, A>>(&a[r0 * hs + k0 / 4u], hs);
            let mb = coopLoad<coop_mat8x8<f32, B>>(&bt[n0 * hs + k0 / 4u], hs);
            c0 = coopMultiplyAdd(ma, mb, c0);
        }
    } else if (pc.mode >= 2u) {
        // Copies: A's rows at 16-byte elements 80 c + 5 i, B's at 80 c + 40 + 5 i (the
        // 4-byte view: four times those); arbitrary bytes (speed only).
        for (var e = li; e < 240u; e += 32u) {
            let v = vec4<u32>(e * 2654435761u, e * 40503u, e + 12345u, e ^ 0x5a5a5a5au);
            s16[e] = bitcast<vec4<f32>>(v);
            for (var q = 0u; q < 4u; q++) {
                s4[4u * e + q] = bitcast<f32>(v[q]);
            }
        }
        workgroupBarrier();
        for (var i = 0u; i < pc.reps; i++) {
            let c = (i * 7u) % 3u;
            if (pc.mode == 3u) {
                let ma = coopLoadT<coop_mat8x8<f32, A>>(&s4[320u * c], 20u);
                let mb = coopLoad<coop_mat8x8<f32, B>>(&s4[320u * c + 160u], 20u);
                c0 = coopMultiplyAdd(ma, mb, c0);
                c1 = coopMultiplyAdd(ma, mb, c1);
                c2 = coopMultiplyAdd(ma, mb, c2);
                c3 = coopMultiplyAdd(ma, mb, c3);
            } else {
                let ma = coopLoadT<coop_mat8x8<f32, A>>(&s16[80u * c], 5u);
                let mb = coopLoad<coop_mat8x8<f32, B>>(&s16[80u * c + 40u], 5u);
                c0 = coopMultiplyAdd(ma, mb, c0);
                c1 = coopMultiplyAdd(ma, mb, c1);
                c2 = coopMultiplyAdd(ma, mb, c2);
                c3 = coopMultiplyAdd(ma, mb, c3);
                if (pc.mode == 4u) {
                    let v = c3;
                    let p = &sp[0];
                    coopStoreT(v, p, 16u);
                }
            }
        }
        let s01 = c0 + c1;
        let s23 = c2 + c3;
        let s = s01 + s23;
        c0 = s;
    } else {
        let ma = coopLoadT<coop_mat8x8<f32, A>>(&a[r0 * hs], hs);
        let mb = coopLoad<coop_mat8x8<f32, B>>(&bt[n0 * hs], hs);
        for (var i = 0u; i < pc.reps; i++) {
            c0 = coopMultiplyAdd(ma, mb, c0);
            c1 = coopMultiplyAdd(ma, mb, c1);
            c2 = coopMultiplyAdd(ma, mb, c2);
            c3 = coopMultiplyAdd(ma, mb, c3);
        }
        // s32 sums (build.rs turns the matrices' FAdd into IAdd).
        let s01 = c0 + c1;
        let s23 = c2 + c3;
        let s = s01 + s23;
        c0 = s;
    }
    // naga 30: the stored value, pointer and stride bound to `let`s first (its SPIR-V
    // writer panics on inline expressions there).
    let r = c0;
    let stride = pc.n;
    let p = &c[r0 * pc.n + n0];
    coopStoreT(r, p, stride);
}
