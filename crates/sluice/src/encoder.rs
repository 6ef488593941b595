//! Encoder: records dispatches with declared accesses into one command buffer, asks the
//! [`HazardTracker`] where a barrier is needed, and emits one global memory barrier only
//! there (`BarrierMode::Auto`), or between every two dispatches (`BarrierMode::Serial`).
//!
//! A kernel's bindings carry their access (read / read-write) in its [`KernelDesc`], so
//! the byte ranges bound to a dispatch *are* its declared reads and writes; model code
//! never places a barrier. Every command buffer that records work ends with one barrier that
//! makes its writes visible to later submits on the queue and to the host.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use ash::vk;

use crate::counters::Counters;
use crate::device::{Device, DeviceShared};
use crate::error::{Error, Result, VkResultExt};
use crate::hazard::{Access, AccessKind, HazardTracker, Placement};
use crate::kernel::{pod_bytes, BindingAccess, Pipeline, Pod};
use crate::memory::BufferSlice;
use crate::options::BarrierMode;
use crate::profile::TimestampQueries;
use crate::queue::{CommandSlot, Retained, Ticket};

const WRITE_STAGES: vk::PipelineStageFlags2 =
    vk::PipelineStageFlags2::from_raw(vk::PipelineStageFlags2::COMPUTE_SHADER.as_raw() | vk::PipelineStageFlags2::ALL_TRANSFER.as_raw());
const WRITE_ACCESS: vk::AccessFlags2 =
    vk::AccessFlags2::from_raw(vk::AccessFlags2::SHADER_STORAGE_WRITE.as_raw() | vk::AccessFlags2::TRANSFER_WRITE.as_raw());
const READ_WRITE_ACCESS: vk::AccessFlags2 = vk::AccessFlags2::from_raw(
    vk::AccessFlags2::SHADER_STORAGE_READ.as_raw()
        | vk::AccessFlags2::SHADER_STORAGE_WRITE.as_raw()
        | vk::AccessFlags2::TRANSFER_READ.as_raw()
        | vk::AccessFlags2::TRANSFER_WRITE.as_raw(),
);

/// Most storage-buffer bindings a kernel may have.
pub const MAX_BINDINGS: usize = 16;

/// Records work for one submit. Made by [`Device::encoder`], consumed by [`Encoder::submit`].
pub struct Encoder {
    device: Arc<DeviceShared>,
    slot: Option<CommandSlot>,
    tracker: HazardTracker,
    mode: BarrierMode,
    counters: Counters,
    retained: Vec<Retained>,
    bound: vk::Pipeline,
    ops: u64,
    reset_pools: Vec<vk::QueryPool>,
    accesses: Vec<Access>,
    /// Readbacks to hand the ticket to at submit.
    notify: Vec<Arc<OnceLock<Ticket>>>,
    /// Whether submit first flushes the device's deferred writes.
    flush_deferred: bool,
}

impl Device {
    /// A new encoder with the device's barrier mode.
    pub fn encoder(&self) -> Result<Encoder> {
        Encoder::new(&self.handle.shared)
    }

    /// Waits for everything submitted so far; returns at once when the queue is idle.
    pub fn synchronize(&self) -> Result<()> {
        self.handle.shared.queue.synchronize(&self.handle.shared)
    }

    /// A ticket for the most recent submit (value 0, always done, when nothing was submitted).
    pub fn last_ticket(&self) -> Ticket {
        Ticket { device: self.handle.shared.clone(), value: self.handle.shared.queue.submitted.load(Ordering::Acquire) }
    }
}

impl Encoder {
    pub(crate) fn new(device: &Arc<DeviceShared>) -> Result<Encoder> {
        let mut e = Self::new_without_deferred(device)?;
        e.flush_deferred = true;
        Ok(e)
    }

