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

    /// Makes the pipeline; `capture_statistics` asks the driver to keep its compile
    /// statistics (VK_KHR_pipeline_executable_properties must be enabled).
    pub(crate) fn create(
        device: &ash::Device,
        cache: vk::PipelineCache,
        desc: &KernelDesc,
        device_id: u64,
        capture_statistics: bool,
    ) -> Result<Arc<Pipeline>> {
        let words = spirv_words(desc)?;
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
            let mut info = vk::ComputePipelineCreateInfo::default()
                .stage(stage)
                .layout(layout);
            if capture_statistics {
                info = info.flags(vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR);
            }
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

    /// The raw pipeline handle (for the device's statistics query).
    pub(crate) fn raw(&self) -> vk::Pipeline {
        self.pipeline
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

/// The SPIR-V of `desc` as words, or an error when its length is not a positive
/// multiple of 4.
fn spirv_words(desc: &KernelDesc) -> Result<Vec<u32>> {
    if !desc.spirv.len().is_multiple_of(4) || desc.spirv.is_empty() {
        return Err(crate::Error::InvalidUse(format!(
            "kernel {:?}: SPIR-V length {} is not a positive multiple of 4",
            desc.name,
            desc.spirv.len()
        )));
    }
    Ok(desc
        .spirv
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// A device feature some kernels need, found from the capabilities their SPIR-V declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelFeature {
    /// 16-bit floats (SPIR-V `Float16`).
    Float16,
    /// Packed integer dot products (`DotProduct`, `DotProductInput4x8BitPacked`).
    IntegerDotProduct,
    /// Cooperative matrices (`CooperativeMatrixKHR`).
    CooperativeMatrix,
    /// 8-bit integer types (`Int8`; the int8 cooperative matrices use them).
    Int8,
}

impl KernelFeature {
    /// What to call it in an error message.
    pub fn name(self) -> &'static str {
        match self {
            KernelFeature::Float16 => "16-bit floats (shaderFloat16)",
            KernelFeature::IntegerDotProduct => "integer dot products (shaderIntegerDotProduct)",
            KernelFeature::CooperativeMatrix => "cooperative matrices (VK_KHR_cooperative_matrix)",
            KernelFeature::Int8 => "int8 cooperative matrices (shaderInt8, 16x16x32 s8)",
        }
    }
}

impl KernelDesc {
    /// The device features this kernel's SPIR-V declares it needs (its `OpCapability`
    /// instructions), each once.
    pub fn features(&self) -> Result<Vec<KernelFeature>> {
        const OP_CAPABILITY: u32 = 17;
        let words = spirv_words(self)?;
        let mut out = Vec::new();
        // Instructions start after the five header words; the capabilities come first.
        let mut i = 5;
        while let Some(&word) = words.get(i) {
            let count = (word >> 16) as usize;
            if word & 0xFFFF != OP_CAPABILITY || count < 2 {
                break;
            }
            let feature = match words.get(i + 1) {
                Some(9) => Some(KernelFeature::Float16),
                Some(6018 | 6019) => Some(KernelFeature::IntegerDotProduct),
                Some(6022) => Some(KernelFeature::CooperativeMatrix),
                Some(39) => Some(KernelFeature::Int8),
                _ => None,
            };
            if let Some(f) = feature.filter(|f| !out.contains(f)) {
                out.push(f);
            }
            i += count;
        }
        Ok(out)
    }
}

/// One compile statistic the driver reports for a kernel's pipeline.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct KernelStatistic {
    /// The pipeline executable it belongs to (a compute pipeline usually has one).
    pub executable: String,
    /// The driver's name for it, e.g. "Register Count".
    pub name: String,
    /// The driver's description.
    pub description: String,
    /// Its value.
    pub value: StatisticValue,
}

/// The value of a [`KernelStatistic`] (JSON: the bare boolean or number).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum StatisticValue {
    /// A yes / no statistic.
    Bool(bool),
    /// A signed count.
    Int(i64),
    /// An unsigned count.
    Uint(u64),
    /// A real number.
    Float(f64),
}

impl std::fmt::Display for StatisticValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatisticValue::Bool(b) => write!(f, "{b}"),
            StatisticValue::Int(v) => write!(f, "{v}"),
            StatisticValue::Uint(v) => write!(f, "{v}"),
            StatisticValue::Float(v) => write!(f, "{v:.3}"),
        }
    }
}

/// The compile statistics of `pipeline`, one entry per (executable, statistic).
pub(crate) fn pipeline_statistics(
    ext: &ash::khr::pipeline_executable_properties::Device,
    pipeline: &Pipeline,
) -> Result<Vec<KernelStatistic>> {
    let text = |c: &[std::ffi::c_char]| -> String {
        // The driver writes NUL-terminated strings into fixed arrays.
        let bytes: Vec<u8> = c
            .iter()
            .take_while(|&&b| b != 0)
            .map(|&b| b as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let mut out = Vec::new();
    // SAFETY: the pipeline was made on this device with CAPTURE_STATISTICS and is alive
    // (the caller holds its Arc); the info structs live across each call.
    unsafe {
        let info = vk::PipelineInfoKHR::default().pipeline(pipeline.raw());
        let executables = ext
            .get_pipeline_executable_properties(&info)
            .vk("vkGetPipelineExecutablePropertiesKHR")?;
        for (index, exe) in executables.iter().enumerate() {
            let exe_name = text(&exe.name);
            let einfo = vk::PipelineExecutableInfoKHR::default()
                .pipeline(pipeline.raw())
                .executable_index(index as u32);
            let stats = ext
                .get_pipeline_executable_statistics(&einfo)
                .vk("vkGetPipelineExecutableStatisticsKHR")?;
            for s in &stats {
                let value = match s.format {
                    vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                        StatisticValue::Bool(s.value.b32 != 0)
                    }
                    vk::PipelineExecutableStatisticFormatKHR::INT64 => {
                        StatisticValue::Int(s.value.i64)
                    }
                    vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => {
                        StatisticValue::Float(s.value.f64)
                    }
                    _ => StatisticValue::Uint(s.value.u64),
                };
                out.push(KernelStatistic {
                    executable: exe_name.clone(),
                    name: text(&s.name),
                    description: text(&s.description),
                    value,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Statistic values serialize as bare JSON values; SPIR-V capabilities map to features.
    #[test]
    fn statistic_values_are_bare_json_and_capabilities_map_to_features() {
        let json = serde_json::to_string(&[
            StatisticValue::Bool(true),
            StatisticValue::Int(-3),
            StatisticValue::Uint(58),
            StatisticValue::Float(0.5),
        ])
        .unwrap();
        assert_eq!(json, "[true,-3,58,0.5]");
        // Header, then OpCapability Shader (1), Float16 (9), DotProduct (6019), then an
        // OpExtension that ends the capability section.
        let words: Vec<u32> = vec![
            0x0723_0203,
            0x0001_0000,
            0,
            10,
            0,
            (2 << 16) | 17,
            1,
            (2 << 16) | 17,
            9,
            (2 << 16) | 17,
            6019,
            (2 << 16) | 10,
            0,
        ];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let spirv: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        let desc = KernelDesc {
            name: "caps",
            spirv,
            entry: "main",
            bindings: &[],
            push_constant_bytes: 0,
            workgroup_size: [1, 1, 1],
            workgroup_memory_bytes: 0,
        };
        assert_eq!(
            desc.features().unwrap(),
            vec![KernelFeature::Float16, KernelFeature::IntegerDotProduct]
        );
        let bad = KernelDesc {
            spirv: &[1, 2, 3],
            ..desc
        };
        assert!(bad.features().is_err());
    }
}
