// Positions per attention split for a context of `seq` positions (the host mirror is
// `sluice_kernels::attention_chunk_for`): from ATTN_MIN_CHUNK (or push field `chunk` if
// smaller), doubled while the context needs more than the split target, at most `chunk`.
// The target is 128 / heads splits, 1..=8 and at most push field `splits`: enough (split, head) workgroups to cover a
// large GPU at short contexts, each with few positions (one workgroup holding 256 keys
// measured 10-17% slower decode at 128-512 positions on the H100), and no more splits
// than the dispatch has (which covers the capacity at `chunk` per split). Every
// workgroup of a step computes the same chunk from the same seq.
const ATTN_MIN_CHUNK: u32 = 32u;

fn attn_chunk(seq: u32) -> u32 {
    let want = max(min(clamp(128u / max(pc.heads, 1u), 1u, 8u), pc.splits), 1u);
    if (seq > pc.chunk * want) {
        return pc.chunk; // long contexts: the most per split (what the doubling ends at)
    }
    var c = min(ATTN_MIN_CHUNK, pc.chunk);
    loop {
        if (c >= pc.chunk || (seq + c - 1u) / c <= want) {
            break;
        }
        c *= 2u;
    }
    return min(c, pc.chunk);
}
