//! Device: instance, adapter choice, queue, features, limits and [`DeviceInfo`].
//!
//! A [`Device`] is a cheap, clonable handle. Buffers, tickets and pipelines keep the
//! shared state alive; when the last `Device` handle goes, the runtime waits for the
//! queue, releases what queued work still held, and the Vulkan objects go with the last
//! buffer. Extensions used: `VK_KHR_push_descriptor` (required), `VK_EXT_memory_budget`
//! (when present), `VK_KHR_pipeline_executable_properties` (with
//! `Options::kernel_statistics`). Vulkan 1.3 is required (synchronization2, timeline semaphores).

use std::collections::HashMap;
use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};

use crate::counters::{AtomicCounters, Counters};
use crate::error::{Error, Result, VkResultExt};
use crate::kernel::{KernelDesc, KernelFeature, KernelStatistic, Pipeline};
use crate::options::{Options, Validation};
use crate::queue::QueueState;
use crate::validation::{self, ValidationLog, ValidationMessage};

static NEXT_DEVICE_ID: AtomicU64 = AtomicU64::new(1);

/// One memory heap of the device.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HeapInfo {
    /// Heap size in bytes.
    pub size: u64,
    /// Whether the heap is device-local.
    pub device_local: bool,
    /// Whether some memory type of this heap is host-visible.
    pub host_visible: bool,
    /// Bytes this process may use (VK_EXT_memory_budget), if known.
    pub budget: Option<u64>,
    /// Bytes this process uses (VK_EXT_memory_budget), if known.
    pub usage: Option<u64>,
}

/// What the chosen device is and can do.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceInfo {
    /// Device name, e.g. "NVIDIA H100 80GB HBM3" or "llvmpipe (LLVM 15.0.6, 256 bits)".
    pub name: String,
    /// Vendor name derived from the PCI vendor id.
    pub vendor: String,
    /// PCI vendor id.
    pub vendor_id: u32,
    /// "discrete", "integrated", "virtual", "cpu" or "other".
    pub device_type: String,
    /// Driver name (VkPhysicalDeviceDriverProperties).
    pub driver: String,
    /// Driver version text.
    pub driver_info: String,
    /// Vulkan API version, "major.minor.patch".
    pub api_version: String,
    /// Unified memory: every device-local memory type is also host-visible.
    pub uma: bool,
    /// A large (>= 4 GiB) device-local heap is host-visible (resizable BAR): weights live
    /// there and the host reads them without a copy.
    pub resizable_bar: bool,
    /// Memory heaps with budgets.
    pub heaps: Vec<HeapInfo>,
    /// Subgroup (warp/wave) size.
    pub subgroup_size: u32,
    /// Whether the compute queue can write timestamps.
    pub timestamps: bool,
    /// Nanoseconds per timestamp tick.
    pub timestamp_period_ns: f32,
    /// Valid bits of a timestamp on the compute queue.
    pub timestamp_valid_bits: u32,
    /// Timeline semaphores (required, so always true on a made device).
    pub timeline_semaphores: bool,
    /// 16-bit float arithmetic and storage in shaders.
    pub shader_f16: bool,
    /// VK_EXT_memory_budget present.
    pub memory_budget_ext: bool,
    /// VK_EXT_memory_priority with VK_EXT_pageable_device_local_memory present (class priorities reach the driver).
    pub memory_priority_ext: bool,
    /// Largest push-constant block in bytes.
    pub max_push_constant_bytes: u32,
    /// Required alignment of storage-buffer binding offsets.
    pub storage_offset_alignment: u64,
    /// Most bytes one storage-buffer binding may cover (`maxStorageBufferRange`, or
    /// [`Options::max_binding`](crate::Options::max_binding) where that is smaller).
    pub max_storage_range: u64,
    /// Largest workgroup count per dimension.
    pub max_workgroup_count: [u32; 3],
    /// Largest workgroup (shared) memory of one compute workgroup, in bytes.
    pub max_workgroup_memory_bytes: u32,
    /// Most invocations in one compute workgroup.
    pub max_workgroup_invocations: u32,
    /// Queue family used for compute.
    pub queue_family: u32,
    /// Cooperative-matrix shapes the device lists (VK_KHR_cooperative_matrix), as
    /// "MxNxK A*B+C->R scope", e.g. "16x16x16 f16*f16+f32->f32 subgroup"; empty without
    /// the extension.
    pub coopmat_shapes: Vec<String>,
    /// The cooperative-matrix kernels can run: VK_KHR_cooperative_matrix (with the Vulkan
    /// memory model where present), 16-bit floats, a 16x16x16 f16*f16+f32->f32 subgroup
    /// shape and subgroups of 32 were all found and enabled, and `Options::no_coopmat` is
    /// off.
    pub coopmat_f16_16x16: bool,
    /// The int8 cooperative-matrix kernels can run: everything `coopmat_f16_16x16` needs,
    /// 8-bit integers (shaderInt8) and a 16x16x32 s8*s8+s32->s32 subgroup shape.
    pub coopmat_s8_16x16x32: bool,
    /// Integer dot products of packed 4x8-bit vectors (Vulkan 1.3 shaderIntegerDotProduct)
    /// are enabled: the `*_dp` block-format matvec variants can run. False when the device
    /// lacks the feature or `Options::no_int_dot` is set.
    pub int_dot: bool,
    /// Multiprocessors (NVIDIA SMs) the driver reports through VK_NV_shader_sm_builtins;
    /// 0 where unknown. Bounds how many workgroups of a persistent kernel may wait for
    /// each other (`sluice_kernels::persistent_residency`).
    pub compute_units: u32,
    /// The device reports the signed 4x8-bit packed dot product as accelerated (one
    /// instruction, not an emulation); informational.
    pub int_dot_accelerated: bool,
    /// Pipelines carry the driver's compile statistics ([`Device::kernel_statistics`]):
    /// `Options::kernel_statistics` was set and the device has
    /// VK_KHR_pipeline_executable_properties.
    pub kernel_statistics: bool,
}

