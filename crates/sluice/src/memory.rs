//! Memory: buffers with a [`ResourceClass`], allocated through gpu-allocator, and host
//! access that waits only for the tickets that matter.
//!
//! Placement: on a UMA device (and lavapipe) every buffer is host-visible. On a discrete
//! GPU with resizable BAR (a large device-local, host-visible heap, as on the H100),
//! weights, outputs and generic buffers live there: uploads and host reads go through the
//! mapping, so reading a weight never queues behind GPU work. KV cache and scratch stay in
//! plain device-local memory (staging copies when the host touches them). Without
//! resizable BAR, weights are device-local too and reached through staging copies.
//!
//! Host access rules (DESIGN.md rule 2 and 4): a host read waits for the buffer's last
//! GPU writer only; a host write waits for its last GPU reader and writer; a
//! `ReadOnlyWeight` is never written by the GPU, so reading it never waits after upload.

use std::ops::{Bound, RangeBounds};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};
use gpu_allocator::MemoryLocation;

use crate::class::ResourceClass;
use crate::device::{Device, DeviceShared};
use crate::encoder::Encoder;
use crate::error::{Error, Result, VkResultExt};
use crate::kernel::Pod;

/// A GPU buffer. Clones share the same memory; it is freed when the last clone and the
/// last queued work using it are gone.
#[derive(Clone)]
pub struct Buffer {
    pub(crate) inner: Arc<BufferInner>,
}

pub(crate) struct MappedPtr(pub NonNull<u8>);
// SAFETY: the pointer is to device memory mapped for the allocation's lifetime; the
// runtime only copies through it under the ticket rules above.
unsafe impl Send for MappedPtr {}
// SAFETY: as above.
unsafe impl Sync for MappedPtr {}

pub(crate) struct BufferInner {
    pub device: Arc<DeviceShared>,
    pub id: u64,
    pub raw: vk::Buffer,
    pub size: u64,
    pub class: ResourceClass,
    pub name: String,
    pub mapped: Option<MappedPtr>,
    allocation: Mutex<Option<Allocation>>,
    /// Timeline value of the last submit that writes this buffer (0: none).
    pub last_write: AtomicU64,
    /// Timeline value of the last submit that reads this buffer (0: none).
    pub last_read: AtomicU64,
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        // SAFETY: the last reference is gone, so no recorded or queued work uses the
        // buffer (queued work holds a reference until its ticket completes).
        unsafe { self.device.raw.destroy_buffer(self.raw, None) };
        if let Some(a) = self.allocation.get_mut().ok().and_then(|a| a.take()) {
            // SAFETY: reading the handle only.
            self.device.residency.forget(unsafe { a.memory() });
            if let Ok(mut alloc) = self.device.allocator.lock() {
                let _ = alloc.free(a);
            }
        }
    }
}

/// A byte range of a buffer, as bound to a kernel or copied.
#[derive(Clone, Copy)]
pub struct BufferSlice<'a> {
    pub(crate) buffer: &'a Buffer,
    /// Start in bytes.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl<'a> From<&'a Buffer> for BufferSlice<'a> {
    fn from(b: &'a Buffer) -> Self {
        BufferSlice {
            buffer: b,
            offset: 0,
            len: b.size(),
        }
    }
}

impl<'a> BufferSlice<'a> {
    /// The buffer this slice is part of.
    pub fn buffer(&self) -> &'a Buffer {
        self.buffer
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Buffer(#{} {:?} {:?}, {} bytes)",
            self.inner.id, self.inner.name, self.inner.class, self.inner.size
        )
    }
}

fn location_for(class: ResourceClass, uma: bool, resizable_bar: bool) -> MemoryLocation {
    if uma {
        return MemoryLocation::CpuToGpu;
    }
    match class {
        ResourceClass::ReadOnlyWeight if resizable_bar => MemoryLocation::CpuToGpu,
        ResourceClass::ReadOnlyWeight
        | ResourceClass::AppendOnlyKv
        | ResourceClass::TokenScratch => MemoryLocation::GpuOnly,
        ResourceClass::PersistentOutput | ResourceClass::Generic => MemoryLocation::CpuToGpu,
    }
}

impl Device {
    /// Makes a buffer of `size` bytes (> 0) for `class`. `name` shows in errors and tools.
    pub fn create_buffer(&self, name: &str, size: u64, class: ResourceClass) -> Result<Buffer> {
        create_buffer_at(
            &self.handle.shared,
            name,
            size,
            class,
            location_for(
                class,
                self.handle.shared.info.uma,
                self.handle.shared.info.resizable_bar,
            ),
        )
    }

