//! Kernels: typed descriptors of SPIR-V compute shaders, and their cached pipelines.
//!
//! A [`KernelDesc`] says what a shader binds (storage buffers 0..n in set 0, each read or
//! read-write), how many push-constant bytes it takes and its workgroup size.
//! `sluice-kernels` generates these from the WGSL source at build time. Descriptors are
//! bound with `VK_KHR_push_descriptor`, so recorded command buffers carry their bindings
//! and no descriptor pool exists.

use std::sync::Arc;

use ash::vk;

use crate::error::{Result, VkResultExt};

/// How a kernel uses one storage-buffer binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum BindingAccess {
    /// `var<storage, read>`.
    Read,
    /// `var<storage, read_write>`: counted as a write by the hazard tracker.
    ReadWrite,
}

/// A compute kernel: SPIR-V plus what it binds.
#[derive(Clone, Copy, Debug)]
pub struct KernelDesc {
    /// Kernel name, unique per crate.
    pub name: &'static str,
    /// SPIR-V module bytes (little-endian words).
    pub spirv: &'static [u8],
    /// Entry point.
    pub entry: &'static str,
    /// Access of bindings 0..n of set 0.
    pub bindings: &'static [BindingAccess],
    /// Size of the push-constant block.
    pub push_constant_bytes: u32,
    /// Workgroup size from the shader.
    pub workgroup_size: [u32; 3],
    /// Bytes of workgroup (shared) memory the shader declares, each variable rounded up
    /// to 16 bytes.
    pub workgroup_memory_bytes: u32,
}

/// Plain data that may be copied byte for byte into push constants and buffers:
/// `bytemuck::Pod`, derived (`#[derive(bytemuck::Pod, bytemuck::Zeroable)]` on a
/// `#[repr(C)]` struct without padding), so no hand-written `unsafe impl` is needed.
pub use bytemuck::Pod;

/// The bytes of a [`Pod`] value.
pub fn pod_bytes<P: Pod>(value: &P) -> &[u8] {
    bytemuck::bytes_of(value)
}

/// A created compute pipeline for one [`KernelDesc`]. Made once per device and cached.
pub struct Pipeline {
    pub(crate) desc: KernelDesc,
    pub(crate) pipeline: vk::Pipeline,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    pub(crate) device_id: u64,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("kernel", &self.desc.name)
            .finish()
    }
}

impl Pipeline {
    /// The descriptor this pipeline was made from.
    pub fn desc(&self) -> &KernelDesc {
        &self.desc
    }

    pub(crate) fn create(
        device: &ash::Device,
        cache: vk::PipelineCache,
        desc: &KernelDesc,
        device_id: u64,
    ) -> Result<Arc<Pipeline>> {
        if !desc.spirv.len().is_multiple_of(4) || desc.spirv.is_empty() {
            return Err(crate::Error::InvalidUse(format!(
                "kernel {:?}: SPIR-V length {} is not a positive multiple of 4",
                desc.name,
                desc.spirv.len()
            )));
        }
        let words: Vec<u32> = desc
            .spirv
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let bindings: Vec<vk::DescriptorSetLayoutBinding> = (0..desc.bindings.len() as u32)
            .map(|i| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let entry = std::ffi::CString::new(desc.entry).map_err(|_| {
            crate::Error::InvalidUse(format!("kernel {:?}: entry name has a NUL", desc.name))
        })?;
        // SAFETY: valid device; every create-info below lives until its call returns; on
        // error the objects made so far are destroyed before returning.
        unsafe {
            let set_layout = device
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default()
                        .flags(vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR)
                        .bindings(&bindings),
                    None,
                )
                .vk("vkCreateDescriptorSetLayout")?;
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .offset(0)
                .size(desc.push_constant_bytes)];
            let set_layouts = [set_layout];
            let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
            if desc.push_constant_bytes > 0 {
                layout_info = layout_info.push_constant_ranges(&ranges);
            }
            let layout = match device.create_pipeline_layout(&layout_info, None) {
                Ok(l) => l,
                Err(e) => {
                    device.destroy_descriptor_set_layout(set_layout, None);
                    return Err(crate::Error::vk("vkCreatePipelineLayout", e));
                }
            };
            let module = match device
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
            {
                Ok(m) => m,
                Err(e) => {
                    device.destroy_pipeline_layout(layout, None);
                    device.destroy_descriptor_set_layout(set_layout, None);
                    return Err(crate::Error::vk("vkCreateShaderModule", e));
                }
            };
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(&entry);
            let info = vk::ComputePipelineCreateInfo::default()
                .stage(stage)
                .layout(layout);
            let result = device.create_compute_pipelines(cache, &[info], None);
            device.destroy_shader_module(module, None);
            let pipeline = match result {
                Ok(p) => p[0],
                Err((_, e)) => {
                    device.destroy_pipeline_layout(layout, None);
                    device.destroy_descriptor_set_layout(set_layout, None);
                    return Err(crate::Error::vk("vkCreateComputePipelines", e));
                }
            };
            Ok(Arc::new(Pipeline {
                desc: *desc,
                pipeline,
                layout,
                set_layout,
                device_id,
            }))
        }
    }

    /// Destroys the Vulkan objects. Called once by the device when it is dropped.
    pub(crate) fn destroy(&self, device: &ash::Device) {
        // SAFETY: the device is idle when pipelines are destroyed (device drop).
        unsafe {
            device.destroy_pipeline(self.pipeline, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}