pub(crate) struct Extensions {
    pub push_descriptor: ash::khr::push_descriptor::Device,
    /// VK_EXT_pageable_device_local_memory, when present (memory priorities).
    pub pageable: Option<ash::ext::pageable_device_local_memory::Device>,
    pub debug_utils: Option<ash::ext::debug_utils::Instance>,
    /// Device-level debug-utils functions (command-buffer labels), when the extension is on.
    pub labels: Option<ash::ext::debug_utils::Device>,
    pub messenger: vk::DebugUtilsMessengerEXT,
    /// VK_KHR_pipeline_executable_properties, when `Options::kernel_statistics` asked for it.
    pub exec_props: Option<ash::khr::pipeline_executable_properties::Device>,
}

/// State shared by every handle of one device.
pub(crate) struct DeviceShared {
    pub id: u64,
    _entry: ash::Entry,
    pub instance: ash::Instance,
    pub physical: vk::PhysicalDevice,
    pub raw: ash::Device,
    pub ext: Extensions,
    pub info: DeviceInfo,
    pub options: Options,
    pub allocator: ManuallyDrop<Mutex<Allocator>>,
    pub queue: QueueState,
    pub pipeline_cache: vk::PipelineCache,
    pub pipelines: Mutex<HashMap<PipelineKey, Arc<Pipeline>>>,
    pub counters: AtomicCounters,
    pub next_buffer_id: AtomicU64,
    pub validation_log: Box<ValidationLog>,
    pub waiter: Arc<crate::waiter::Waiter>,
    pub deferred_writes: Mutex<Vec<crate::transfer::DeferredWrite>>,
    pub residency: crate::residency::Residency,
}

/// A Vulkan device with one compute queue. Clone it freely: clones share everything.
#[derive(Clone)]
pub struct Device {
    pub(crate) handle: Arc<DeviceHandle>,
}

/// The user-facing owner; dropping the last one drains the queue (see module docs).
pub(crate) struct DeviceHandle {
    pub shared: Arc<DeviceShared>,
}

impl Drop for DeviceHandle {
    fn drop(&mut self) {
        // Drain the queue so queued work's resources are released; errors here (device
        // lost) leave nothing to wait for. Then end the async waiter thread, so the device
        // is not destroyed on it (nor left to it at process exit).
        self.shared.queue.drain(&self.shared);
        self.shared.waiter.stop();
    }
}

/// A physical device with its properties and name.
type Adapter = (vk::PhysicalDevice, vk::PhysicalDeviceProperties, String);

/// What [`Device::new`]'s device step makes.
struct DeviceParts {
    raw: ash::Device,
    ext: Extensions,
    info: DeviceInfo,
    queue: QueueState,
    cache: vk::PipelineCache,
}

/// Holds a value made by one step of [`Device::new`] and frees it with `destroy` when
/// dropped, unless [`Guard::disarm`]ed: a failure in a later step then frees what the
/// earlier steps made (younger guards first, by drop order).
struct Guard<T, F: FnOnce(&mut T)> {
    value: Option<T>,
    destroy: Option<F>,
}

impl<T, F: FnOnce(&mut T)> Guard<T, F> {
    fn new(value: T, destroy: F) -> Self {
        Guard {
            value: Some(value),
            destroy: Some(destroy),
        }
    }

    /// The value, no longer freed by the guard.
    fn disarm(mut self) -> T {
        self.destroy = None;
        self.value
            .take()
            .expect("guard holds its value until disarmed")
    }
}

impl<T, F: FnOnce(&mut T)> std::ops::Deref for Guard<T, F> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
            .as_ref()
            .expect("guard holds its value until disarmed")
    }
}

impl<T, F: FnOnce(&mut T)> Drop for Guard<T, F> {
    fn drop(&mut self) {
        if let (Some(v), Some(f)) = (self.value.as_mut(), self.destroy.take()) {
            f(v);
        }
    }
}

/// Destroys the debug messenger of `ext`, if one was made.
fn destroy_messenger(ext: &Extensions) {
    if let Some(du) = &ext.debug_utils {
        if ext.messenger != vk::DebugUtilsMessengerEXT::null() {
            // SAFETY: the messenger was made from this instance's debug utils and nothing
            // uses it after this call (the device's last step or a failed creation).
            unsafe { du.destroy_debug_utils_messenger(ext.messenger, None) };
        }
    }
}