    /// Bytes currently allocated from the device by the allocator.
    pub fn allocated_bytes(&self) -> u64 {
        self.handle
            .shared
            .allocator
            .lock()
            .map(|a| a.generate_report().total_allocated_bytes)
            .unwrap_or(0)
    }
}

const STAGING_NAME: &str = "staging";

/// A host-visible buffer for staging copies.
pub(crate) fn create_staging(
    shared: &Arc<DeviceShared>,
    size: u64,
    readback: bool,
) -> Result<Buffer> {
    let loc = if readback {
        MemoryLocation::GpuToCpu
    } else {
        MemoryLocation::CpuToGpu
    };
    create_buffer_at(shared, STAGING_NAME, size, ResourceClass::Generic, loc)
}

/// Fills an out-of-memory error from a Vulkan call with the real request and the
/// device-local heap's budget and usage.
fn with_request(e: Error, shared: &DeviceShared, name: &str, size: u64) -> Error {
    match e {
        Error::OutOfDeviceMemory { what, .. } => {
            let heaps = shared.heaps();
            let heap = heaps.iter().find(|h| h.device_local).or(heaps.first());
            Error::OutOfDeviceMemory {
                requested: size,
                what: format!("{name} ({what})"),
                budget: heap.map(|h| h.budget.unwrap_or(h.size)).unwrap_or(0),
                in_use: heap.and_then(|h| h.usage).unwrap_or(0),
            }
        }
        other => other,
    }
}

fn create_buffer_at(
    shared: &Arc<DeviceShared>,
    name: &str,
    size: u64,
    class: ResourceClass,
    location: MemoryLocation,
) -> Result<Buffer> {
    if size == 0 {
        return Err(Error::InvalidUse(format!("buffer {name:?} of size 0")));
    }
    let raw_dev = &shared.raw;
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::TRANSFER_SRC
                | vk::BufferUsageFlags::TRANSFER_DST
                | vk::BufferUsageFlags::INDIRECT_BUFFER,
        )
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: valid device and create info.
    let raw = unsafe { raw_dev.create_buffer(&info, None) }
        .vk("vkCreateBuffer")
        .map_err(|e| with_request(e, shared, name, size))?;
    // SAFETY: raw is a live buffer of this device.
    let requirements = unsafe { raw_dev.get_buffer_memory_requirements(raw) };
    // With driver-visible priorities, prioritised classes get their own memory object
    // so a priority applies to them alone.
    let dedicated = shared.ext.pageable.is_some() && name != STAGING_NAME;
    let allocated = shared
        .allocator
        .lock()
        .expect("allocator poisoned")
        .allocate(&AllocationCreateDesc {
            name,
            requirements,
            location,
            linear: true,
            allocation_scheme: if dedicated {
                AllocationScheme::DedicatedBuffer(raw)
            } else {
                AllocationScheme::GpuAllocatorManaged
            },
        });
    let allocation = match allocated {
        Ok(a) => a,
        Err(e) => {
            // SAFETY: the buffer was never bound or used.
            unsafe { raw_dev.destroy_buffer(raw, None) };
            let heaps = shared.heaps();
            let heap = heaps.iter().find(|h| h.device_local).or(heaps.first());
            return Err(match e {
                gpu_allocator::AllocationError::OutOfMemory => Error::OutOfDeviceMemory {
                    requested: size,
                    what: name.to_string(),
                    budget: heap.map(|h| h.budget.unwrap_or(h.size)).unwrap_or(0),
                    in_use: heap.and_then(|h| h.usage).unwrap_or(0),
                },
                other => Error::Allocation {
                    requested: size,
                    what: name.to_string(),
                    reason: other.to_string(),
                },
            });
        }
    };
    // SAFETY: the allocation satisfies the buffer's requirements and outlives it
    // (both are released together in BufferInner::drop).
    let bound =
        unsafe { raw_dev.bind_buffer_memory(raw, allocation.memory(), allocation.offset()) };
    if let Err(e) = bound {
        // SAFETY: never used.
        unsafe { raw_dev.destroy_buffer(raw, None) };
        let _ = shared
            .allocator
            .lock()
            .expect("allocator poisoned")
            .free(allocation);
        return Err(with_request(
            Error::vk("vkBindBufferMemory", e),
            shared,
            name,
            size,
        ));
    }
    // Staging buffers are always mapped; others only unless staging is forced.
    let zero_copy = name == STAGING_NAME || !shared.options.force_staging;
    let mapped = allocation
        .mapped_ptr()
        .filter(|_| zero_copy)
        .map(|p| MappedPtr(p.cast()));
    if name != STAGING_NAME {
        // SAFETY: reading the handle only.
        shared.residency.stage(
            unsafe { allocation.memory() },
            crate::residency::class_priority(class),
        );
    }
    Ok(Buffer {
        inner: Arc::new(BufferInner {
            device: shared.clone(),
            id: shared.next_buffer_id.fetch_add(1, Ordering::Relaxed),
            raw,
            size,
            class,
            name: name.to_string(),
            mapped,
            allocation: Mutex::new(Some(allocation)),
            last_write: AtomicU64::new(0),
            last_read: AtomicU64::new(0),
        }),
    })
}

