//! include: occupancy_probe
// include/occupancy_probe.wgsl with 24576 bytes of shared memory.
const PAD: u32 = 6144u;