fn vendor_name(id: u32) -> &'static str {
    match id {
        0x10de => "NVIDIA",
        0x1002 => "AMD",
        0x8086 => "Intel",
        0x13b5 => "ARM",
        0x5143 => "Qualcomm",
        0x106b => "Apple",
        0x10005 => "Mesa",
        _ => "unknown",
    }
}

fn type_name(t: vk::PhysicalDeviceType) -> &'static str {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => "discrete",
        vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated",
        vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual",
        vk::PhysicalDeviceType::CPU => "cpu",
        _ => "other",
    }
}

fn type_rank(t: vk::PhysicalDeviceType) -> u32 {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    }
}

fn has_extension(props: &[vk::ExtensionProperties], name: &CStr) -> bool {
    props
        .iter()
        .any(|p| p.extension_name_as_c_str().is_ok_and(|n| n == name))
}

impl Device {
    /// Opens the Vulkan loader, picks a device as `options` say, and makes it ready.
    pub fn new(options: Options) -> Result<Device> {
        // SAFETY: loading libvulkan runs its initialisers; this is the documented way to
        // use ash without linking at build time.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| Error::Loader(e.to_string()))?;
        let validation_log = Box::<ValidationLog>::default();
        // Each step returns what it made under a guard that frees it if a later step
        // fails; the guards are disarmed once everything exists.
        let (instance, want_validation, debug_utils_present) =
            Self::create_instance(&entry, &options, &validation_log)?;
        let instance = Guard::new(instance, |i: &mut ash::Instance| {
            // SAFETY: reached only when a later step failed: nothing made from the
            // instance survives (their guards ran first, being younger).
            unsafe { i.destroy_instance(None) }
        });
        let adapter = Self::pick_adapter(&instance, &options)?;
        let physical = adapter.0;
        let parts = Self::create_device(
            &entry,
            &instance,
            adapter,
            &options,
            &validation_log,
            want_validation,
            debug_utils_present,
        )?;
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: (*instance).clone(),
            device: parts.raw.clone(),
            physical_device: physical,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: Default::default(),
        })
        .map_err(|e| Error::Allocation {
            requested: 0,
            what: "allocator".into(),
            reason: e.to_string(),
        })?;
        let DeviceParts {
            raw,
            ext,
            info,
            queue,
            cache,
        } = parts.disarm();
        let shared = DeviceShared {
            id: NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed),
            _entry: entry,
            instance: instance.disarm(),
            physical,
            raw,
            ext,
            info,
            options,
            allocator: ManuallyDrop::new(Mutex::new(allocator)),
            queue,
            pipeline_cache: cache,
            pipelines: Mutex::new(HashMap::new()),
            counters: AtomicCounters::default(),
            next_buffer_id: AtomicU64::new(1),
            validation_log,
            waiter: Default::default(),
            deferred_writes: Mutex::new(Vec::new()),
            residency: Default::default(),
        };
        Ok(Device {
            handle: Arc::new(DeviceHandle {
                shared: Arc::new(shared),
            }),
        })
    }

    /// Step 1: the instance (validation layer and debug utils as `options` say). Returns
    /// it with (validation wanted, debug utils enabled).
    fn create_instance(
        entry: &ash::Entry,
        options: &Options,
        validation_log: &ValidationLog,
    ) -> Result<(ash::Instance, bool, bool)> {
        // --- instance ---
        let app = vk::ApplicationInfo::default()
            .application_name(c"sluice")
            .engine_name(c"sluice")
            .api_version(vk::API_VERSION_1_3);
        let mut layers: Vec<*const std::ffi::c_char> = Vec::new();
        let mut extensions: Vec<*const std::ffi::c_char> = Vec::new();
        // SAFETY: plain enumeration through a loaded entry.
        let instance_exts = unsafe { entry.enumerate_instance_extension_properties(None) }
            .vk("vkEnumerateInstanceExtensionProperties")?;
        let want_validation = options.validation != Validation::Off;
        if want_validation {
            // SAFETY: plain enumeration through a loaded entry.
            let available = unsafe { entry.enumerate_instance_layer_properties() }
                .vk("vkEnumerateInstanceLayerProperties")?;
            if !available.iter().any(|l| {
                l.layer_name_as_c_str()
                    .is_ok_and(|n| n == validation::LAYER_NAME)
            }) {
                return Err(Error::MissingFeature {
                    device: "instance".into(),
                    missing:
                        "VK_LAYER_KHRONOS_validation (install Debian's vulkan-validationlayers)"
                            .into(),
                });
            }
            layers.push(validation::LAYER_NAME.as_ptr());
            extensions.push(ash::ext::validation_features::NAME.as_ptr());
        }
        let debug_utils_present =
            has_extension(&instance_exts, ash::ext::debug_utils::NAME) || want_validation;
        if debug_utils_present {
            extensions.push(ash::ext::debug_utils::NAME.as_ptr());
        }
        let enabled_features = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut validation_features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enabled_features);
        let mut messenger_info = validation::messenger_info(validation_log);
        let mut instance_info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions);
        if want_validation {
            instance_info = instance_info.push_next(&mut messenger_info);
            if options.validation == Validation::Synchronization {
                instance_info = instance_info.push_next(&mut validation_features);
            }
        }
        // SAFETY: every pointer in instance_info refers to locals alive for this call.
        let instance =
            unsafe { entry.create_instance(&instance_info, None) }.vk("vkCreateInstance")?;

        Ok((instance, want_validation, debug_utils_present))
    }

    /// Step 2: the physical device `options` ask for (name filter, Vulkan 1.3, discrete
    /// first). Creates nothing.
    fn pick_adapter(instance: &ash::Instance, options: &Options) -> Result<Adapter> {
        // SAFETY: instance is valid; these calls only enumerate and query.
        unsafe {
            let physicals = instance
                .enumerate_physical_devices()
                .vk("vkEnumeratePhysicalDevices")?;
            let mut candidates: Vec<(vk::PhysicalDevice, vk::PhysicalDeviceProperties, String)> =
                physicals
                    .iter()
                    .map(|&p| {
                        let props = instance.get_physical_device_properties(p);
                        let name = props
                            .device_name_as_c_str()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        (p, props, name)
                    })
                    .collect();
            let seen: Vec<String> = candidates.iter().map(|c| c.2.clone()).collect();
            candidates.retain(|c| {
                vk::api_version_minor(c.1.api_version) >= 3
                    || vk::api_version_major(c.1.api_version) > 1
            });
            if let Some(want) = &options.adapter {
                let w = want.to_lowercase();
                candidates.retain(|c| c.2.to_lowercase().contains(&w));
            }
            candidates.sort_by_key(|c| type_rank(c.1.device_type));
            candidates.into_iter().next().ok_or(Error::NoDevice {
                wanted: options.adapter.clone(),
                seen,
            })
        }
    }

    /// Step 3: the logical device with its extensions and features, the debug messenger,
    /// the queue and the pipeline cache, under one guard (freed together if a later step
    /// fails); inside, each object is guarded until the next one exists.
    #[allow(clippy::too_many_arguments)]
    fn create_device(
        entry: &ash::Entry,
        instance: &ash::Instance,
        adapter: Adapter,
        options: &Options,
        log: &ValidationLog,
        want_validation: bool,
        debug_utils_present: bool,
    ) -> Result<Guard<DeviceParts, impl FnOnce(&mut DeviceParts)>> {
        let (physical, props, name) = adapter;
        // SAFETY: instance and physical are valid; all structs passed live across each call;
        // every object made here is destroyed by its guard unless all steps succeed.
        unsafe {
            // Extensions.
            let dev_exts = instance
                .enumerate_device_extension_properties(physical)
                .vk("vkEnumerateDeviceExtensionProperties")?;
            if !has_extension(&dev_exts, ash::khr::push_descriptor::NAME) {
                return Err(Error::MissingFeature {
                    device: name,
                    missing: "VK_KHR_push_descriptor".into(),
                });
            }
            let memory_budget_ext = has_extension(&dev_exts, ash::ext::memory_budget::NAME);
            let coopmat_ext = has_extension(&dev_exts, ash::khr::cooperative_matrix::NAME);
            let pageable_ext = has_extension(&dev_exts, ash::ext::memory_priority::NAME)
                && has_extension(&dev_exts, ash::ext::pageable_device_local_memory::NAME);
            let exec_props_ext = options.kernel_statistics
                && has_extension(&dev_exts, ash::khr::pipeline_executable_properties::NAME);
            let mut enabled_exts = vec![ash::khr::push_descriptor::NAME.as_ptr()];
            if memory_budget_ext {
                enabled_exts.push(ash::ext::memory_budget::NAME.as_ptr());
            }

            // Features.
            let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
            let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
            let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
            let mut fprio = vk::PhysicalDeviceMemoryPriorityFeaturesEXT::default();
            let mut fpage = vk::PhysicalDevicePageableDeviceLocalMemoryFeaturesEXT::default();
            let mut fcoop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
            let mut fexec = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
            let mut f2 = vk::PhysicalDeviceFeatures2::default()
                .push_next(&mut f11)
                .push_next(&mut f12)
                .push_next(&mut f13);
            if pageable_ext {
                f2 = f2.push_next(&mut fprio).push_next(&mut fpage);
            }
            if coopmat_ext {
                f2 = f2.push_next(&mut fcoop);
            }
            if exec_props_ext {
                f2 = f2.push_next(&mut fexec);
            }
            instance.get_physical_device_features2(physical, &mut f2);
            let mut eexec = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
                .pipeline_executable_info(true);
            let shader_int64 = f2.features.shader_int64;
            let exec_props = exec_props_ext && fexec.pipeline_executable_info != 0;
            if exec_props {
                enabled_exts.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
            }
            let pageable_ext = pageable_ext
                && fprio.memory_priority != 0
                && fpage.pageable_device_local_memory != 0;
            if pageable_ext {
                enabled_exts.push(ash::ext::memory_priority::NAME.as_ptr());
                enabled_exts.push(ash::ext::pageable_device_local_memory::NAME.as_ptr());
            }
            let mut eprio =
                vk::PhysicalDeviceMemoryPriorityFeaturesEXT::default().memory_priority(true);
            let mut epage = vk::PhysicalDevicePageableDeviceLocalMemoryFeaturesEXT::default()
                .pageable_device_local_memory(true);
            if f12.timeline_semaphore == 0 || f13.synchronization2 == 0 {
                return Err(Error::MissingFeature {
                    device: name,
                    missing: "timelineSemaphore and synchronization2".into(),
                });
            }
            let shader_f16 = f12.shader_float16 != 0
                && f11.storage_buffer16_bit_access != 0
                && f11.uniform_and_storage_buffer16_bit_access != 0;
            // Cooperative matrices: the shapes are listed whenever the extension exists; the
            // kernels are used only with everything they need (see DeviceInfo).
            let coopmat_shapes = if coopmat_ext {
                coopmat_shape_names(entry, instance, physical)
            } else {
                Vec::new()
            };
            let subgroup_size = {
                let mut sg = vk::PhysicalDeviceSubgroupProperties::default();
                let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut sg);
                instance.get_physical_device_properties2(physical, &mut p2);
                sg.subgroup_size
            };
            // Multiprocessor count where the driver tells it (VK_NV_shader_sm_builtins; the
            // properties struct is read only, the extension is not enabled).
            let compute_units = if has_extension(&dev_exts, ash::nv::shader_sm_builtins::NAME) {
                let mut sm = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
                let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut sm);
                instance.get_physical_device_properties2(physical, &mut p2);
                sm.shader_sm_count
            } else {
                0
            };
            let coopmat = coopmat_ext
                && !options.no_coopmat
                && fcoop.cooperative_matrix != 0
                && shader_f16
                && subgroup_size == 32
                && coopmat_shapes
                    .iter()
                    .any(|s| s == "16x16x16 f16*f16+f32->f32 subgroup");
            let coopmat_s8 = coopmat
                && f12.shader_int8 != 0
                && coopmat_shapes
                    .iter()
                    .any(|s| s == "16x16x32 s8*s8+s32->s32 subgroup");
            if coopmat {
                enabled_exts.push(ash::khr::cooperative_matrix::NAME.as_ptr());
            }
            let mut ecoop =
                vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
            let mut e11 = vk::PhysicalDeviceVulkan11Features::default()
                .storage_buffer16_bit_access(shader_f16)
                .uniform_and_storage_buffer16_bit_access(shader_f16);
            let mut e12 = vk::PhysicalDeviceVulkan12Features::default()
                .timeline_semaphore(true)
                .host_query_reset(f12.host_query_reset != 0)
                .shader_float16(shader_f16)
                .shader_int8(coopmat_s8)
                .vulkan_memory_model(coopmat && f12.vulkan_memory_model != 0)
                .vulkan_memory_model_device_scope(
                    coopmat && f12.vulkan_memory_model_device_scope != 0,
                );
            let int_dot = f13.shader_integer_dot_product != 0 && !options.no_int_dot;
            let mut e13 = vk::PhysicalDeviceVulkan13Features::default()
                .synchronization2(true)
                .shader_integer_dot_product(int_dot)
                .subgroup_size_control(f13.subgroup_size_control != 0)
                .compute_full_subgroups(f13.compute_full_subgroups != 0);
            let base = vk::PhysicalDeviceFeatures::default().shader_int64(shader_int64 != 0);

            // Queue: first compute family, preferring one with timestamps.
            let families = instance.get_physical_device_queue_family_properties(physical);
            let family = families
                .iter()
                .enumerate()
                .filter(|(_, f)| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
                .min_by_key(|(_, f)| (f.timestamp_valid_bits == 0) as u32)
                .map(|(i, _)| i as u32)
                .ok_or(Error::MissingFeature {
                    device: name.clone(),
                    missing: "a compute queue".into(),
                })?;
            let priorities = [1.0f32];
            let queue_infos = [vk::DeviceQueueCreateInfo::default()
                .queue_family_index(family)
                .queue_priorities(&priorities)];
            let device_info = vk::DeviceCreateInfo::default()
                .queue_create_infos(&queue_infos)
                .enabled_extension_names(&enabled_exts)
                .enabled_features(&base)
                .push_next(&mut e11)
                .push_next(&mut e12)
                .push_next(&mut e13);
            let device_info = if pageable_ext {
                device_info.push_next(&mut eprio).push_next(&mut epage)
            } else {
                device_info
            };
            let device_info = if coopmat {
                device_info.push_next(&mut ecoop)
            } else {
                device_info
            };
            let device_info = if exec_props {
                device_info.push_next(&mut eexec)
            } else {
                device_info
            };
            let raw = instance
                .create_device(physical, &device_info, None)
                .vk("vkCreateDevice")?;

            // Properties for DeviceInfo.
            let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
            let mut driver = vk::PhysicalDeviceDriverProperties::default();
            let mut dotp = vk::PhysicalDeviceShaderIntegerDotProductProperties::default();
            let mut p2 = vk::PhysicalDeviceProperties2::default()
                .push_next(&mut subgroup)
                .push_next(&mut driver)
                .push_next(&mut dotp);
            instance.get_physical_device_properties2(physical, &mut p2);
            let mem = instance.get_physical_device_memory_properties(physical);
            let uma = mem.memory_types[..mem.memory_type_count as usize]
                .iter()
                .filter(|t| {
                    t.property_flags
                        .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
                })
                .all(|t| {
                    t.property_flags
                        .contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
                });
            let resizable_bar = mem.memory_types[..mem.memory_type_count as usize]
                .iter()
                .any(|t| {
                    t.property_flags.contains(
                        vk::MemoryPropertyFlags::DEVICE_LOCAL
                            | vk::MemoryPropertyFlags::HOST_VISIBLE,
                    ) && mem.memory_heaps[t.heap_index as usize].size >= 4 << 30
                });
            let valid_bits = families[family as usize].timestamp_valid_bits;
            let v = props.api_version;
            let info = DeviceInfo {
                name: name.clone(),
                vendor: vendor_name(props.vendor_id).into(),
                vendor_id: props.vendor_id,
                device_type: type_name(props.device_type).into(),
                driver: driver
                    .driver_name_as_c_str()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                driver_info: driver
                    .driver_info_as_c_str()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                api_version: format!(
                    "{}.{}.{}",
                    vk::api_version_major(v),
                    vk::api_version_minor(v),
                    vk::api_version_patch(v)
                ),
                uma,
                resizable_bar,
                heaps: Vec::new(),
                subgroup_size: subgroup.subgroup_size,
                timestamps: valid_bits > 0 && props.limits.timestamp_period > 0.0,
                timestamp_period_ns: props.limits.timestamp_period,
                timestamp_valid_bits: valid_bits,
                timeline_semaphores: true,
                shader_f16,
                memory_budget_ext,
                memory_priority_ext: pageable_ext,
                max_push_constant_bytes: props.limits.max_push_constants_size,
                storage_offset_alignment: props.limits.min_storage_buffer_offset_alignment,
                max_storage_range: (props.limits.max_storage_buffer_range as u64)
                    .min(options.max_binding.unwrap_or(u64::MAX)),
                max_workgroup_count: props.limits.max_compute_work_group_count,
                max_workgroup_memory_bytes: props.limits.max_compute_shared_memory_size,
                max_workgroup_invocations: props.limits.max_compute_work_group_invocations,
                queue_family: family,
                coopmat_shapes,
                coopmat_f16_16x16: coopmat,
                coopmat_s8_16x16x32: coopmat_s8,
                int_dot,
                compute_units,
                int_dot_accelerated: int_dot
                    && dotp.integer_dot_product4x8_bit_packed_signed_accelerated != 0,
                kernel_statistics: exec_props,
            };

            let raw = Guard::new(raw, |d: &mut ash::Device| d.destroy_device(None));
            let messenger = if want_validation {
                let du = ash::ext::debug_utils::Instance::new(entry, instance);
                let m = du
                    .create_debug_utils_messenger(&validation::messenger_info(log), None)
                    .vk("vkCreateDebugUtilsMessengerEXT")?;
                (Some(du), m)
            } else if debug_utils_present {
                (
                    Some(ash::ext::debug_utils::Instance::new(entry, instance)),
                    vk::DebugUtilsMessengerEXT::null(),
                )
            } else {
                (None, vk::DebugUtilsMessengerEXT::null())
            };
            let ext = Guard::new(
                Extensions {
                    push_descriptor: ash::khr::push_descriptor::Device::new(instance, &raw),
                    pageable: pageable_ext.then(|| {
                        ash::ext::pageable_device_local_memory::Device::new(instance, &raw)
                    }),
                    labels: messenger
                        .0
                        .as_ref()
                        .map(|_| ash::ext::debug_utils::Device::new(instance, &raw)),
                    debug_utils: messenger.0,
                    messenger: messenger.1,
                    exec_props: exec_props.then(|| {
                        ash::khr::pipeline_executable_properties::Device::new(instance, &raw)
                    }),
                },
                |e: &mut Extensions| destroy_messenger(e),
            );
            let device = (*raw).clone();
            let queue = Guard::new(QueueState::new(&raw, family)?, move |q: &mut QueueState| {
                q.destroy(&device)
            });
            let cache = raw
                .create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None)
                .vk("vkCreatePipelineCache")?;
            let mut info = info;
            info.heaps = heap_infos(instance, physical, memory_budget_ext);
            let parts = DeviceParts {
                queue: queue.disarm(),
                ext: ext.disarm(),
                raw: raw.disarm(),
                info,
                cache,
            };
            Ok(Guard::new(parts, |p: &mut DeviceParts| {
                p.raw.destroy_pipeline_cache(p.cache, None);
                p.queue.destroy(&p.raw);
                destroy_messenger(&p.ext);
                p.raw.destroy_device(None);
            }))
        }
    }

    /// What this device is and can do (heap budgets as of creation; see [`Device::heaps`]).
    pub fn info(&self) -> &DeviceInfo {
        &self.handle.shared.info
    }

    /// What sets [`DeviceInfo::max_storage_range`], for messages: the device's
    /// `maxStorageBufferRange`, or [`Options::max_binding`] where that lowered it.
    pub fn binding_limit_source(&self) -> &'static str {
        self.handle.shared.binding_limit_source()
    }

    /// The options the device was made with.
    pub fn options(&self) -> &Options {
        &self.handle.shared.options
    }

    /// Heaps with their current budget and usage.
    pub fn heaps(&self) -> Vec<HeapInfo> {
        self.handle.shared.heaps()
    }

    /// The cached pipeline for `kernel`, made on first use.
    pub fn pipeline(&self, kernel: &KernelDesc) -> Result<Arc<Pipeline>> {
        let key = PipelineKey::of(kernel);
        let mut map = self
            .handle
            .shared
            .pipelines
            .lock()
            .expect("pipeline cache poisoned");
        if let Some(p) = map.get(&key) {
            return Ok(p.clone());
        }
        let info = &self.handle.shared.info;
        if kernel.push_constant_bytes > info.max_push_constant_bytes {
            return Err(Error::InvalidUse(format!(
                "kernel {:?} takes {} push-constant bytes; the device allows {}",
                kernel.name, kernel.push_constant_bytes, info.max_push_constant_bytes
            )));
        }
        // A workgroup over the device's limits is refused here: drivers need not reject
        // it, and one that runs it anyway may never finish the dispatch.
        if kernel.workgroup_memory_bytes > info.max_workgroup_memory_bytes {
            return Err(Error::InvalidUse(format!(
                "kernel {:?} declares {} bytes of workgroup memory; the device allows {}",
                kernel.name, kernel.workgroup_memory_bytes, info.max_workgroup_memory_bytes
            )));
        }
        let invocations = kernel
            .workgroup_size
            .iter()
            .map(|&n| n as u64)
            .product::<u64>();
        if invocations > info.max_workgroup_invocations as u64 {
            return Err(Error::InvalidUse(format!(
                "kernel {:?} has workgroups of {} invocations; the device allows {}",
                kernel.name, invocations, info.max_workgroup_invocations
            )));
        }
        // A kernel whose SPIR-V needs a feature this device did not enable is refused
        // here too: some drivers accept the module and fail (or crash) later.
        for feature in kernel.features()? {
            let enabled = match feature {
                KernelFeature::Float16 => info.shader_f16,
                KernelFeature::IntegerDotProduct => info.int_dot,
                KernelFeature::CooperativeMatrix => info.coopmat_f16_16x16,
                KernelFeature::Int8 => info.coopmat_s8_16x16x32,
            };
            if !enabled {
                return Err(Error::MissingFeature {
                    device: info.name.clone(),
                    missing: format!("{} for kernel {:?}", feature.name(), kernel.name),
                });
            }
        }
        let p = Pipeline::create(
            &self.handle.shared.raw,
            self.handle.shared.pipeline_cache,
            kernel,
            self.handle.shared.id,
            info.kernel_statistics,
        )?;
        map.insert(key, p.clone());
        Ok(p)
    }

    /// The driver's compile statistics for `kernel` (registers, instructions, spills: what
    /// the driver chooses to report), making its pipeline first if needed. Needs
    /// `Options::kernel_statistics` and a device with VK_KHR_pipeline_executable_properties
    /// ([`DeviceInfo::kernel_statistics`]).
    pub fn kernel_statistics(&self, kernel: &KernelDesc) -> Result<Vec<KernelStatistic>> {
        let shared = &self.handle.shared;
        let Some(ext) = shared.ext.exec_props.as_ref() else {
            return Err(Error::MissingFeature {
                device: shared.info.name.clone(),
                missing: if shared.options.kernel_statistics {
                    "VK_KHR_pipeline_executable_properties (kernel statistics)".into()
                } else {
                    "kernel statistics: the device was made without Options::kernel_statistics"
                        .into()
                },
            });
        };
        let pipeline = self.pipeline(kernel)?;
        crate::kernel::pipeline_statistics(ext, &pipeline)
    }

    /// Device-wide counters since the device was made.
    pub fn counters(&self) -> Counters {
        self.handle.shared.counters.snapshot()
    }

    /// Validation messages collected so far (empty when validation is off).
    pub fn validation_messages(&self) -> Vec<ValidationMessage> {
        self.handle
            .shared
            .validation_log
            .messages
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// Takes and clears the collected validation messages.
    pub fn take_validation_messages(&self) -> Vec<ValidationMessage> {
        self.handle
            .shared
            .validation_log
            .messages
            .lock()
            .map(|mut m| std::mem::take(&mut *m))
            .unwrap_or_default()
    }
}

