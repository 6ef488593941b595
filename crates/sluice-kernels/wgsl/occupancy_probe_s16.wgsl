//! include: occupancy_probe
// include/occupancy_probe.wgsl with 16384 bytes of shared memory.
const PAD: u32 = 4096u;
