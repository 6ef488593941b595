//! Profiling primitives: GPU timestamp queries, per-dispatch timings and the per-op
//! table. Rendering (Perfetto trace, SVG timeline) belongs to the tools (the CLI).

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
        Self::for_device(&device.handle.shared, count)
    }

    pub(crate) fn for_device(shared: &Arc<DeviceShared>, count: u32) -> Result<TimestampQueries> {
        if !shared.info.timestamps {
            return Err(Error::MissingFeature {
                device: shared.info.name.clone(),
                missing: "timestamps on the compute queue".into(),
            });
        }
        let shared = shared.clone();
        // SAFETY: valid device and create info.
        let pool = unsafe {
            shared.raw.create_query_pool(
                &vk::QueryPoolCreateInfo::default()
                    .query_type(vk::QueryType::TIMESTAMP)
                    .query_count(count),
                None,
            )
        }
        .vk("vkCreateQueryPool")?;
        Ok(TimestampQueries {
            inner: Arc::new(QueryPoolInner {
                device: shared,
                pool,
                count,
            }),
        })
    }

    /// Reads all timestamps in nanoseconds (waits for them to be written; call after the
    /// submit that wrote them completed).
    pub fn read_ns(&self) -> Result<Vec<f64>> {
        let d = &self.inner.device;
        let mut ticks = vec![0u64; self.inner.count as usize];
        // SAFETY: valid pool; `ticks` holds `count` 64-bit results.
        unsafe {
            d.raw.get_query_pool_results(
                self.inner.pool,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .vk("vkGetQueryPoolResults")?;
        let bits = d.info.timestamp_valid_bits;
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let period = d.info.timestamp_period_ns as f64;
        Ok(ticks.iter().map(|t| (t & mask) as f64 * period).collect())
    }
}

/// GPU time of one dispatch of a profiled replay.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DispatchTiming {
    /// Label given when captured ("op L<layer>" by convention), or the kernel name.
    pub label: String,
    /// Kernel name.
    pub kernel: String,
    /// Index of the node in the captured graph.
    pub node: usize,
    /// Concurrent group (a barrier separates consecutive groups).
    pub group: usize,
    /// GPU begin, ns on the device clock.
    pub begin_ns: f64,
    /// GPU end, ns on the device clock.
    pub end_ns: f64,
}

impl DispatchTiming {
    /// The op kind: the label up to its first space ("attn.q L3" -> "attn.q").
    pub fn op(&self) -> &str {
        self.label.split(' ').next().unwrap_or(&self.label)
    }
    /// The layer of a label "op L<n>" (None for ops outside the layers, e.g. the LM head).
    pub fn layer(&self) -> Option<usize> {
        self.label
            .split(' ')
            .find_map(|w| w.strip_prefix('L'))
            .and_then(|n| n.parse().ok())
    }
    /// GPU time in µs.
    pub fn us(&self) -> f64 {
        (self.end_ns - self.begin_ns).max(0.0) / 1e3
    }
}

/// A host-side span (record, submit, wait), ns since the profile's start.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CpuSpan {
    /// What the host did.
    pub name: String,
    /// Start, ns since the profile's start.
    pub begin_ns: f64,
    /// Duration in ns.
    pub dur_ns: f64,
}

/// Per-op-kind totals of one token.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OpStat {
    /// Op kind.
    pub op: String,
    /// Dispatches per token.
    pub count: usize,
    /// GPU µs per token (sum of its dispatches).
    pub gpu_us: f64,
    /// Share of the summed dispatch time.
    pub share: f64,
    /// Bytes the op reads and writes per token, when known.
    pub bytes: Option<u64>,
    /// Achieved GB/s (bytes / GPU time), when bytes are known.
    pub gb_s: Option<f64>,
}