fn component_name(t: vk::ComponentTypeKHR) -> String {
    match t {
        vk::ComponentTypeKHR::FLOAT16 => "f16".into(),
        vk::ComponentTypeKHR::FLOAT32 => "f32".into(),
        vk::ComponentTypeKHR::FLOAT64 => "f64".into(),
        vk::ComponentTypeKHR::SINT8 => "s8".into(),
        vk::ComponentTypeKHR::SINT16 => "s16".into(),
        vk::ComponentTypeKHR::SINT32 => "s32".into(),
        vk::ComponentTypeKHR::SINT64 => "s64".into(),
        vk::ComponentTypeKHR::UINT8 => "u8".into(),
        vk::ComponentTypeKHR::UINT16 => "u16".into(),
        vk::ComponentTypeKHR::UINT32 => "u32".into(),
        vk::ComponentTypeKHR::UINT64 => "u64".into(),
        // VK_KHR_shader_bfloat16 (newer than these headers).
        t if t.as_raw() == 1_000_141_000 => "bf16".into(),
        other => format!("type{}", other.as_raw()),
    }
}

/// The cooperative-matrix shapes of `physical` as "MxNxK A*B+C->R scope"; empty when the
/// query fails (the kernels are then not used).
fn coopmat_shape_names(
    entry: &ash::Entry,
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
) -> Vec<String> {
    let coop = ash::khr::cooperative_matrix::Instance::new(entry, instance);
    // SAFETY: the device lists VK_KHR_cooperative_matrix (checked by the caller), so the
    // instance-level entry point exists; `physical` belongs to `instance`.
    let props = unsafe { coop.get_physical_device_cooperative_matrix_properties(physical) };
    props
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let scope = match p.scope {
                vk::ScopeKHR::SUBGROUP => "subgroup".to_string(),
                vk::ScopeKHR::WORKGROUP => "workgroup".to_string(),
                vk::ScopeKHR::DEVICE => "device".to_string(),
                vk::ScopeKHR::QUEUE_FAMILY => "queue-family".to_string(),
                other => format!("scope{}", other.as_raw()),
            };
            format!(
                "{}x{}x{} {}*{}+{}->{} {scope}{}",
                p.m_size,
                p.n_size,
                p.k_size,
                component_name(p.a_type),
                component_name(p.b_type),
                component_name(p.c_type),
                component_name(p.result_type),
                if p.saturating_accumulation != 0 {
                    " saturating"
                } else {
                    ""
                }
            )
        })
        .collect()
}

