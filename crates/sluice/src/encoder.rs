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

const WRITE_STAGES: vk::PipelineStageFlags2 = vk::PipelineStageFlags2::from_raw(
    vk::PipelineStageFlags2::COMPUTE_SHADER.as_raw()
        | vk::PipelineStageFlags2::ALL_TRANSFER.as_raw(),
);
const WRITE_ACCESS: vk::AccessFlags2 = vk::AccessFlags2::from_raw(
    vk::AccessFlags2::SHADER_STORAGE_WRITE.as_raw() | vk::AccessFlags2::TRANSFER_WRITE.as_raw(),
);
const READ_WRITE_ACCESS: vk::AccessFlags2 = vk::AccessFlags2::from_raw(
    vk::AccessFlags2::SHADER_STORAGE_READ.as_raw()
        | vk::AccessFlags2::SHADER_STORAGE_WRITE.as_raw()
        | vk::AccessFlags2::TRANSFER_READ.as_raw()
        | vk::AccessFlags2::TRANSFER_WRITE.as_raw(),
);

/// Most storage-buffer bindings a kernel may have (32: the least `maxPushDescriptors`
/// Vulkan guarantees with VK_KHR_push_descriptor).
pub const MAX_BINDINGS: usize = 32;

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
    /// Capture mode: dispatches become graph nodes instead of commands.
    capture: Option<Vec<crate::graph::Node>>,
    /// Label given to the following dispatches (op kind, layer).
    label: Arc<str>,
}

