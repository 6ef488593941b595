//! include: occupancy_probe
// include/occupancy_probe.wgsl with 49152 bytes of shared memory.
const PAD: u32 = 12288u;
