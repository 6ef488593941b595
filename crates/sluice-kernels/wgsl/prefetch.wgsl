// Pulls a weight buffer into the GPU's L2 cache ahead of the kernel that reads it: one
// 16-byte load per 32-byte sector, `sectors` sectors over the whole grid. `anchor` ties
// the dispatch to the step it should run beside (it reads that kernel's input, so a
// scheduler places it in the same concurrent group, not earlier); `sink` is written only
// when the loaded words' xor equals `magic`, so the loads are kept and nothing visible
// depends on them.
struct U4s { d: array<vec4<u32>> }
struct U32s { d: array<u32> }
struct Push { sectors: u32, threads: u32, magic: u32 }

@group(0) @binding(0) var<storage, read> w: U4s;
@group(0) @binding(1) var<storage, read> anchor: U32s;
@group(0) @binding(2) var<storage, read_write> sink: U32s;
var<immediate> pc: Push;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    var acc = anchor.d[0];
    for (var s = gid.x; s < pc.sectors; s += pc.threads) {
        acc ^= w.d[2u * s].x;
    }
    if (acc == pc.magic) {
        sink.d[gid.x % 64u] = acc;
    }
}
