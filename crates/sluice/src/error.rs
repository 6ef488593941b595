//! The one error type of the runtime. Device loss, out-of-memory and timeouts are values.

use std::time::Duration;

/// Everything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Vulkan loader (libvulkan.so.1) could not be opened.
    #[error("cannot load the Vulkan loader (libvulkan.so.1): {0}; install libvulkan1 and a driver (e.g. Debian's mesa-vulkan-drivers)")]
    Loader(String),
    /// No physical device matched the request.
    #[error("no Vulkan device found{}; devices seen: [{}]{}", .wanted.as_ref().map(|w| format!(" matching {w:?}")).unwrap_or_default(), .seen.join(", "), if .seen.is_empty() { format!("; {}", driver_hint()) } else { String::new() })]
    NoDevice {
        /// The name substring asked for, if any.
        wanted: Option<String>,
        /// Names of the devices that exist.
        seen: Vec<String>,
    },
    /// The loader found no usable Vulkan driver (ICD).
    #[error("no Vulkan driver: {call} returned {result:?}; {}", driver_hint())]
    NoDriver {
        /// The Vulkan call.
        call: &'static str,
        /// Its result.
        result: ash::vk::Result,
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
    #[error("{}", oom_message(*.requested, .what, *.budget, *.in_use))]
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
            R::ERROR_INCOMPATIBLE_DRIVER | R::ERROR_INITIALIZATION_FAILED
                if call == "vkCreateInstance" || call == "vkEnumeratePhysicalDevices" =>
            {
                Error::NoDriver { call, result }
            }
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

/// Where the Vulkan loader looks for drivers and how to install one.
pub(crate) fn driver_hint() -> String {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let looked = match (var("VK_DRIVER_FILES"), var("VK_ICD_FILENAMES")) {
        (Some(f), _) => format!("the loader read the driver manifests in VK_DRIVER_FILES={f}"),
        (None, Some(f)) => format!("the loader read the driver manifests in VK_ICD_FILENAMES={f}"),
        (None, None) => "the loader looked for driver manifests (ICD .json files) in \
             /usr/share/vulkan/icd.d, /etc/vulkan/icd.d and $XDG_DATA_DIRS/vulkan/icd.d"
            .to_string(),
    };
    format!(
        "{looked}; install a driver: your GPU vendor's, or the CPU driver lavapipe \
         (Debian/Ubuntu: `apt-get install libvulkan1 mesa-vulkan-drivers`), or point \
         VK_DRIVER_FILES at a driver's ICD .json file"
    )
}

/// The out-of-memory message: the request and heap figures when known, otherwise the call.
fn oom_message(requested: u64, what: &str, budget: u64, in_use: u64) -> String {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    if requested == 0 && budget == 0 {
        return format!("out of device memory during {what} (the driver gave no sizes)");
    }
    format!(
        "out of device memory allocating {requested} bytes ({:.2} GiB) for {what} (heap budget {budget} bytes ({:.2} GiB), in use {in_use} bytes ({:.2} GiB))",
        gib(requested),
        gib(budget),
        gib(in_use)
    )
}
