//! Capture -> graph IR -> schedule -> recorded once -> replayed every token.
//!
//! An encoder in capture mode (`Device::capture`) turns each `dispatch` into a [`Node`]
//! (kernel, bindings, declared accesses, workgroups, push constants, label). A [`Graph`]
//! builds the dependency DAG from the accesses ([`crate::schedule`]), orders the nodes
//! into concurrent groups (reorder within a lookahead window, one barrier between groups)
//! and records them once into a Vulkan command buffer ([`Replay`]) that is resubmitted
//! unchanged; per-token values live in buffers the kernels read.

use std::sync::Arc;

use ash::vk;
use serde::Serialize;

use crate::counters::Counters;
use crate::device::DeviceShared;
use crate::error::{Error, Result, VkResultExt};
use crate::hazard::{Access, AccessKind};
use crate::kernel::Pipeline;
use crate::memory::{Buffer, BufferInner};
use crate::queue::{Retained, Ticket};
use crate::schedule::{dependencies, schedule, Schedule};

/// One captured dispatch.
#[derive(Clone)]
pub struct Node {
    /// Op label (or the kernel name).
    pub label: Arc<str>,
    /// The kernel.
    pub pipeline: Arc<Pipeline>,
    /// Workgroup counts.
    pub groups: [u32; 3],
    /// Bound buffer ranges, one per binding: (buffer, offset, length).
    pub bindings: Vec<(Buffer, u64, u64)>,
    /// Push-constant bytes.
    pub push: Vec<u8>,
    /// Declared accesses (from the kernel's binding access and the bound ranges).
    pub accesses: Vec<Access>,
}

/// How a graph is scheduled.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct GraphOptions {
    /// Pull independent nodes forward to grow concurrent groups. Default true.
    pub reorder: bool,
    /// How far past the first unscheduled node reordering may look. Default 64.
    pub lookahead: usize,
}

impl Default for GraphOptions {
    fn default() -> Self {
        GraphOptions {
            reorder: true,
            lookahead: 64,
        }
    }
}

/// A captured stream with its dependency DAG and schedule.
pub struct Graph {
    device: Arc<DeviceShared>,
    nodes: Vec<Node>,
    deps: Vec<Vec<usize>>,
    schedule: Schedule,
}

/// A dump of a graph: nodes, edges, groups.
#[derive(Serialize)]
pub struct GraphDump {
    /// Nodes in captured order.
    pub nodes: Vec<NodeDump>,
    /// Dependency edges (from, to) in captured indices.
    pub edges: Vec<(usize, usize)>,
    /// Concurrent groups in execution order (captured indices); a barrier between each.
    pub groups: Vec<Vec<usize>>,
    /// Barriers between groups.
    pub barriers: usize,
}

/// One node of a [`GraphDump`].
#[derive(Serialize)]
pub struct NodeDump {
    /// Captured index.
    pub index: usize,
    /// Label.
    pub label: String,
    /// Kernel name.
    pub kernel: String,
    /// Workgroups.
    pub groups: [u32; 3],
    /// Reads as "buffer-name[offset..end]".
    pub reads: Vec<String>,
    /// Writes as "buffer-name[offset..end]".
    pub writes: Vec<String>,
}

impl Graph {
    pub(crate) fn new(device: Arc<DeviceShared>, nodes: Vec<Node>) -> Graph {
        let access_lists: Vec<Vec<Access>> = nodes.iter().map(|n| n.accesses.clone()).collect();
        let deps = dependencies(&access_lists);
        // Captured order with in-order barriers, like the direct encoder.
        let schedule = schedule(&deps, 1);
        Graph {
            device,
            nodes,
            deps,
            schedule,
        }
    }

    /// Reschedules with `options` (reorder within the lookahead, or captured order).
    pub fn optimize(&mut self, options: GraphOptions) {
        let window = if options.reorder {
            options.lookahead.max(1)
        } else {
            1
        };
        self.schedule = schedule(&self.deps, window);
    }

    /// Captured nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Predecessors of each node.
    pub fn dependencies(&self) -> &[Vec<usize>] {
        &self.deps
    }

    /// The current schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Replaces the nodes (after a rewrite such as fusion) and rebuilds DAG and schedule.
    pub fn replace_nodes(&mut self, nodes: Vec<Node>, options: GraphOptions) {
        let access_lists: Vec<Vec<Access>> = nodes.iter().map(|n| n.accesses.clone()).collect();
        self.deps = dependencies(&access_lists);
        self.nodes = nodes;
        self.optimize(options);
    }

