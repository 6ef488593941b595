//! Profiling primitives: GPU timestamp queries.

use std::sync::Arc;

use ash::vk;

use crate::device::{Device, DeviceShared};
use crate::error::{Error, Result, VkResultExt};

/// A pool of GPU timestamp queries, written by [`crate::Encoder::write_timestamp`].
pub struct TimestampQueries {
    pub(crate) inner: Arc<QueryPoolInner>,
}

pub(crate) struct QueryPoolInner {
    pub device: Arc<DeviceShared>,
    pub pool: vk::QueryPool,
    pub count: u32,
}

impl Drop for QueryPoolInner {
    fn drop(&mut self) {
        // SAFETY: the last reference is gone; queued work retains the pool until done.
        unsafe { self.device.raw.destroy_query_pool(self.pool, None) };
    }
}

impl TimestampQueries {
    /// A pool of `count` timestamps. Fails if the queue cannot write timestamps.
    pub fn new(device: &Device, count: u32) -> Result<TimestampQueries> {
        if !device.info().timestamps {
            return Err(Error::MissingFeature { device: device.info().name.clone(), missing: "timestamps on the compute queue".into() });
        }
        let shared = device.handle.shared.clone();
        // SAFETY: valid device and create info.
        let pool = unsafe {
            shared.raw.create_query_pool(
                &vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(count),
                None,
            )
        }
        .vk("vkCreateQueryPool")?;
        Ok(TimestampQueries { inner: Arc::new(QueryPoolInner { device: shared, pool, count }) })
    }

    /// Reads all timestamps in nanoseconds (waits for them to be written; call after the
    /// submit that wrote them completed).
    pub fn read_ns(&self) -> Result<Vec<f64>> {
        let d = &self.inner.device;
        let mut ticks = vec![0u64; self.inner.count as usize];
        // SAFETY: valid pool; `ticks` holds `count` 64-bit results.
        unsafe {
            d.raw.get_query_pool_results(self.inner.pool, 0, &mut ticks, vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT)
        }
        .vk("vkGetQueryPoolResults")?;
        let bits = d.info.timestamp_valid_bits;
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let period = d.info.timestamp_period_ns as f64;
        Ok(ticks.iter().map(|t| (t & mask) as f64 * period).collect())
    }
}