impl Device {
    /// An encoder in capture mode: the same `dispatch` calls build a [`crate::graph::Graph`].
    pub fn capture(&self) -> Encoder {
        Encoder::new_capture(&self.handle.shared)
    }

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
        Ticket {
            device: self.handle.shared.clone(),
            value: self.handle.shared.queue.submitted.load(Ordering::Acquire),
        }
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
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
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
            counters: Counters {
                command_buffers: 1,
                ..Counters::default()
            },
            retained: Vec::new(),
            bound: vk::Pipeline::null(),
            ops: 0,
            reset_pools: Vec::new(),
            accesses: Vec::new(),
            notify: Vec::new(),
            flush_deferred: false,
            capture: None,
            label: Arc::from(""),
        })
    }

    /// An encoder in capture mode: it records graph nodes, not commands.
    pub(crate) fn new_capture(device: &Arc<DeviceShared>) -> Encoder {
        Encoder {
            device: device.clone(),
            slot: None,
            tracker: HazardTracker::new(),
            mode: device.options.barriers,
            counters: Counters::default(),
            retained: Vec::new(),
            bound: vk::Pipeline::null(),
            ops: 0,
            reset_pools: Vec::new(),
            accesses: Vec::new(),
            notify: Vec::new(),
            flush_deferred: false,
            capture: Some(Vec::new()),
            label: Arc::from(""),
        }
    }

    /// Labels the dispatches that follow (e.g. "attn.q L3"); shown in graph dumps,
    /// profiles and capture tools. An empty label means the kernel name.
    pub fn set_label(&mut self, label: &str) {
        if &*self.label != label {
            self.label = Arc::from(label);
        }
    }

    /// Whether this encoder captures a graph instead of recording commands.
    pub fn is_capturing(&self) -> bool {
        self.capture.is_some()
    }

    /// Ends a capture and returns the captured graph (unoptimized: captured order,
    /// in-order barriers).
    pub fn finish_capture(mut self) -> Result<crate::graph::Graph> {
        let nodes = self
            .capture
            .take()
            .ok_or_else(|| Error::InvalidUse("finish_capture on a recording encoder".into()))?;
        Ok(crate::graph::Graph::new(self.device.clone(), nodes))
    }

    fn not_in_capture(&self, what: &str) -> Result<()> {
        if self.capture.is_some() {
            return Err(Error::InvalidUse(format!(
                "{what} cannot be captured into a graph"
            )));
        }
        Ok(())
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
        self.slot
            .as_ref()
            .expect("encoder slot present until submit")
            .cmd
    }

    fn global_barrier(&mut self) {
        record_global_barrier(&self.device.raw, self.cmd());
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
        if let Some(Retained::Buffer(b, w)) = self
            .retained
            .iter_mut()
            .rev()
            .take(8)
            .find(|r| matches!(r, Retained::Buffer(b, _) if b.id == slice.buffer.inner.id))
        {
            let _ = b;
            *w |= write;
            return;
        }
        self.retained
            .push(Retained::Buffer(slice.buffer.inner.clone(), write));
    }

    fn check_slice(&self, slice: &BufferSlice<'_>) -> Result<()> {
        if !Arc::ptr_eq(&slice.buffer.inner.device, &self.device) {
            return Err(Error::InvalidUse(format!(
                "buffer {:?} belongs to another device",
                slice.buffer.name()
            )));
        }
        slice.buffer.check_range(slice.offset, slice.len)
    }

    /// Records a dispatch of `pipeline` over `groups` workgroups. `bindings[i]` is bound
    /// to binding `i` and is declared read or written as the kernel's descriptor says.
    pub fn dispatch<P: Pod>(
        &mut self,
        pipeline: &Arc<Pipeline>,
        groups: [u32; 3],
        bindings: &[BufferSlice<'_>],
        push: &P,
    ) -> Result<()> {
        let desc = &pipeline.desc;
        if pipeline.device_id != self.device.id {
            return Err(Error::InvalidUse(format!(
                "pipeline {:?} belongs to another device",
                desc.name
            )));
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
        let max_range = self.device.info.max_storage_range;
        self.accesses.clear();
        for (i, (slice, access)) in bindings.iter().zip(desc.bindings).enumerate() {
            self.check_slice(slice)?;
            if slice.offset % align != 0 || slice.len == 0 {
                return Err(Error::InvalidUse(format!(
                    "kernel {:?} binding {i}: offset {} must be a multiple of {align} and length {} non-zero",
                    desc.name, slice.offset, slice.len
                )));
            }
            if slice.len > max_range {
                return Err(Error::InvalidUse(format!(
                    "kernel {:?} binding {i}: {} bytes of buffer {:?}, but {} binds at most {max_range} bytes at once ({})",
                    desc.name,
                    slice.len,
                    slice.buffer.name(),
                    self.device.info.name,
                    self.device.binding_limit_source()
                )));
            }
            let b = &slice.buffer.inner;
            let kind = match access {
                BindingAccess::Read => AccessKind::Read,
                BindingAccess::ReadWrite => AccessKind::Write,
            };
            self.accesses.push(Access {
                buffer: b.id,
                class: b.class,
                offset: slice.offset,
                len: slice.len,
                kind,
            });
        }
        if let Some(nodes) = &mut self.capture {
            // Validates (e.g. writes to weights) like a recorded dispatch would.
            self.tracker.place(desc.name, &self.accesses)?;
            nodes.push(crate::graph::Node {
                label: if self.label.is_empty() {
                    Arc::from(desc.name)
                } else {
                    self.label.clone()
                },
                pipeline: pipeline.clone(),
                groups,
                bindings: bindings
                    .iter()
                    .map(|b| (b.buffer.clone(), b.offset, b.len))
                    .collect(),
                push: push.to_vec(),
                accesses: self.accesses.clone(),
            });
            self.counters.dispatches += 1;
            return Ok(());
        }
        self.place(desc.name)?;
        let cmd = self.cmd();
        let raw = bindings
            .iter()
            .map(|b| (b.buffer.inner.raw, b.offset, b.len));
        record_dispatch_raw(
            &self.device,
            cmd,
            &mut self.bound,
            pipeline,
            groups,
            raw,
            push,
        )?;
        for (slice, access) in bindings.iter().zip(desc.bindings) {
            let w = *access == BindingAccess::ReadWrite;
            self.retain(slice, w);
        }
        self.counters.dispatches += 1;
        Ok(())
    }

    /// Records a copy of `src` into `dst` (equal lengths), ordered like a dispatch.
    pub fn copy(&mut self, src: BufferSlice<'_>, dst: BufferSlice<'_>) -> Result<()> {
        self.not_in_capture("a copy")?;
        self.check_slice(&src)?;
        self.check_slice(&dst)?;
        if src.len != dst.len || src.len == 0 {
            return Err(Error::InvalidUse(format!(
                "copy of {} bytes into {} bytes",
                src.len, dst.len
            )));
        }
        let (s, d) = (&src.buffer.inner, &dst.buffer.inner);
        self.accesses.clear();
        self.accesses.push(Access {
            buffer: s.id,
            class: s.class,
            offset: src.offset,
            len: src.len,
            kind: AccessKind::Read,
        });
        self.accesses.push(Access {
            buffer: d.id,
            class: d.class,
            offset: dst.offset,
            len: dst.len,
            kind: AccessKind::Write,
        });
        // A copy is the upload path of weights: it may write a ReadOnlyWeight.
        if d.class.is_gpu_read_only() {
            self.accesses.pop();
        }
        self.place("copy")?;
        let region = [vk::BufferCopy {
            src_offset: src.offset,
            dst_offset: dst.offset,
            size: src.len,
        }];
        // SAFETY: recording; both buffers are alive and retained; ranges checked.
        unsafe {
            self.device
                .raw
                .cmd_copy_buffer(self.cmd(), s.raw, d.raw, &region)
        };
        self.retain(&src, false);
        self.retain(&dst, true);
        self.counters.copies += 1;
        Ok(())
    }

    /// Writes a GPU timestamp into query `index` of `queries` once all earlier work in
    /// this command buffer has finished.
    pub fn write_timestamp(&mut self, queries: &TimestampQueries, index: u32) -> Result<()> {
        self.not_in_capture("a timestamp")?;
        let pool = queries.inner.pool;
        if !Arc::ptr_eq(&queries.inner.device, &self.device) || index >= queries.inner.count {
            return Err(Error::InvalidUse(format!(
                "timestamp index {index} of {} or foreign pool",
                queries.inner.count
            )));
        }
        let cmd = self.cmd();
        // SAFETY: recording; the pool is alive and retained until completion.
        unsafe {
            if !self.reset_pools.contains(&pool) {
                self.device
                    .raw
                    .cmd_reset_query_pool(cmd, pool, 0, queries.inner.count);
                self.reset_pools.push(pool);
            }
            self.device.raw.cmd_write_timestamp2(
                cmd,
                vk::PipelineStageFlags2::ALL_COMMANDS,
                pool,
                index,
            );
        }
        self.counters.timestamp_queries += 1;
        self.retained.push(Retained::Other(queries.inner.clone()));
        Ok(())
    }

    /// Ends recording and submits; returns the ticket of this submit.
    pub fn submit(mut self) -> Result<Ticket> {
        self.not_in_capture("submit")?;
        let slot = self.slot.take().expect("encoder slot present until submit");
        let dev = &self.device.raw;
        // One barrier at every submit boundary that recorded anything: its second scope
        // covers later submits and the host, so cross-submit RAW/WAR/WAW and host reads
        // need nothing else.
        if self.ops > 0 {
            record_submit_barrier(dev, slot.cmd);
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
        let ticket = Ticket {
            device: self.device.clone(),
            value,
        };
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
            let _ =
                unsafe { self.device.raw.end_command_buffer(slot.cmd) }.vk("vkEndCommandBuffer");
            self.device
                .queue
                .release_unsubmitted(&self.device.raw, slot);
        }
    }
}

/// Records the dataflow barrier: compute/transfer writes before compute/transfer reads
/// and writes.
pub(crate) fn record_global_barrier(raw: &ash::Device, cmd: vk::CommandBuffer) {
    let barrier = [vk::MemoryBarrier2::default()
        .src_stage_mask(WRITE_STAGES)
        .src_access_mask(WRITE_ACCESS)
        .dst_stage_mask(WRITE_STAGES)
        .dst_access_mask(READ_WRITE_ACCESS)];
    // SAFETY: the caller's command buffer is recording; the info lives across the call.
    unsafe {
        raw.cmd_pipeline_barrier2(
            cmd,
            &vk::DependencyInfo::default().memory_barriers(&barrier),
        )
    };
}

/// Records the submit-boundary barrier: all work before it, before later submits' work
/// and host reads.
pub(crate) fn record_submit_barrier(raw: &ash::Device, cmd: vk::CommandBuffer) {
    let barrier = [vk::MemoryBarrier2::default()
        .src_stage_mask(WRITE_STAGES)
        .src_access_mask(WRITE_ACCESS)
        .dst_stage_mask(WRITE_STAGES | vk::PipelineStageFlags2::HOST)
        .dst_access_mask(READ_WRITE_ACCESS | vk::AccessFlags2::HOST_READ)];
    // SAFETY: the caller's command buffer is recording; the info lives across the call.
    unsafe {
        raw.cmd_pipeline_barrier2(
            cmd,
            &vk::DependencyInfo::default().memory_barriers(&barrier),
        )
    };
}

/// Records one dispatch of a graph node.
pub(crate) fn record_dispatch(
    device: &DeviceShared,
    cmd: vk::CommandBuffer,
    bound: &mut vk::Pipeline,
    pipeline: &Pipeline,
    groups: [u32; 3],
    bindings: &[(crate::memory::Buffer, u64, u64)],
    push: &[u8],
) -> Result<()> {
    let raw = bindings.iter().map(|(b, o, l)| (b.inner.raw, *o, *l));
    record_dispatch_raw(device, cmd, bound, pipeline, groups, raw, push)
}

/// Binds (if needed), pushes descriptors and constants, and dispatches. Callers have
/// validated the bindings and keep the buffers alive until the work completes.
fn record_dispatch_raw(
    device: &DeviceShared,
    cmd: vk::CommandBuffer,
    bound: &mut vk::Pipeline,
    pipeline: &Pipeline,
    groups: [u32; 3],
    bindings: impl ExactSizeIterator<Item = (vk::Buffer, u64, u64)>,
    push: &[u8],
) -> Result<()> {
    let count = bindings.len();
    if count > MAX_BINDINGS {
        return Err(Error::InvalidUse(format!(
            "kernel {:?} has more than {MAX_BINDINGS} bindings",
            pipeline.desc.name
        )));
    }
    let mut infos = [[vk::DescriptorBufferInfo::default()]; MAX_BINDINGS];
    for (info, (buffer, offset, len)) in infos.iter_mut().zip(bindings) {
        info[0] = vk::DescriptorBufferInfo::default()
            .buffer(buffer)
            .offset(offset)
            .range(len);
    }
    let mut writes = [vk::WriteDescriptorSet::default(); MAX_BINDINGS];
    for (i, (w, info)) in writes.iter_mut().zip(infos.iter()).take(count).enumerate() {
        *w = vk::WriteDescriptorSet::default()
            .dst_binding(i as u32)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(info);
    }
    let writes = &writes[..count];
    // SAFETY: the command buffer is recording; pipeline and layout are alive (cached by
    // the device); the buffers are kept alive by the caller until the work completes.
    unsafe {
        let dev = &device.raw;
        if *bound != pipeline.pipeline {
            dev.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline.pipeline);
            *bound = pipeline.pipeline;
        }
        if !writes.is_empty() {
            device.ext.push_descriptor.cmd_push_descriptor_set(
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
    Ok(())
}