    /// The graph as data (for `--dump json`).
    pub fn dump(&self) -> GraphDump {
        let range = |a: &Access, nodes: &Node| {
            let name = nodes
                .bindings
                .iter()
                .find(|(b, _, _)| b.id() == a.buffer)
                .map(|(b, _, _)| b.name().to_string())
                .unwrap_or_default();
            format!("{name}[{}..{}]", a.offset, a.offset + a.len)
        };
        GraphDump {
            nodes: self
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| NodeDump {
                    index: i,
                    label: n.label.to_string(),
                    kernel: n.pipeline.desc.name.to_string(),
                    groups: n.groups,
                    reads: n
                        .accesses
                        .iter()
                        .filter(|a| a.kind == AccessKind::Read)
                        .map(|a| range(a, n))
                        .collect(),
                    writes: n
                        .accesses
                        .iter()
                        .filter(|a| a.kind == AccessKind::Write)
                        .map(|a| range(a, n))
                        .collect(),
                })
                .collect(),
            edges: self
                .deps
                .iter()
                .enumerate()
                .flat_map(|(j, ps)| ps.iter().map(move |&i| (i, j)))
                .collect(),
            groups: self.schedule.groups.clone(),
            barriers: self.schedule.barriers(),
        }
    }

    /// A human-readable dump: groups in order, barriers between them.
    pub fn dump_text(&self) -> String {
        let mut s = String::new();
        for (g, group) in self.schedule.groups.iter().enumerate() {
            if g > 0 {
                s.push_str("---- barrier ----\n");
            }
            for &i in group {
                let n = &self.nodes[i];
                let deps: Vec<String> = self.deps[i].iter().map(|d| d.to_string()).collect();
                s.push_str(&format!(
                    "#{i:<4} {:<28} {:<22} groups {:?}  after [{}]\n",
                    n.label,
                    n.pipeline.desc.name,
                    n.groups,
                    deps.join(",")
                ));
            }
        }
        s.push_str(&format!(
            "{} nodes, {} groups, {} barriers\n",
            self.nodes.len(),
            self.schedule.groups.len(),
            self.schedule.barriers()
        ));
        s
    }

    /// Records the scheduled stream into a command buffer, once.
    pub fn record(&self) -> Result<Replay> {
        self.record_with(false)
    }

    /// Like [`Graph::record`]; with `profile`, a timestamp is written before and after
    /// every dispatch (read them with [`Replay::timings`] after a submit completes).
    /// Timestamps order the work they bracket, so a profiled stream runs its concurrent
    /// groups less concurrently than an unprofiled one.
    pub fn record_with(&self, profile: bool) -> Result<Replay> {
        let d = &self.device;
        // SAFETY: valid device; the pool and buffer are owned by the Replay and destroyed
        // when its last user (the Replay or a pending submit) goes.
        let (pool, cmd) = unsafe {
            let pool = d
                .raw
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default().queue_family_index(d.queue.family),
                    None,
                )
                .vk("vkCreateCommandPool")?;
            let cmd = match d.raw.allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1),
            ) {
                Ok(c) => c[0],
                Err(e) => {
                    d.raw.destroy_command_pool(pool, None);
                    return Err(Error::vk("vkAllocateCommandBuffers", e));
                }
            };
            (pool, cmd)
        };
        let mut inner = ReplayInner {
            device: d.clone(),
            pool,
            cmd,
            buffers: Vec::new(),
            pipelines: Vec::new(),
            counters: Counters::default(),
            profile: None,
        };
        let queries = if profile && !self.nodes.is_empty() {
            let q = crate::profile::TimestampQueries::for_device(d, 2 * self.nodes.len() as u32)?;
            Some(q)
        } else {
            None
        };
        // SAFETY: `cmd` is in the initial state; SIMULTANEOUS_USE lets a submit be queued
        // while the previous one still runs (consecutive tokens).
        unsafe {
            d.raw
                .begin_command_buffer(
                    cmd,
                    &vk::CommandBufferBeginInfo::default()
                        .flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE),
                )
                .vk("vkBeginCommandBuffer")?;
        }
        let mut bound = vk::Pipeline::null();
        let mut spans = Vec::new();
        if let Some(q) = &queries {
            // SAFETY: recording; the pool is owned by the replay.
            unsafe {
                d.raw
                    .cmd_reset_query_pool(cmd, q.inner.pool, 0, q.inner.count)
            };
        }
        for (g, group) in self.schedule.groups.iter().enumerate() {
            if g > 0 {
                crate::encoder::record_global_barrier(&d.raw, cmd);
                inner.counters.barriers += 1;
            }
            for &i in group {
                let n = &self.nodes[i];
                if let Some(labels) = &d.ext.labels {
                    let name = std::ffi::CString::new(n.label.as_bytes()).unwrap_or_default();
                    // SAFETY: recording; the label struct lives across the call.
                    unsafe {
                        labels.cmd_begin_debug_utils_label(
                            cmd,
                            &vk::DebugUtilsLabelEXT::default().label_name(&name),
                        )
                    };
                }
                if let Some(q) = &queries {
                    let at = 2 * spans.len() as u32;
                    // SAFETY: recording; index within the pool.
                    unsafe {
                        d.raw.cmd_write_timestamp2(
                            cmd,
                            vk::PipelineStageFlags2::TOP_OF_PIPE,
                            q.inner.pool,
                            at,
                        )
                    };
                }
                crate::encoder::record_dispatch(
                    d,
                    cmd,
                    &mut bound,
                    &n.pipeline,
                    n.groups,
                    &n.bindings,
                    &n.push,
                )?;
                if let Some(q) = &queries {
                    let at = 2 * spans.len() as u32 + 1;
                    // SAFETY: recording; index within the pool.
                    unsafe {
                        d.raw.cmd_write_timestamp2(
                            cmd,
                            vk::PipelineStageFlags2::COMPUTE_SHADER,
                            q.inner.pool,
                            at,
                        )
                    };
                    inner.counters.timestamp_queries += 2;
                    spans.push((i, g));
                }
                if let Some(labels) = &d.ext.labels {
                    // SAFETY: recording; closes the label opened above.
                    unsafe { labels.cmd_end_debug_utils_label(cmd) };
                }
                inner.counters.dispatches += 1;
                for (b, _, _) in &n.bindings {
                    let wrote = n
                        .accesses
                        .iter()
                        .any(|a| a.buffer == b.id() && a.kind == AccessKind::Write);
                    match inner.buffers.iter_mut().find(|(x, _)| x.id == b.id()) {
                        Some(e) => e.1 |= wrote,
                        None => inner.buffers.push((b.inner.clone(), wrote)),
                    }
                }
                if !inner.pipelines.iter().any(|p| Arc::ptr_eq(p, &n.pipeline)) {
                    inner.pipelines.push(n.pipeline.clone());
                }
            }
            inner.counters.barriers_elided += group.len().saturating_sub(1) as u64;
        }
        if !self.nodes.is_empty() {
            crate::encoder::record_submit_barrier(&d.raw, cmd);
            inner.counters.barriers += 1;
        }
        // SAFETY: recording.
        unsafe { d.raw.end_command_buffer(cmd) }.vk("vkEndCommandBuffer")?;
        inner.counters.command_buffers = 1;
        inner.profile = queries.map(|q| ReplayProfile {
            queries: q,
            spans: spans
                .into_iter()
                .map(|(i, g)| {
                    (
                        self.nodes[i].label.clone(),
                        self.nodes[i].pipeline.desc.name,
                        i,
                        g,
                    )
                })
                .collect(),
        });
        Ok(Replay {
            inner: Arc::new(inner),
        })
    }
}

