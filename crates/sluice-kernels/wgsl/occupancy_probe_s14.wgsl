//! include: occupancy_probe
// include/occupancy_probe.wgsl with 14352 bytes of shared memory.
const PAD: u32 = 3588u;
