//! sluice: a Vulkan compute runtime for LLM decode.
//!
//! Every dispatch declares what it reads and writes (the byte ranges bound to a kernel's
//! read and read-write bindings); the [`hazard::HazardTracker`] decides where one global
//! barrier is needed; submits return [`Ticket`]s on a timeline semaphore; host access
//! waits only for the tickets that matter. See DESIGN.md in the shared folder and
//! `docs/` for the layers.

#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod class;
pub mod counters;
pub mod device;
pub mod encoder;
pub mod error;
pub mod graph;
pub mod hazard;
pub mod kernel;
pub mod memory;
pub mod options;
pub mod profile;
pub mod queue;
pub mod residency;
pub mod schedule;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transfer;
pub mod validation;
mod waiter;

pub use class::ResourceClass;
pub use counters::Counters;
pub use device::{Device, DeviceInfo, HeapInfo};
pub use encoder::Encoder;
pub use error::{Error, Result};
pub use kernel::{
    BindingAccess, KernelDesc, KernelFeature, KernelStatistic, Pipeline, Pod, StatisticValue,
};
pub use memory::{Buffer, BufferSlice};
pub use options::{BarrierMode, Options, Validation};
pub use profile::TimestampQueries;
pub use queue::Ticket;
pub use transfer::Readback;
pub use validation::ValidationMessage;
