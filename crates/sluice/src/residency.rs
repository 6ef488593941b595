//! Residency: memory priorities per resource class, staged and applied once per submit
//! boundary, and held back while a capture or debugging tool is attached.
//!
//! Each buffer of a class with a priority (weights and KV high, outputs middle, scratch
//! and generic lower; [`class_priority`]) stages a change when it is made. Changes are
//! applied in one batch at the next submit, never per allocation (one seed runtime made
//! ~880 residency commits per token that way). While `vkGetPhysicalDeviceToolProperties`
//! lists a tool (RenderDoc, Nsight) or the device runs with the validation layer, staged
//! changes are held back and
//! applied at the first submit after the tool has gone, so a tool's capture replay never
//! sees them change. Priorities reach the driver through
//! `VK_EXT_pageable_device_local_memory` when present (buffers of prioritised classes then
//! get their own memory object); elsewhere the batch is recorded but changes nothing.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use ash::vk;
use serde::Serialize;

use crate::class::ResourceClass;
use crate::device::DeviceShared;

/// Memory priority (0..=1) the runtime gives each class.
pub fn class_priority(class: ResourceClass) -> f32 {
    match class {
        ResourceClass::ReadOnlyWeight | ResourceClass::AppendOnlyKv => 1.0,
        ResourceClass::PersistentOutput => 0.75,
        ResourceClass::TokenScratch | ResourceClass::Generic => 0.5,
    }
}

/// Residency counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ResidencyStatus {
    /// Changes waiting for a submit boundary (or for a tool to go away).
    pub staged: u64,
    /// Changes applied so far.
    pub applied: u64,
    /// Batches applied (at most one per submit).
    pub commits: u64,
    /// Submit boundaries at which staged changes were held back because a tool was attached.
    pub held_back: u64,
    /// Whether a tool was attached at the last check.
    pub tool_attached: bool,
}

#[derive(Default)]
pub(crate) struct Residency {
    staged: Mutex<Vec<(vk::DeviceMemory, f32)>>,
    applied: AtomicU64,
    commits: AtomicU64,
    held_back: AtomicU64,
    tool_attached: std::sync::atomic::AtomicBool,
    /// Test hook: pretend no tool is attached.
    pub ignore_tools: std::sync::atomic::AtomicBool,
}

impl Residency {
    /// Stages a priority change for `memory` (applied at the next submit boundary).
    pub fn stage(&self, memory: vk::DeviceMemory, priority: f32) {
        if let Ok(mut s) = self.staged.lock() {
            s.push((memory, priority));
        }
    }

    /// Forgets staged changes of `memory` (it is being freed).
    pub fn forget(&self, memory: vk::DeviceMemory) {
        if let Ok(mut s) = self.staged.lock() {
            s.retain(|(m, _)| *m != memory);
        }
    }

    /// Whether a capture or debugging tool is attached now: one listed by the driver
    /// stack, or the validation layer this device enabled itself (layer 1.3.239 on
    /// lavapipe does not list itself).
    fn tool_attached(shared: &DeviceShared) -> bool {
        if shared.options.validation != crate::options::Validation::Off {
            return true;
        }
        // SAFETY: valid instance and physical device; the output slice has the reported length.
        unsafe {
            let Ok(n) = shared
                .instance
                .get_physical_device_tool_properties_len(shared.physical)
            else {
                return false;
            };
            if n == 0 {
                return false;
            }
            let mut tools = vec![vk::PhysicalDeviceToolProperties::default(); n];
            shared
                .instance
                .get_physical_device_tool_properties(shared.physical, &mut tools)
                .is_ok()
                && !tools.is_empty()
        }
    }

    /// Applies staged changes in one batch unless a tool is attached. Called once per
    /// submit boundary; costs one uncontended lock when nothing is staged.
    pub fn apply_at_submit(&self, shared: &DeviceShared) {
        let Ok(mut staged) = self.staged.lock() else {
            return;
        };
        if staged.is_empty() {
            return;
        }
        let attached = !self.ignore_tools.load(Relaxed) && Self::tool_attached(shared);
        let was_attached = self.tool_attached.swap(attached, Relaxed);
        if attached {
            if !was_attached {
                log::debug!(
                    "residency: {} priority change(s) held back while a capture/debug tool is attached",
                    staged.len()
                );
            }
            self.held_back.fetch_add(1, Relaxed);
            return;
        }
        if let Some(pageable) = &shared.ext.pageable {
            for &(memory, priority) in staged.iter() {
                // SAFETY: the memory object is alive (freed memory is forgotten first).
                unsafe {
                    (pageable.fp().set_device_memory_priority_ext)(
                        shared.raw.handle(),
                        memory,
                        priority,
                    )
                };
            }
        }
        self.applied.fetch_add(staged.len() as u64, Relaxed);
        self.commits.fetch_add(1, Relaxed);
        staged.clear();
    }

    pub fn status(&self) -> ResidencyStatus {
        ResidencyStatus {
            staged: self.staged.lock().map(|s| s.len() as u64).unwrap_or(0),
            applied: self.applied.load(Relaxed),
            commits: self.commits.load(Relaxed),
            held_back: self.held_back.load(Relaxed),
            tool_attached: self.tool_attached.load(Relaxed),
        }
    }
}

impl crate::device::Device {
    /// Residency counters (staged, applied, commits, held back while a tool was attached).
    pub fn residency(&self) -> ResidencyStatus {
        self.handle.shared.residency.status()
    }

    /// Test hook: treat tools as absent from now on, as if the capture tool went away.
    #[doc(hidden)]
    pub fn ignore_attached_tools(&self) {
        self.handle
            .shared
            .residency
            .ignore_tools
            .store(true, Relaxed);
    }
}
