//! The validation-layer hookup: a debug-utils messenger that collects every warning and
//! error the Khronos layer (with synchronization validation) reports, so tests can fail on
//! any message.

use std::ffi::{c_void, CStr};
use std::sync::Mutex;

use ash::vk;

/// One message from the validation layer.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ValidationMessage {
    /// "ERROR" or "WARNING".
    pub severity: &'static str,
    /// The message id name, e.g. `SYNC-HAZARD-READ-AFTER-WRITE`.
    pub id: String,
    /// The full text.
    pub text: String,
}

/// Messages collected since the device was made (or last taken).
#[derive(Default)]
pub(crate) struct ValidationLog {
    pub messages: Mutex<Vec<ValidationMessage>>,
}

pub(crate) const LAYER_NAME: &CStr = c"VK_LAYER_KHRONOS_validation";

/// The messenger create-info; `log` must outlive the messenger.
pub(crate) fn messenger_info(log: &ValidationLog) -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
    vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(on_message))
        .user_data(log as *const ValidationLog as *mut c_void)
}

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes valid callback data for the duration of the call, and `user`
    // is the `ValidationLog` that outlives the messenger (see `messenger_info`).
    let (log, data) = unsafe { (&*(user as *const ValidationLog), &*data) };
    // SAFETY: the strings are NUL-terminated and valid for the call when non-null.
    let id = unsafe { data.message_id_name_as_c_str() }
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    // SAFETY: as above.
    let text = unsafe { data.message_as_c_str() }
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let severity = if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        "ERROR"
    } else {
        "WARNING"
    };
    if let Ok(mut m) = log.messages.lock() {
        m.push(ValidationMessage { severity, id, text });
    }
    vk::FALSE
}
