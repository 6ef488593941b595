//! include: occupancy_probe
// include/occupancy_probe.wgsl with 32768 bytes of shared memory.
const PAD: u32 = 8192u;