impl Buffer {
    /// Unique id within the process.
    pub fn id(&self) -> u64 {
        self.inner.id
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.size
    }
    /// The class fixed at creation.
    pub fn class(&self) -> ResourceClass {
        self.inner.class
    }
    /// The name given at creation.
    pub fn name(&self) -> &str {
        &self.inner.name
    }
    /// Whether the host reaches this buffer's memory directly (zero-copy).
    pub fn is_host_visible(&self) -> bool {
        self.inner.mapped.is_some()
    }

    /// A byte range of this buffer.
    pub fn slice(&self, range: impl RangeBounds<u64>) -> BufferSlice<'_> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e + 1,
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.size(),
        };
        BufferSlice {
            buffer: self,
            offset: start,
            len: end.saturating_sub(start),
        }
    }

    pub(crate) fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.size()) {
            return Err(Error::OutOfBounds {
                buffer: self.id(),
                offset,
                len,
                size: self.size(),
            });
        }
        Ok(())
    }

    /// Writes `data` at byte `offset`. Waits only for queued GPU work that reads or writes
    /// this buffer; through the mapping when host-visible, else through a staging copy
    /// that is queued (not waited for) and ordered before later submits.
    pub fn write<T: Pod>(&self, offset: u64, data: &[T]) -> Result<()> {
        self.write_bytes(offset, bytemuck::cast_slice(data))
    }

    /// Byte version of [`Buffer::write`].
    pub fn write_bytes(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        self.check_range(offset, bytes.len() as u64)?;
        let d = &self.inner.device;
        d.counters
            .bytes_uploaded
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        match &self.inner.mapped {
            Some(ptr) => {
                let after = self
                    .inner
                    .last_read
                    .load(Ordering::Acquire)
                    .max(self.inner.last_write.load(Ordering::Acquire));
                d.queue.wait_value(d, after, d.options.wait_timeout)?;
                // SAFETY: in bounds (checked), the mapping lives as long as self, and no
                // queued GPU work touches the buffer (waited above).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        ptr.0.as_ptr().add(offset as usize),
                        bytes.len(),
                    )
                };
                Ok(())
            }
            None => {
                let staging = create_staging(d, bytes.len() as u64, false)?;
                staging.write_bytes(0, bytes)?;
                let mut enc = Encoder::new(d)?;
                enc.copy(
                    staging.slice(..),
                    self.slice(offset..offset + bytes.len() as u64),
                )?;
                enc.submit()?;
                Ok(())
            }
        }
    }

    /// Reads `count` values of `T` from byte `offset`; waits only for this buffer's last
    /// GPU writer.
    pub fn read<T: Pod + Default>(&self, offset: u64, count: usize) -> Result<Vec<T>> {
        let mut out = vec![T::default(); count];
        self.read_into(offset, bytemuck::cast_slice_mut(&mut out[..]))?;
        Ok(out)
    }

    /// Reads bytes from `offset` into `out`; waits only for this buffer's last GPU writer.
    pub fn read_into(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check_range(offset, out.len() as u64)?;
        let d = &self.inner.device;
        d.counters
            .bytes_downloaded
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        match &self.inner.mapped {
            Some(ptr) => {
                let after = self.inner.last_write.load(Ordering::Acquire);
                d.queue.wait_value(d, after, d.options.wait_timeout)?;
                // SAFETY: in bounds (checked); the last GPU writer has completed and its
                // writes were made host-visible by the submit's trailing barrier.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        ptr.0.as_ptr().add(offset as usize),
                        out.as_mut_ptr(),
                        out.len(),
                    )
                };
                Ok(())
            }
            None => {
                let staging = create_staging(d, out.len() as u64, true)?;
                let mut enc = Encoder::new(d)?;
                enc.copy(
                    self.slice(offset..offset + out.len() as u64),
                    staging.slice(..),
                )?;
                enc.submit()?;
                staging.read_into(0, out)
            }
        }
    }
}
