//! The generated descriptors match their shaders (no Vulkan needed).

use sluice::BindingAccess;

#[test]
fn descriptors_are_reflected_from_wgsl() {
    let k = &sluice_kernels::AFFINE_U32;
    assert_eq!(k.bindings, &[BindingAccess::Read, BindingAccess::ReadWrite]);
    assert_eq!(k.push_constant_bytes, 12);
    assert_eq!(k.workgroup_size, [64, 1, 1]);
    for k in sluice_kernels::ALL {
        assert_eq!(k.spirv.len() % 4, 0, "{}", k.name);
        let magic = u32::from_le_bytes(k.spirv[0..4].try_into().unwrap());
        assert_eq!(magic, 0x0723_0203, "{} is not SPIR-V", k.name);
        let version = u32::from_le_bytes(k.spirv[4..8].try_into().unwrap());
        assert_eq!(version, 0x0001_0300, "{} must be SPIR-V 1.3", k.name);
    }
}
