//! include: decode_probe_io
//! include: cmdq_reader_probe_body
//! include: matvec_batch_cmdq_q6_k
enable f16;
// Test probe (no model path) of include/matvec_batch_cmdq_q6_k.wgsl: see
// include/cmdq_reader_probe_body.wgsl.
