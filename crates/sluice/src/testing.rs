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
/// (the Khronos layer Debian ships, 1.3.239, predates VK_KHR_cooperative_matrix and
/// reports the device's feature chain as an error) — so the same test checks the
/// matrix-unit path there.
pub fn coopmat_or_test_device() -> Device {
    if has_coopmat(&Options::default()) {
        Device::new(Options::default()).expect("a Vulkan device")
    } else {
        test_device()
    }
}

/// Whether the device `options` open has cooperative matrices, probed (without the
/// validation layer) once per process for each adapter and `no_coopmat`: NVIDIA's driver
/// refuses the 31st Vulkan instance a process creates, even with every earlier one
/// destroyed (H200, driver 580.159.04), and a probe per test would double the count.
fn has_coopmat(options: &Options) -> bool {
    type Seen = Vec<((Option<String>, bool), bool)>;
    static SEEN: std::sync::Mutex<Seen> = std::sync::Mutex::new(Vec::new());
    let key = (options.adapter.clone(), options.no_coopmat);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, v)) = seen.iter().find(|(k, _)| *k == key) {
        return v;
    }
    let plain = Options {
        validation: crate::options::Validation::Off,
        ..options.clone()
    };
    let v = Device::new(plain).is_ok_and(|d| d.info().coopmat_f16_16x16);
    seen.push((key, v));
    v
}

/// [`coopmat_or_test_device`] with other options: validated unless the device (opened
/// with `options`) has cooperative matrices.
pub fn coopmat_or_test_device_with(options: Options) -> Device {
    let plain = Options {
        validation: crate::options::Validation::Off,
        ..options.clone()
    };
    if has_coopmat(&plain) {
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