/// Sums dispatch times per op kind (largest first); `bytes(node)` gives the bytes a
/// dispatch moves when known.
pub fn op_table(timings: &[DispatchTiming], bytes: impl Fn(usize) -> Option<u64>) -> Vec<OpStat> {
    let total: f64 = timings.iter().map(|t| t.us()).sum();
    let mut ops: Vec<OpStat> = Vec::new();
    for t in timings {
        let b = bytes(t.node);
        match ops.iter_mut().find(|o| o.op == t.op()) {
            Some(o) => {
                o.count += 1;
                o.gpu_us += t.us();
                // Dispatches that move no known bytes (e.g. an activation conversion
                // inside the op) add nothing; the op's bytes stay unknown only if none
                // of its dispatches knows them.
                o.bytes = match (o.bytes, b) {
                    (None, None) => None,
                    (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
                };
            }
            None => ops.push(OpStat {
                op: t.op().to_string(),
                count: 1,
                gpu_us: t.us(),
                share: 0.0,
                bytes: b,
                gb_s: None,
            }),
        }
    }
    for o in &mut ops {
        o.share = if total > 0.0 { o.gpu_us / total } else { 0.0 };
        o.gb_s = o
            .bytes
            .filter(|_| o.gpu_us > 0.0)
            .map(|b| b as f64 / (o.gpu_us * 1e3));
    }
    ops.sort_by(|a, b| b.gpu_us.total_cmp(&a.gpu_us));
    ops
}

/// One op kind's dispatches inside one layer of a profiled token.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LayerOp {
    /// Op kind ("attn.qkv").
    pub op: String,
    /// GPU µs of each of its dispatches in this layer, in the order they ran.
    pub us: Vec<f64>,
    /// Their kernels, in the same order.
    pub kernels: Vec<String>,
}

/// One layer's dispatches of a profiled token, by op kind.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LayerRow {
    /// Layer number (the `L<n>` of the labels).
    pub layer: usize,
    /// Op kinds in the order the layer first ran them.
    pub ops: Vec<LayerOp>,
}

/// Dispatch times per layer and op kind (layers in number order), from labels "op L<n>";
/// dispatches of no layer are left out. Shows where one layer differs from the others.
pub fn layer_table(timings: &[DispatchTiming]) -> Vec<LayerRow> {
    let mut rows: Vec<LayerRow> = Vec::new();
    let mut sorted: Vec<&DispatchTiming> = timings.iter().collect();
    sorted.sort_by(|a, b| a.begin_ns.total_cmp(&b.begin_ns));
    for t in sorted {
        let Some(layer) = t.layer() else {
            continue;
        };
        let at = match rows.iter().position(|r| r.layer == layer) {
            Some(i) => i,
            None => {
                rows.push(LayerRow {
                    layer,
                    ops: Vec::new(),
                });
                rows.len() - 1
            }
        };
        let row = &mut rows[at];
        match row.ops.iter_mut().find(|o| o.op == t.op()) {
            Some(o) => {
                o.us.push(t.us());
                o.kernels.push(t.kernel.clone());
            }
            None => row.ops.push(LayerOp {
                op: t.op().to_string(),
                us: vec![t.us()],
                kernels: vec![t.kernel.clone()],
            }),
        }
    }
    rows.sort_by_key(|r| r.layer);
    rows
}

/// GPU time between dispatches of one token: the token's span minus the union of
/// dispatch spans (ns).
pub fn idle_ns(timings: &[DispatchTiming]) -> f64 {
    let mut spans: Vec<(f64, f64)> = timings.iter().map(|t| (t.begin_ns, t.end_ns)).collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (Some(first), Some(last)) = (spans.first(), spans.iter().map(|s| s.1).reduce(f64::max))
    else {
        return 0.0;
    };
    let mut busy = 0.0;
    let (mut cur_s, mut cur_e) = *first;
    for &(s, e) in &spans[1..] {
        if s > cur_e {
            busy += cur_e - cur_s;
            cur_s = s;
            cur_e = e;
        } else {
            cur_e = cur_e.max(e);
        }
    }
    busy += cur_e - cur_s;
    (last - first.0 - busy).max(0.0)
}
