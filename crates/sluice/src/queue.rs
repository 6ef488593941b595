//! Queue and sync: one timeline semaphore per queue, [`Ticket`]s, and waits that take a
//! fast path, spin a bounded number of times, then park in `vkWaitSemaphores`.
//!
//! Every submit signals the next timeline value and returns a `Ticket` for it. What the
//! submitted work still uses (its command buffer, buffers, query pools) is kept in a
//! pending list owned by that value and released when the value is reached, so nothing
//! is freed while the GPU may touch it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ash::vk;

use crate::device::DeviceShared;
use crate::error::{Error, Result, VkResultExt};
use crate::memory::BufferInner;

/// A command pool with its one primary command buffer, recycled after completion.
pub(crate) struct CommandSlot {
    pub pool: vk::CommandPool,
    pub cmd: vk::CommandBuffer,
}

/// Something queued work uses and must outlive it.
pub(crate) enum Retained {
    /// A buffer and whether the work writes it.
    Buffer(Arc<BufferInner>, bool),
    /// Any other object (query pools, staging buffers held by value).
    Other(#[allow(dead_code)] Arc<dyn Send + Sync>),
    /// A recorded stream and everything it binds.
    Replay(Arc<crate::graph::ReplayInner>),
}

struct Pending {
    value: u64,
    /// The recycled command slot (None for a replayed recording, which owns its own).
    slot: Option<CommandSlot>,
    _retained: Vec<Retained>,
}

#[derive(Default)]
struct QueueInner {
    pending: VecDeque<Pending>,
    free_slots: Vec<CommandSlot>,
}

/// The compute queue and its timeline.
pub(crate) struct QueueState {
    pub raw: vk::Queue,
    pub family: u32,
    pub timeline: vk::Semaphore,
    /// Highest value submitted.
    pub submitted: AtomicU64,
    /// Highest value known to be reached (a cache of the semaphore's counter).
    pub completed: AtomicU64,
    inner: Mutex<QueueInner>,
}

/// A point on a queue's timeline: the completion of one submit.
#[derive(Clone)]
pub struct Ticket {
    pub(crate) device: Arc<DeviceShared>,
    pub(crate) value: u64,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ticket({})", self.value)
    }
}

impl Ticket {
    /// The timeline value this ticket waits for.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// Whether the work has completed (never blocks).
    pub fn is_done(&self) -> Result<bool> {
        self.device.queue.reached(&self.device, self.value)
    }

    /// Blocks until the work completes, up to `Options::wait_timeout`.
    pub fn wait(&self) -> Result<()> {
        self.device
            .queue
            .wait_value(&self.device, self.value, self.device.options.wait_timeout)
    }

    /// Blocks until the work completes or `timeout` passes ([`Error::Timeout`]).
    pub fn wait_timeout(&self, timeout: Duration) -> Result<()> {
        self.device
            .queue
            .wait_value(&self.device, self.value, timeout)
    }
}

impl QueueState {
    pub(crate) fn new(device: &ash::Device, family: u32) -> Result<QueueState> {
        // SAFETY: valid device; the family was created with one queue.
        unsafe {
            let raw = device.get_device_queue(family, 0);
            let mut type_info = vk::SemaphoreTypeCreateInfo::default()
                .semaphore_type(vk::SemaphoreType::TIMELINE)
                .initial_value(0);
            let timeline = device
                .create_semaphore(
                    &vk::SemaphoreCreateInfo::default().push_next(&mut type_info),
                    None,
                )
                .vk("vkCreateSemaphore")?;
            Ok(QueueState {
                raw,
                family,
                timeline,
                submitted: AtomicU64::new(0),
                completed: AtomicU64::new(0),
                inner: Mutex::new(QueueInner::default()),
            })
        }
    }

