//! The one error type of the runtime. Device loss, out-of-memory and timeouts are values.

use std::time::Duration;

/// Everything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Vulkan loader (libvulkan.so.1) could not be opened.
    #[error("cannot load the Vulkan loader (libvulkan.so.1): {0}; install libvulkan1 and a driver (e.g. Debian's mesa-vulkan-drivers)")]
    Loader(String),
    /// No physical device matched the request.
    #[error("no Vulkan device found{}; devices seen: [{}]", .wanted.as_ref().map(|w| format!(" matching {w:?}")).unwrap_or_default(), .seen.join(", "))]
    NoDevice {
        /// The name substring asked for, if any.
        wanted: Option<String>,
        /// Names of the devices that exist.
        seen: Vec<String>,
    },
    /// The device lacks something the runtime needs.
    #[error("device {device:?} lacks {missing}")]
    MissingFeature {
        /// Device name.
        device: String,
        /// What is missing.
        missing: String,
    },
    /// The device was lost (driver reset, hang, fatal fault).
    #[error("Vulkan device lost during {during}")]
    DeviceLost {
        /// The call that reported it.
        during: &'static str,
    },
    /// Device memory is exhausted.
    #[error("out of device memory allocating {requested} bytes for {what} (heap budget {budget} bytes, in use {in_use} bytes)")]
    OutOfDeviceMemory {
        /// Bytes asked for.
        requested: u64,
        /// What the allocation was for.
        what: String,
        /// Budget of the heap (or its size when no budget is known).
        budget: u64,
        /// Bytes in use on that heap.
        in_use: u64,
    },
    /// Host memory is exhausted.
    #[error("out of host memory during {during}")]
    OutOfHostMemory {
        /// The call that reported it.
        during: &'static str,
    },
    /// A wait ran out of time.
    #[error("timed out after {waited:?} waiting for ticket {value} (queue reached {reached})")]
    Timeout {
        /// The timeline value waited for.
        value: u64,
        /// The value the queue had reached when the wait gave up.
        reached: u64,
        /// How long the wait lasted.
        waited: Duration,
    },
    /// A dispatch declared a GPU write to a read-only weight buffer.
    #[error("dispatch {kernel:?} writes buffer #{buffer} which is a ReadOnlyWeight")]
    WriteToReadOnlyWeight {
        /// The kernel that declared the write.
        kernel: String,
        /// The buffer's id.
        buffer: u64,
    },
    /// A dispatch, binding or copy was malformed.
    #[error("invalid use: {0}")]
    InvalidUse(String),
    /// A byte range is outside its buffer.
    #[error("range {offset}..{end} is outside buffer #{buffer} of {size} bytes", end = .offset + .len)]
    OutOfBounds {
        /// The buffer's id.
        buffer: u64,
        /// Start of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Size of the buffer.
        size: u64,
    },
    /// Any other Vulkan failure.
    #[error("{call} failed: {result:?}")]
    Vulkan {
        /// The Vulkan call.
        call: &'static str,
        /// Its result code.
        result: ash::vk::Result,
    },
    /// The allocator refused.
    #[error("allocation of {requested} bytes for {what} failed: {reason}")]
    Allocation {
        /// Bytes asked for.
        requested: u64,
        /// What it was for.
        what: String,
        /// The allocator's message.
        reason: String,
    },
}

/// The runtime's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Maps a Vulkan result code from `call` to an error value.
    pub(crate) fn vk(call: &'static str, result: ash::vk::Result) -> Error {
        use ash::vk::Result as R;
        match result {
            R::ERROR_DEVICE_LOST => Error::DeviceLost { during: call },
            R::ERROR_OUT_OF_HOST_MEMORY => Error::OutOfHostMemory { during: call },
            R::ERROR_OUT_OF_DEVICE_MEMORY => Error::OutOfDeviceMemory {
                requested: 0,
                what: call.to_string(),
                budget: 0,
                in_use: 0,
            },
            other => Error::Vulkan {
                call,
                result: other,
            },
        }
    }
}

/// Adds `.vk("vkCall")?` to ash results.
pub(crate) trait VkResultExt<T> {
    fn vk(self, call: &'static str) -> Result<T>;
}

impl<T> VkResultExt<T> for std::result::Result<T, ash::vk::Result> {
    fn vk(self, call: &'static str) -> Result<T> {
        self.map_err(|r| Error::vk(call, r))
    }
}
