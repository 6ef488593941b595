//! Counters of recorded and submitted work, per encoder and for the whole device.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A snapshot of work counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Buffer copies recorded.
    pub copies: u64,
    /// Global memory barriers emitted between dispatches (dataflow barriers).
    pub barriers: u64,
    /// Dispatch boundaries where `Serial` mode would have put a barrier and Auto did not.
    pub barriers_elided: u64,
    /// Command buffers begun.
    pub command_buffers: u64,
    /// Queue submits.
    pub submits: u64,
    /// Host waits that found their ticket not yet complete (fast-path waits are not counted).
    pub host_waits: u64,
    /// Bytes written into GPU buffers from the host.
    pub bytes_uploaded: u64,
    /// Bytes read back from GPU buffers to the host.
    pub bytes_downloaded: u64,
    /// Timestamp queries written (zero unless profiling).
    pub timestamp_queries: u64,
}

impl Counters {
    /// Field-wise `self - earlier`, for counting what happened between two snapshots.
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            dispatches: self.dispatches - earlier.dispatches,
            copies: self.copies - earlier.copies,
            barriers: self.barriers - earlier.barriers,
            barriers_elided: self.barriers_elided - earlier.barriers_elided,
            command_buffers: self.command_buffers - earlier.command_buffers,
            submits: self.submits - earlier.submits,
            host_waits: self.host_waits - earlier.host_waits,
            bytes_uploaded: self.bytes_uploaded - earlier.bytes_uploaded,
            bytes_downloaded: self.bytes_downloaded - earlier.bytes_downloaded,
            timestamp_queries: self.timestamp_queries - earlier.timestamp_queries,
        }
    }
}

/// Device-wide counters, updated atomically from any thread.
#[derive(Default, Debug)]
pub(crate) struct AtomicCounters {
    pub dispatches: AtomicU64,
    pub copies: AtomicU64,
    pub barriers: AtomicU64,
    pub barriers_elided: AtomicU64,
    pub command_buffers: AtomicU64,
    pub submits: AtomicU64,
    pub host_waits: AtomicU64,
    pub bytes_uploaded: AtomicU64,
    pub bytes_downloaded: AtomicU64,
    pub timestamp_queries: AtomicU64,
}

impl AtomicCounters {
    pub fn snapshot(&self) -> Counters {
        Counters {
            dispatches: self.dispatches.load(Relaxed),
            copies: self.copies.load(Relaxed),
            barriers: self.barriers.load(Relaxed),
            barriers_elided: self.barriers_elided.load(Relaxed),
            command_buffers: self.command_buffers.load(Relaxed),
            submits: self.submits.load(Relaxed),
            host_waits: self.host_waits.load(Relaxed),
            bytes_uploaded: self.bytes_uploaded.load(Relaxed),
            bytes_downloaded: self.bytes_downloaded.load(Relaxed),
            timestamp_queries: self.timestamp_queries.load(Relaxed),
        }
    }

    /// Adds an encoder's recorded-work counters (submits and waits are counted where they happen).
    pub fn add_recorded(&self, c: &Counters) {
        self.dispatches.fetch_add(c.dispatches, Relaxed);
        self.copies.fetch_add(c.copies, Relaxed);
        self.barriers.fetch_add(c.barriers, Relaxed);
        self.barriers_elided.fetch_add(c.barriers_elided, Relaxed);
        self.command_buffers.fetch_add(c.command_buffers, Relaxed);
        self.timestamp_queries
            .fetch_add(c.timestamp_queries, Relaxed);
    }
}
