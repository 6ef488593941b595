//! The one typed configuration of the runtime, with documented defaults.

use std::time::Duration;

/// Where barriers go between dispatches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum BarrierMode {
    /// One global barrier only where the hazard tracker finds RAW, WAR or WAW. Default.
    #[default]
    Auto,
    /// A barrier between every two dispatches, for A/B checks and debugging.
    Serial,
}

/// Khronos validation layer settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum Validation {
    /// No layer. Default.
    #[default]
    Off,
    /// `VK_LAYER_KHRONOS_validation` with its default checks.
    Core,
    /// The layer plus synchronization validation (hazard detection).
    Synchronization,
}

/// Runtime configuration. `Options::default()` is right for production use.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Options {
    /// Pick the first device whose name contains this (case-insensitive). Default `None`:
    /// discrete GPU, then integrated, then virtual, then CPU.
    pub adapter: Option<String>,
    /// Barrier placement. Default [`BarrierMode::Auto`].
    pub barriers: BarrierMode,
    /// Validation layer. Default [`Validation::Off`]; tests use `Synchronization`.
    pub validation: Validation,
    /// Times `wait` polls the timeline with a CPU pause before yielding. Default 64.
    pub wait_spin_pauses: u32,
    /// Times `wait` polls the timeline with `thread::yield_now` before parking in
    /// `vkWaitSemaphores`. Default 16.
    pub wait_spin_yields: u32,
    /// Never use a host mapping for buffers the runtime places itself: every upload and
    /// download goes through a staging copy in stream order. Default false (zero-copy
    /// where memory is host-visible); tests turn it on to cover the staging path.
    pub force_staging: bool,
    /// Longest a `wait` blocks before returning [`crate::Error::Timeout`]. Default 60 s
    /// (a decode step takes milliseconds; a minute means a hang).
    pub wait_timeout: Duration,
    /// Do not use cooperative matrices (matrix units) even where the device has them: the
    /// portable kernels run instead. Default false.
    pub no_coopmat: bool,
    /// Do not enable integer dot products (shaderIntegerDotProduct) even where the device
    /// has them: the block-format matvecs run on their f32 decoders. Default false.
    pub no_int_dot: bool,
    /// Do not build the weights' matrix-unit operands in registers (the batched matvecs of
    /// decision 0014) even where the device's layout self-test passes: the kernels that
    /// stage them through shared memory run instead. Default false.
    pub no_register_operands: bool,
    /// Do not run a prefill chunk's f16 matrices as tiled matmuls (both operands staged
    /// through shared memory, 128 x 128 tiles) even where the device has matrix units: the
    /// register-built matvecs run instead. Default false.
    pub no_tiled_matmul: bool,
    /// Ask the driver for every pipeline's compile statistics (registers, instructions,
    /// spills: VK_KHR_pipeline_executable_properties) so that
    /// [`crate::Device::kernel_statistics`] can report them. Default false: capturing
    /// them may slow pipeline creation, and the runtime does not need them.
    pub kernel_statistics: bool,
    /// Bind at most this many bytes to one storage binding, below the device's own
    /// `maxStorageBufferRange` (which [`crate::DeviceInfo::max_storage_range`] then
    /// reports): runs what a device with a smaller limit runs (lavapipe's is 128 MiB), e.g. a model whose tables are split over several bindings.
    /// Default `None`: the device's limit.
    pub max_binding: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            adapter: None,
            barriers: BarrierMode::Auto,
            validation: Validation::Off,
            wait_spin_pauses: 64,
            wait_spin_yields: 16,
            force_staging: false,
            wait_timeout: Duration::from_secs(60),
            no_coopmat: false,
            no_int_dot: false,
            no_register_operands: false,
            no_tiled_matmul: false,
            kernel_statistics: false,
            max_binding: None,
        }
    }
}

impl Options {
    /// Options for tests: synchronization validation on, everything else default.
    pub fn for_tests() -> Self {
        Options {
            validation: Validation::Synchronization,
            ..Options::default()
        }
    }
}