pub(crate) struct ReplayInner {
    device: Arc<DeviceShared>,
    pool: vk::CommandPool,
    pub cmd: vk::CommandBuffer,
    /// Every bound buffer and whether the stream writes it.
    pub buffers: Vec<(Arc<BufferInner>, bool)>,
    pipelines: Vec<Arc<Pipeline>>,
    counters: Counters,
    profile: Option<ReplayProfile>,
}

struct ReplayProfile {
    queries: crate::profile::TimestampQueries,
    /// (label, kernel, captured index, group) per dispatch in execution order.
    spans: Vec<(Arc<str>, &'static str, usize, usize)>,
}

impl Drop for ReplayInner {
    fn drop(&mut self) {
        let _ = &self.pipelines;
        // SAFETY: the last reference is gone; pending submits hold one until complete.
        unsafe { self.device.raw.destroy_command_pool(self.pool, None) };
    }
}

/// A recorded stream, resubmitted as is. Cheap to submit: no recording on the host.
#[derive(Clone)]
pub struct Replay {
    inner: Arc<ReplayInner>,
}

impl Replay {
    /// Submits the recorded stream again (deferred writes first); returns its ticket.
    pub fn submit(&self) -> Result<Ticket> {
        let d = &self.inner.device;
        crate::transfer::flush_deferred(d)?;
        let mut c = self.inner.counters;
        c.command_buffers = 0;
        d.counters.add_recorded(&c);
        let value =
            d.queue
                .submit_recorded(d, self.inner.cmd, Retained::Replay(self.inner.clone()))?;
        Ok(Ticket {
            device: d.clone(),
            value,
        })
    }

    /// GPU timings of every dispatch of the last completed submit of a profiled replay
    /// (`Graph::record_with(true)`), in execution order. Wait for the ticket first.
    pub fn timings(&self) -> Result<Vec<crate::profile::DispatchTiming>> {
        let p = self.inner.profile.as_ref().ok_or_else(|| {
            Error::InvalidUse("this replay was recorded without profiling".into())
        })?;
        let ns = p.queries.read_ns()?;
        Ok(p.spans
            .iter()
            .enumerate()
            .map(
                |(k, (label, kernel, index, group))| crate::profile::DispatchTiming {
                    label: label.to_string(),
                    kernel: kernel.to_string(),
                    node: *index,
                    group: *group,
                    begin_ns: ns[2 * k],
                    end_ns: ns[2 * k + 1],
                },
            )
            .collect())
    }

    /// What one submit of this stream contains.
    pub fn counters(&self) -> Counters {
        self.inner.counters
    }
}
