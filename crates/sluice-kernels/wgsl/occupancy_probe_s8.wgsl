//! include: occupancy_probe
// include/occupancy_probe.wgsl with 8192 bytes of shared memory.
const PAD: u32 = 2048u;
