// Placeholder of the staged batched matvec's f16 weight decoder: the K-quant dtype
// snippets swap it for include/h16_<format>.wgsl (`q_decode16h`); the other formats
// have none.