    /// An encoder whose submit does not flush deferred writes (the flush itself).
    pub(crate) fn new_without_deferred(device: &Arc<DeviceShared>) -> Result<Encoder> {
        let slot = device.queue.acquire_slot(&device.raw)?;
        // SAFETY: the slot's pool was reset (or is new), so the buffer is in the initial state.
        let begun = unsafe {
            device.raw.begin_command_buffer(
                slot.cmd,
                &vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
        };
        if let Err(e) = begun {
            device.queue.release_unsubmitted(&device.raw, slot);
            return Err(Error::vk("vkBeginCommandBuffer", e));
        }
        Ok(Encoder {
            device: device.clone(),
            slot: Some(slot),
            tracker: HazardTracker::new(),
            mode: device.options.barriers,
            counters: Counters { command_buffers: 1, ..Counters::default() },
            retained: Vec::new(),
            bound: vk::Pipeline::null(),
            ops: 0,
            reset_pools: Vec::new(),
            accesses: Vec::new(),
            notify: Vec::new(),
            flush_deferred: false,
        })
    }

    /// Overrides the barrier mode for this encoder.
    pub fn set_barrier_mode(&mut self, mode: BarrierMode) {
        self.mode = mode;
    }

    /// What this encoder has recorded so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    pub(crate) fn device(&self) -> &Arc<DeviceShared> {
        &self.device
    }

    pub(crate) fn on_submit(&mut self, ticket: Arc<OnceLock<Ticket>>) {
        self.notify.push(ticket);
    }

    fn cmd(&self) -> vk::CommandBuffer {
        self.slot.as_ref().expect("encoder slot present until submit").cmd
    }

    fn global_barrier(&mut self) {
        let barrier = [vk::MemoryBarrier2::default()
            .src_stage_mask(WRITE_STAGES)
            .src_access_mask(WRITE_ACCESS)
            .dst_stage_mask(WRITE_STAGES)
            .dst_access_mask(READ_WRITE_ACCESS)];
        // SAFETY: the command buffer is recording; the dependency info lives across the call.
        unsafe {
            self.device.raw.cmd_pipeline_barrier2(self.cmd(), &vk::DependencyInfo::default().memory_barriers(&barrier))
        };
    }

    /// Places the next op (dispatch or copy) whose accesses are in `self.accesses`.
    fn place(&mut self, what: &str) -> Result<()> {
        let placement = match self.mode {
            BarrierMode::Auto => self.tracker.place(what, &self.accesses)?,
            BarrierMode::Serial => {
                self.tracker.barrier();
                self.tracker.place(what, &self.accesses)?;
                Placement::BarrierBefore
            }
        };
        if self.ops > 0 {
            if placement == Placement::BarrierBefore {
                self.global_barrier();
                self.counters.barriers += 1;
            } else {
                self.counters.barriers_elided += 1;
            }
        }
        self.ops += 1;
        Ok(())
    }

    fn retain(&mut self, slice: &BufferSlice<'_>, write: bool) {
        if let Some(Retained::Buffer(b, w)) =
            self.retained.iter_mut().rev().take(8).find(|r| matches!(r, Retained::Buffer(b, _) if b.id == slice.buffer.inner.id))
        {
            let _ = b;
            *w |= write;
            return;
        }
        self.retained.push(Retained::Buffer(slice.buffer.inner.clone(), write));
    }

    fn check_slice(&self, slice: &BufferSlice<'_>) -> Result<()> {
        if !Arc::ptr_eq(&slice.buffer.inner.device, &self.device) {
            return Err(Error::InvalidUse(format!("buffer {:?} belongs to another device", slice.buffer.name())));
        }
        slice.buffer.check_range(slice.offset, slice.len)
    }