    /// A command slot ready for recording (recycled when possible).
    pub(crate) fn acquire_slot(&self, device: &ash::Device) -> Result<CommandSlot> {
        if let Some(slot) = self.inner.lock().expect("queue poisoned").free_slots.pop() {
            return Ok(slot);
        }
        // SAFETY: valid device; the pool is used by one encoder at a time.
        unsafe {
            let pool = device
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default()
                        .queue_family_index(self.family)
                        .flags(vk::CommandPoolCreateFlags::TRANSIENT),
                    None,
                )
                .vk("vkCreateCommandPool")?;
            let cmd = match device.allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1),
            ) {
                Ok(c) => c[0],
                Err(e) => {
                    device.destroy_command_pool(pool, None);
                    return Err(Error::vk("vkAllocateCommandBuffers", e));
                }
            };
            Ok(CommandSlot { pool, cmd })
        }
    }

    /// Returns a slot that was never submitted (an encoder dropped without submit).
    pub(crate) fn release_unsubmitted(&self, device: &ash::Device, slot: CommandSlot) {
        // SAFETY: the slot's command buffer was never submitted, so nothing uses it.
        if unsafe { device.reset_command_pool(slot.pool, vk::CommandPoolResetFlags::empty()) }
            .is_ok()
        {
            self.inner
                .lock()
                .expect("queue poisoned")
                .free_slots
                .push(slot);
        } else {
            // SAFETY: as above; a pool that cannot be reset is destroyed instead.
            unsafe { device.destroy_command_pool(slot.pool, None) };
        }
    }

    /// Submits a finished command buffer; `retained` lives until it completes.
    pub(crate) fn submit(
        &self,
        shared: &DeviceShared,
        slot: CommandSlot,
        retained: Vec<Retained>,
    ) -> Result<u64> {
        let cmd = slot.cmd;
        self.submit_inner(shared, cmd, Some(slot), retained)
    }

    /// Resubmits a recorded command buffer kept alive by `replay`.
    pub(crate) fn submit_recorded(
        &self,
        shared: &DeviceShared,
        cmd: vk::CommandBuffer,
        replay: Retained,
    ) -> Result<u64> {
        self.submit_inner(shared, cmd, None, vec![replay])
    }

    fn submit_inner(
        &self,
        shared: &DeviceShared,
        cmd: vk::CommandBuffer,
        slot: Option<CommandSlot>,
        retained: Vec<Retained>,
    ) -> Result<u64> {
        shared.residency.apply_at_submit(shared);
        let mut inner = self.inner.lock().expect("queue poisoned");
        let value = self.submitted.load(Ordering::Relaxed) + 1;
        let cmd_infos = [vk::CommandBufferSubmitInfo::default().command_buffer(cmd)];
        let signals = [vk::SemaphoreSubmitInfo::default()
            .semaphore(self.timeline)
            .value(value)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
        let submit = vk::SubmitInfo2::default()
            .command_buffer_infos(&cmd_infos)
            .signal_semaphore_infos(&signals);
        // SAFETY: the queue is externally synchronised by `inner`'s lock; the command
        // buffer is in the executable state; the infos live across the call.
        let result = unsafe {
            shared
                .raw
                .queue_submit2(self.raw, &[submit], vk::Fence::null())
        };
        if let Err(e) = result {
            drop(inner);
            if let Some(slot) = slot {
                self.release_unsubmitted(&shared.raw, slot);
            }
            return Err(Error::vk("vkQueueSubmit2", e));
        }
        self.submitted.store(value, Ordering::Release);
        let note = |b: &BufferInner, wrote: bool| {
            if wrote {
                b.last_write.fetch_max(value, Ordering::AcqRel);
            } else {
                b.last_read.fetch_max(value, Ordering::AcqRel);
            }
        };
        for r in &retained {
            match r {
                Retained::Buffer(b, wrote) => note(b, *wrote),
                Retained::Replay(rp) => rp.buffers.iter().for_each(|(b, w)| note(b, *w)),
                Retained::Other(_) => {}
            }
        }
        inner.pending.push_back(Pending {
            value,
            slot,
            _retained: retained,
        });
        shared.counters.submits.fetch_add(1, Ordering::Relaxed);
        let completed = self.completed.load(Ordering::Acquire);
        self.reclaim_locked(&shared.raw, &mut inner, completed);
        Ok(value)
    }

    /// Whether `value` has been reached, asking the semaphore if the cache says no.
    pub(crate) fn reached(&self, shared: &DeviceShared, value: u64) -> Result<bool> {
        if value <= self.completed.load(Ordering::Acquire) {
            return Ok(true);
        }
        let now = self.poll(shared)?;
        Ok(value <= now)
    }

    /// Reads the semaphore counter, updates the cache, releases completed work.
    fn poll(&self, shared: &DeviceShared) -> Result<u64> {
        // SAFETY: valid device and semaphore.
        let now = unsafe { shared.raw.get_semaphore_counter_value(self.timeline) }
            .vk("vkGetSemaphoreCounterValue")?;
        self.note_completed(shared, now);
        Ok(now)
    }

    fn note_completed(&self, shared: &DeviceShared, now: u64) {
        let before = self.completed.fetch_max(now, Ordering::AcqRel);
        if now > before {
            if let Ok(mut inner) = self.inner.try_lock() {
                self.reclaim_locked(&shared.raw, &mut inner, now);
            }
        }
    }

    fn reclaim_locked(&self, device: &ash::Device, inner: &mut QueueInner, completed: u64) {
        while inner.pending.front().is_some_and(|p| p.value <= completed) {
            let p = inner.pending.pop_front().expect("checked");
            let Some(slot) = p.slot else { continue };
            // SAFETY: the work that used this pool has completed.
            if unsafe { device.reset_command_pool(slot.pool, vk::CommandPoolResetFlags::empty()) }
                .is_ok()
            {
                inner.free_slots.push(slot);
            } else {
                // SAFETY: as above.
                unsafe { device.destroy_command_pool(slot.pool, None) };
            }
        }
    }

    /// Waits until `value` is reached: fast path, bounded spin, then park.
    pub(crate) fn wait_value(
        &self,
        shared: &DeviceShared,
        value: u64,
        timeout: Duration,
    ) -> Result<()> {
        if value <= self.completed.load(Ordering::Acquire) {
            return Ok(());
        }
        if value > self.submitted.load(Ordering::Acquire) {
            return Err(Error::InvalidUse(format!(
                "wait for timeline value {value}, but only {} was submitted",
                self.submitted.load(Ordering::Acquire)
            )));
        }
        shared.counters.host_waits.fetch_add(1, Ordering::Relaxed);
        let opts = &shared.options;
        for i in 0..opts.wait_spin_pauses + opts.wait_spin_yields {
            if self.poll(shared)? >= value {
                return Ok(());
            }
            if i < opts.wait_spin_pauses {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let start = Instant::now();
        let semaphores = [self.timeline];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: valid device and semaphore; info lives across the call.
        match unsafe { shared.raw.wait_semaphores(&info, nanos) } {
            Ok(()) => {
                self.note_completed(shared, value);
                Ok(())
            }
            Err(vk::Result::TIMEOUT) => {
                let reached = self.poll(shared).unwrap_or(0);
                Err(Error::Timeout {
                    value,
                    reached,
                    waited: start.elapsed(),
                })
            }
            Err(e) => Err(Error::vk("vkWaitSemaphores", e)),
        }
    }

    /// Blocks up to `timeout` for `value` without spinning or counting a host wait (the
    /// async waiter's park); returns the value reached.
    pub(crate) fn park(&self, shared: &DeviceShared, value: u64, timeout: Duration) -> Result<u64> {
        let semaphores = [self.timeline];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: valid device and semaphore; info lives across the call.
        match unsafe { shared.raw.wait_semaphores(&info, nanos) } {
            Ok(()) | Err(vk::Result::TIMEOUT) => self.poll(shared),
            Err(e) => Err(Error::vk("vkWaitSemaphores", e)),
        }
    }

    /// Waits for everything submitted so far.
    pub(crate) fn synchronize(&self, shared: &DeviceShared) -> Result<()> {
        let last = self.submitted.load(Ordering::Acquire);
        self.wait_value(shared, last, shared.options.wait_timeout)
    }

    /// Waits for all work and releases everything pending (device handle drop).
    pub(crate) fn drain(&self, shared: &DeviceShared) {
        let _ = self.synchronize(shared);
        // SAFETY: valid device; after this no queued work uses the pending resources
        // (or the device is lost and nothing runs).
        let _ = unsafe { shared.raw.device_wait_idle() };
        let mut inner = self.inner.lock().expect("queue poisoned");
        self.reclaim_locked(&shared.raw, &mut inner, u64::MAX);
    }

    /// Destroys the semaphore and command pools (device drop).
    pub(crate) fn destroy(&self, device: &ash::Device) {
        let mut inner = self.inner.lock().expect("queue poisoned");
        // SAFETY: the device is idle; nothing uses these objects any more.
        unsafe {
            for p in inner.pending.drain(..) {
                if let Some(slot) = p.slot {
                    device.destroy_command_pool(slot.pool, None);
                }
            }
            for s in inner.free_slots.drain(..) {
                device.destroy_command_pool(s.pool, None);
            }
            device.destroy_semaphore(self.timeline, None);
        }
    }
}
