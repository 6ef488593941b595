//! The generated descriptors match their shaders (no Vulkan needed).

use sluice::BindingAccess;

#[test]
fn descriptors_are_reflected_from_wgsl() {
    let k = &sluice_kernels::AFFINE_U32;
    assert_eq!(k.bindings, &[BindingAccess::Read, BindingAccess::ReadWrite]);
    assert_eq!(k.push_constant_bytes, 12);
    assert_eq!(k.workgroup_size, [64, 1, 1]);
    assert_eq!(k.workgroup_memory_bytes, 0);
    // matvec_batch_cmr: a staged chunk of (64 tokens + 64 rows) x 40 halves, a 16-byte
    // ticket and 4 parked 16 x 16 f32 tiles.
    let cmr = sluice_kernels::matvec_batch_cmr(sluice_kernels::WeightDtype::F16, false).unwrap();
    assert_eq!(cmr.workgroup_memory_bytes, 128 * 40 * 2 + 16 + 4 * 256 * 4);
    for k in sluice_kernels::ALL {
        assert_eq!(k.spirv.len() % 4, 0, "{}", k.name);
        let magic = u32::from_le_bytes(k.spirv[0..4].try_into().unwrap());
        assert_eq!(magic, 0x0723_0203, "{} is not SPIR-V", k.name);
        let version = u32::from_le_bytes(k.spirv[4..8].try_into().unwrap());
        assert_eq!(version, 0x0001_0300, "{} must be SPIR-V 1.3", k.name);
        // 48 KB: what the GPUs measured on allow a compute workgroup (the H100's
        // maxComputeSharedMemorySize); a kernel over it would be refused there.
        assert!(
            k.workgroup_memory_bytes <= 49152,
            "{}: {} bytes",
            k.name,
            k.workgroup_memory_bytes
        );
    }
}