fn heap_infos(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    budget_ext: bool,
) -> Vec<HeapInfo> {
    let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
    let mut mem2 = vk::PhysicalDeviceMemoryProperties2::default();
    if budget_ext {
        mem2 = mem2.push_next(&mut budget);
    }
    // SAFETY: valid instance and physical device; mem2 and its chain live across the call.
    unsafe { instance.get_physical_device_memory_properties2(physical, &mut mem2) };
    let mem = mem2.memory_properties;
    let types = &mem.memory_types[..mem.memory_type_count as usize];
    (0..mem.memory_heap_count as usize)
        .map(|i| {
            let h = mem.memory_heaps[i];
            HeapInfo {
                size: h.size,
                device_local: h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
                host_visible: types.iter().any(|t| {
                    t.heap_index as usize == i
                        && t.property_flags
                            .contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
                }),
                budget: budget_ext.then(|| budget.heap_budget[i]),
                usage: budget_ext.then(|| budget.heap_usage[i]),
            }
        })
        .collect()
}

impl DeviceShared {
    /// Heaps with their current budget and usage.
    pub(crate) fn heaps(&self) -> Vec<HeapInfo> {
        heap_infos(&self.instance, self.physical, self.info.memory_budget_ext)
    }

    /// See [`Device::binding_limit_source`].
    pub(crate) fn binding_limit_source(&self) -> &'static str {
        if self.options.max_binding == Some(self.info.max_storage_range) {
            "the max_binding option, --max-binding"
        } else {
            "maxStorageBufferRange"
        }
    }
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        // SAFETY: this is the last reference: no buffer, ticket or encoder exists, and the
        // queue was drained when the last `Device` handle went. Objects are destroyed
        // children first; the allocator frees its memory before the device goes.
        unsafe {
            let _ = self.raw.device_wait_idle();
            self.queue.destroy(&self.raw);
            for p in self
                .pipelines
                .get_mut()
                .map(|m| m.drain())
                .into_iter()
                .flatten()
            {
                p.1.destroy(&self.raw);
            }
            self.raw.destroy_pipeline_cache(self.pipeline_cache, None);
            ManuallyDrop::drop(&mut self.allocator);
            self.raw.destroy_device(None);
            if let Some(du) = &self.ext.debug_utils {
                if self.ext.messenger != vk::DebugUtilsMessengerEXT::null() {
                    du.destroy_debug_utils_messenger(self.ext.messenger, None);
                }
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// What identifies a pipeline in the cache: the kernel's name (unique per variant) and its
/// declared interface, so a descriptor that reuses a name with other binding accesses (the
/// validation canary does) gets its own pipeline.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PipelineKey {
    name: &'static str,
    bindings: &'static [crate::kernel::BindingAccess],
    push_constant_bytes: u32,
    spirv_len: usize,
}

impl PipelineKey {
    fn of(kernel: &KernelDesc) -> PipelineKey {
        PipelineKey {
            name: kernel.name,
            bindings: kernel.bindings,
            push_constant_bytes: kernel.push_constant_bytes,
            spirv_len: kernel.spirv.len(),
        }
    }
}

#[cfg(test)]
mod guard_tests {
    use super::Guard;
    use std::cell::RefCell;

    #[test]
    fn guards_free_younger_first_unless_disarmed() {
        let log = RefCell::new(Vec::new());
        {
            let _a = Guard::new("instance", |v: &mut &str| log.borrow_mut().push(*v));
            let _b = Guard::new("device", |v: &mut &str| log.borrow_mut().push(*v));
            // A later step fails here: both are freed, the younger first.
        }
        assert_eq!(*log.borrow(), ["device", "instance"]);
        log.borrow_mut().clear();
        {
            let a = Guard::new("instance", |v: &mut &str| log.borrow_mut().push(*v));
            let b = Guard::new("device", |v: &mut &str| log.borrow_mut().push(*v));
            assert_eq!(*b, "device");
            assert_eq!((b.disarm(), a.disarm()), ("device", "instance"));
        }
        assert!(log.borrow().is_empty(), "disarmed guards free nothing");
    }
}