    /// Records a dispatch of `pipeline` over `groups` workgroups. `bindings[i]` is bound
    /// to binding `i` and is declared read or written as the kernel's descriptor says.
    pub fn dispatch<P: Pod>(
        &mut self,
        pipeline: &Pipeline,
        groups: [u32; 3],
        bindings: &[BufferSlice<'_>],
        push: &P,
    ) -> Result<()> {
        let desc = &pipeline.desc;
        if pipeline.device_id != self.device.id {
            return Err(Error::InvalidUse(format!("pipeline {:?} belongs to another device", desc.name)));
        }
        if bindings.len() != desc.bindings.len() {
            return Err(Error::InvalidUse(format!(
                "kernel {:?} has {} bindings, dispatch gave {}",
                desc.name,
                desc.bindings.len(),
                bindings.len()
            )));
        }
        let push = pod_bytes(push);
        if push.len() != desc.push_constant_bytes as usize {
            return Err(Error::InvalidUse(format!(
                "kernel {:?} takes {} push-constant bytes, dispatch gave {}",
                desc.name,
                desc.push_constant_bytes,
                push.len()
            )));
        }
        let max = self.device.info.max_workgroup_count;
        if groups.iter().zip(max).any(|(g, m)| *g == 0 || *g > m) {
            return Err(Error::InvalidUse(format!(
                "kernel {:?}: workgroup count {groups:?} must be within 1..={max:?}",
                desc.name
            )));
        }
        let align = self.device.info.storage_offset_alignment;
        self.accesses.clear();
        for (i, (slice, access)) in bindings.iter().zip(desc.bindings).enumerate() {
            self.check_slice(slice)?;
            if slice.offset % align != 0 || slice.len == 0 {
                return Err(Error::InvalidUse(format!(
                    "kernel {:?} binding {i}: offset {} must be a multiple of {align} and length {} non-zero",
                    desc.name, slice.offset, slice.len
                )));
            }
            let b = &slice.buffer.inner;
            let kind = match access {
                BindingAccess::Read => AccessKind::Read,
                BindingAccess::ReadWrite => AccessKind::Write,
            };
            self.accesses.push(Access { buffer: b.id, class: b.class, offset: slice.offset, len: slice.len, kind });
        }
        self.place(desc.name)?;
        let cmd = self.cmd();
        if bindings.len() > MAX_BINDINGS {
            return Err(Error::InvalidUse(format!("kernel {:?} has more than {MAX_BINDINGS} bindings", desc.name)));
        }
        let mut infos = [[vk::DescriptorBufferInfo::default()]; MAX_BINDINGS];
        for (info, s) in infos.iter_mut().zip(bindings) {
            info[0] = vk::DescriptorBufferInfo::default().buffer(s.buffer.inner.raw).offset(s.offset).range(s.len);
        }
        let mut writes = [vk::WriteDescriptorSet::default(); MAX_BINDINGS];
        for (i, (w, info)) in writes.iter_mut().zip(infos.iter()).take(bindings.len()).enumerate() {
            *w = vk::WriteDescriptorSet::default()
                .dst_binding(i as u32)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(info);
        }
        let writes = &writes[..bindings.len()];
        // SAFETY: the command buffer is recording; the pipeline, layout and buffers are
        // alive (the pipeline is cached by the device, buffers are retained below until
        // the submit completes); sizes were checked above.
        unsafe {
            let dev = &self.device.raw;
            if self.bound != pipeline.pipeline {
                dev.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline.pipeline);
                self.bound = pipeline.pipeline;
            }
            if !writes.is_empty() {
                self.device.ext.push_descriptor.cmd_push_descriptor_set(
                    cmd,
                    vk::PipelineBindPoint::COMPUTE,
                    pipeline.layout,
                    0,
                    writes,
                );
            }
            if !push.is_empty() {
                dev.cmd_push_constants(cmd, pipeline.layout, vk::ShaderStageFlags::COMPUTE, 0, push);
            }
            dev.cmd_dispatch(cmd, groups[0], groups[1], groups[2]);
        }
        for (slice, access) in bindings.iter().zip(desc.bindings) {
            let w = *access == BindingAccess::ReadWrite;
            self.retain(slice, w);
        }
        self.counters.dispatches += 1;
        Ok(())
    }

