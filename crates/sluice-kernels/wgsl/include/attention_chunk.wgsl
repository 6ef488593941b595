// Positions per attention split for a context of `seq` positions (the host mirror is
// `sluice_kernels::attention_chunk_for`): from ATTN_MIN_CHUNK (or push field `chunk` if
// smaller), doubled while the context needs more than ATTN_SPLIT_TARGET splits (or more
// than the dispatch's `splits`, which cover the capacity at `chunk` per split), at most
// `chunk`. About eight (split, head) workgroups per head: one workgroup holding 256 keys
// measured 10-17% slower decode at 128-512 positions on the H100, and many more splits
// (128 per head at 4096 positions) make the grid and the combine the cost. Every
// workgroup of a step computes the same chunk from the same seq.
const ATTN_MIN_CHUNK: u32 = 32u;
const ATTN_SPLIT_TARGET: u32 = 8u;

fn attn_chunk(seq: u32) -> u32 {
    let want = max(min(ATTN_SPLIT_TARGET, pc.splits), 1u);
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
