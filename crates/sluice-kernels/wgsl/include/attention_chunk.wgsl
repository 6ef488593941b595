// Positions per attention split for a context of `seq` positions (the host mirror is
// `sluice_kernels::attention_chunk_for`): from ATTN_MIN_CHUNK, or ATTN_MIN_CHUNK_MANY_HEADS
// above 16 query heads (or push field `chunk` if smaller), doubled while the context needs
// more than ATTN_SPLIT_TARGET splits (or more than the dispatch's `splits`, which cover the
// capacity at `chunk` per split), at most `chunk`. About eight (split, head) workgroups per head: one workgroup holding 256 keys
// measured 10-17% slower decode at 128-512 positions on the H100, and many more splits
// (128 per head at 4096 positions) make the grid and the combine the cost. Every
// workgroup of a step computes the same chunk from the same seq.
const ATTN_MIN_CHUNK: u32 = 32u;
// One split up to 128 positions for models of more than 16 query heads: the H100 measured
// Qwen3-4B Q4_K_M 2.8% slower at tg128 with up to four splits there (its f16 twin unchanged).
const ATTN_MIN_CHUNK_MANY_HEADS: u32 = 128u;
const ATTN_SPLIT_TARGET: u32 = 8u;

fn attn_chunk(seq: u32) -> u32 {
    let want = max(min(ATTN_SPLIT_TARGET, pc.splits), 1u);
    if (seq > pc.chunk * want) {
        return pc.chunk; // long contexts: the most per split (what the doubling ends at)
    }
    var c = min(select(ATTN_MIN_CHUNK, ATTN_MIN_CHUNK_MANY_HEADS, pc.heads > 16u), pc.chunk);
    loop {
        if (c >= pc.chunk || (seq + c - 1u) / c <= want) {
            break;
        }
        c *= 2u;
    }
    return min(c, pc.chunk);
}