    /// Records a copy of `src` into `dst` (equal lengths), ordered like a dispatch.
    pub fn copy(&mut self, src: BufferSlice<'_>, dst: BufferSlice<'_>) -> Result<()> {
        self.check_slice(&src)?;
        self.check_slice(&dst)?;
        if src.len != dst.len || src.len == 0 {
            return Err(Error::InvalidUse(format!("copy of {} bytes into {} bytes", src.len, dst.len)));
        }
        let (s, d) = (&src.buffer.inner, &dst.buffer.inner);
        self.accesses.clear();
        self.accesses.push(Access { buffer: s.id, class: s.class, offset: src.offset, len: src.len, kind: AccessKind::Read });
        self.accesses.push(Access { buffer: d.id, class: d.class, offset: dst.offset, len: dst.len, kind: AccessKind::Write });
        // A copy is the upload path of weights: it may write a ReadOnlyWeight.
        if d.class.is_gpu_read_only() {
            self.accesses.pop();
        }
        self.place("copy")?;
        let region = [vk::BufferCopy { src_offset: src.offset, dst_offset: dst.offset, size: src.len }];
        // SAFETY: recording; both buffers are alive and retained; ranges checked.
        unsafe { self.device.raw.cmd_copy_buffer(self.cmd(), s.raw, d.raw, &region) };
        self.retain(&src, false);
        self.retain(&dst, true);
        self.counters.copies += 1;
        Ok(())
    }

    /// Writes a GPU timestamp into query `index` of `queries` once all earlier work in
    /// this command buffer has finished.
    pub fn write_timestamp(&mut self, queries: &TimestampQueries, index: u32) -> Result<()> {
        let pool = queries.inner.pool;
        if !Arc::ptr_eq(&queries.inner.device, &self.device) || index >= queries.inner.count {
            return Err(Error::InvalidUse(format!("timestamp index {index} of {} or foreign pool", queries.inner.count)));
        }
        let cmd = self.cmd();
        // SAFETY: recording; the pool is alive and retained until completion.
        unsafe {
            if !self.reset_pools.contains(&pool) {
                self.device.raw.cmd_reset_query_pool(cmd, pool, 0, queries.inner.count);
                self.reset_pools.push(pool);
            }
            self.device.raw.cmd_write_timestamp2(cmd, vk::PipelineStageFlags2::ALL_COMMANDS, pool, index);
        }
        self.retained.push(Retained::Other(queries.inner.clone()));
        Ok(())
    }

    /// Ends recording and submits; returns the ticket of this submit.
    pub fn submit(mut self) -> Result<Ticket> {
        let slot = self.slot.take().expect("encoder slot present until submit");
        let dev = &self.device.raw;
        // One barrier at every submit boundary that recorded anything: its second scope
        // covers later submits and the host, so cross-submit RAW/WAR/WAW and host reads
        // need nothing else.
        if self.ops > 0 {
            let barrier = [vk::MemoryBarrier2::default()
                .src_stage_mask(WRITE_STAGES)
                .src_access_mask(WRITE_ACCESS)
                .dst_stage_mask(WRITE_STAGES | vk::PipelineStageFlags2::HOST)
                .dst_access_mask(READ_WRITE_ACCESS | vk::AccessFlags2::HOST_READ)];
            // SAFETY: recording; the dependency info lives across the call.
            unsafe { dev.cmd_pipeline_barrier2(slot.cmd, &vk::DependencyInfo::default().memory_barriers(&barrier)) };
            self.counters.barriers += 1;
        }
        // SAFETY: the command buffer is recording.
        if let Err(e) = unsafe { dev.end_command_buffer(slot.cmd) } {
            self.device.queue.release_unsubmitted(dev, slot);
            return Err(Error::vk("vkEndCommandBuffer", e));
        }
        if self.flush_deferred {
            if let Err(e) = crate::transfer::flush_deferred(&self.device) {
                self.device.queue.release_unsubmitted(dev, slot);
                return Err(e);
            }
        }
        self.device.counters.add_recorded(&self.counters);
        let retained = std::mem::take(&mut self.retained);
        let value = self.device.queue.submit(&self.device, slot, retained)?;
        let ticket = Ticket { device: self.device.clone(), value };
        for n in self.notify.drain(..) {
            let _ = n.set(ticket.clone());
        }
        Ok(ticket)
    }
}

impl Drop for Encoder {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            // SAFETY: never submitted; ending is required before the pool reset.
            let _ = unsafe { self.device.raw.end_command_buffer(slot.cmd) }.vk("vkEndCommandBuffer");
            self.device.queue.release_unsubmitted(&self.device.raw, slot);
        }
    }
}
