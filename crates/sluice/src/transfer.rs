//! Transfers that belong to the stream: host writes applied right before the next submit,
//! and device-to-host reads delivered when their ticket completes.
//!
//! A deferred write is staged and copied in a command buffer submitted just before the
//! next user submit, so it lands after everything queued earlier (no host wait, no
//! write-after-read hazard) and before the work that follows. A [`Readback`] owns its
//! staging buffer and the ticket it completes with, so it survives anything that happens
//! to the encoder or later submits and is delivered exactly once.

use std::sync::{Arc, OnceLock};

use crate::device::{Device, DeviceShared};
use crate::encoder::Encoder;
use crate::error::{Error, Result};
use crate::memory::{create_staging, Buffer, BufferInner, BufferSlice};
use crate::queue::Ticket;

/// A host write waiting for the next submit.
pub(crate) struct DeferredWrite {
    buffer: Arc<BufferInner>,
    offset: u64,
    bytes: Vec<u8>,
}

impl Device {
    /// Schedules `bytes` to be written at `offset` of `buffer` immediately before the
    /// next submit (in stream order: after all work submitted earlier). Never waits.
    pub fn write_before_next_submit(
        &self,
        buffer: &Buffer,
        offset: u64,
        bytes: &[u8],
    ) -> Result<()> {
        buffer.check_range(offset, bytes.len() as u64)?;
        if !Arc::ptr_eq(&buffer.inner.device, &self.handle.shared) {
            return Err(Error::InvalidUse(format!(
                "buffer {:?} belongs to another device",
                buffer.name()
            )));
        }
        self.handle
            .shared
            .deferred_writes
            .lock()
            .expect("deferred writes poisoned")
            .push(DeferredWrite {
                buffer: buffer.inner.clone(),
                offset,
                bytes: bytes.to_vec(),
            });
        Ok(())
    }

    /// Submits pending deferred writes now (they otherwise go with the next submit).
    pub fn flush_deferred_writes(&self) -> Result<Option<Ticket>> {
        flush_deferred(&self.handle.shared)
    }
}

/// Submits the pending deferred writes, if any, as one copy command buffer.
pub(crate) fn flush_deferred(shared: &Arc<DeviceShared>) -> Result<Option<Ticket>> {
    let writes: Vec<DeferredWrite> = std::mem::take(
        &mut *shared
            .deferred_writes
            .lock()
            .expect("deferred writes poisoned"),
    );
    if writes.is_empty() {
        return Ok(None);
    }
    let total: u64 = writes.iter().map(|w| w.bytes.len() as u64).sum();
    let staging = create_staging(shared, total, false)?;
    let mut enc = Encoder::new_without_deferred(shared)?;
    let mut at = 0u64;
    for w in &writes {
        staging.write_bytes(at, &w.bytes)?;
        let dst = Buffer {
            inner: w.buffer.clone(),
        };
        let len = w.bytes.len() as u64;
        enc.copy(
            staging.slice(at..at + len),
            dst.slice(w.offset..w.offset + len),
        )?;
        at += len;
    }
    enc.submit().map(Some)
}

/// A device-to-host copy recorded in an encoder, delivered when its submit completes.
pub struct Readback {
    staging: Buffer,
    len: usize,
    pub(crate) ticket: Arc<OnceLock<Ticket>>,
}

impl Encoder {
    /// Records a copy of `slice` (as it is at this point of the stream) for the host.
    pub fn read_after(&mut self, slice: BufferSlice<'_>) -> Result<Readback> {
        let staging = create_staging(self.device(), slice.len.max(1), true)?;
        self.copy(slice, staging.slice(0..slice.len))?;
        let ticket = Arc::new(OnceLock::new());
        self.on_submit(ticket.clone());
        Ok(Readback {
            staging,
            len: slice.len as usize,
            ticket,
        })
    }
}

impl Readback {
    /// The ticket it completes with (None until its encoder is submitted).
    pub fn ticket(&self) -> Option<&Ticket> {
        self.ticket.get()
    }

    /// Whether the data is ready (never blocks).
    pub fn is_ready(&self) -> Result<bool> {
        match self.ticket.get() {
            Some(t) => t.is_done(),
            None => Ok(false),
        }
    }

    /// Waits for the submit and returns the bytes.
    pub fn wait(self) -> Result<Vec<u8>> {
        let t = self.ticket.get().ok_or_else(|| {
            Error::InvalidUse("readback of an encoder that was never submitted".into())
        })?;
        t.wait()?;
        let mut out = vec![0u8; self.len];
        self.staging.read_into(0, &mut out)?;
        Ok(out)
    }
}
