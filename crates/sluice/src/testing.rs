//! Test support shared by every crate's GPU tests: a device with synchronization
//! validation on, and a guard that fails the test on any validation message.
//!
//! A test run that finds no Vulkan device fails; it never skips. Validated devices should
//! not be created or dropped while another thread uses a validated device of its own: the
//! layer Debian ships (1.3.239) updates its per-device map without a lock and can crash, so
//! the workspace runs each binary's tests one at a time (`.cargo/config.toml`).

use crate::device::Device;
use crate::options::Options;

/// A device for tests: the default adapter with `Validation::Synchronization`.
/// Panics (failing the test) when no device or no validation layer exists.
pub fn test_device() -> Device {
    test_device_with(Options::for_tests())
}

/// The device for tests whose subject has a matrix-unit path: [`test_device`] (validated)
/// unless the device has cooperative matrices, then one without the validation layer
/// (the Khronos layer available here, 1.3.239, predates VK_KHR_cooperative_matrix, and
/// the GPU machine has none) — so the same test checks the matrix-unit path there.
pub fn coopmat_or_test_device() -> Device {
    let coopmat = Device::new(Options::default()).is_ok_and(|d| d.info().coopmat_f16_16x16);
    if coopmat {
        Device::new(Options::default()).expect("a Vulkan device")
    } else {
        test_device()
    }
}

/// [`coopmat_or_test_device`] with other options: validated unless the device (opened
/// with `options`) has cooperative matrices.
pub fn coopmat_or_test_device_with(options: Options) -> Device {
    let plain = Options {
        validation: crate::options::Validation::Off,
        ..options.clone()
    };
    let coopmat = Device::new(plain.clone()).is_ok_and(|d| d.info().coopmat_f16_16x16);
    if coopmat {
        Device::new(plain).expect("a Vulkan device")
    } else {
        test_device_with(options)
    }
}

/// Like [`test_device`] with other options (validation is forced on).
pub fn test_device_with(options: Options) -> Device {
    let options = Options {
        validation: crate::options::Validation::Synchronization,
        ..options
    };
    match Device::new(options) {
        Ok(d) => d,
        Err(e) => panic!("GPU tests need a Vulkan device and VK_LAYER_KHRONOS_validation: {e}"),
    }
}

/// Fails the test if the device collected any validation message. Call after the work
/// under test completed.
pub fn assert_no_validation_messages(device: &Device) {
    let messages = device.validation_messages();
    assert!(
        messages.is_empty(),
        "{} validation message(s):\n{}",
        messages.len(),
        messages
            .iter()
            .map(|m| format!("[{}] {}: {}", m.severity, m.id, m.text))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Checks for validation messages when dropped (after the device drained its queue
/// through `synchronize`), so a test cannot forget to.
pub struct ValidationGuard {
    device: Device,
}

impl ValidationGuard {
    /// Guards `device`.
    pub fn new(device: &Device) -> ValidationGuard {
        ValidationGuard {
            device: device.clone(),
        }
    }
}

impl Drop for ValidationGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        self.device.synchronize().expect("synchronize");
        assert_no_validation_messages(&self.device);
    }
}
