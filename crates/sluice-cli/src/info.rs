//! `sluice info`: the chosen device as a table or JSON.

use sluice::{Device, DeviceInfo};

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

/// Prints the device's [`DeviceInfo`] with current heap budgets.
pub fn run(device: &Device, json: bool) -> Result<(), String> {
    let mut info: DeviceInfo = device.info().clone();
    info.heaps = device.heaps();
    if json {
        return outln!(
            "{}",
            serde_json::to_string_pretty(&info).map_err(|e| e.to_string())?
        );
    }
    let rows: Vec<(&str, String)> = vec![
        ("name", info.name.clone()),
        (
            "vendor",
            format!("{} (0x{:04x})", info.vendor, info.vendor_id),
        ),
        ("type", info.device_type.clone()),
        ("driver", format!("{} {}", info.driver, info.driver_info)),
        ("Vulkan", info.api_version.clone()),
        ("unified memory", info.uma.to_string()),
        ("resizable BAR", info.resizable_bar.to_string()),
        ("subgroup size", info.subgroup_size.to_string()),
        (
            "timestamps",
            format!(
                "{} ({} ns/tick, {} bits)",
                info.timestamps, info.timestamp_period_ns, info.timestamp_valid_bits
            ),
        ),
        ("timeline semaphores", info.timeline_semaphores.to_string()),
        ("shader f16", info.shader_f16.to_string()),
        ("VK_EXT_memory_budget", info.memory_budget_ext.to_string()),
        ("memory priorities", info.memory_priority_ext.to_string()),
        (
            "max push constants",
            format!("{} bytes", info.max_push_constant_bytes),
        ),
        (
            "workgroup memory",
            format!("{} bytes", info.max_workgroup_memory_bytes),
        ),
        (
            "workgroup invocations",
            info.max_workgroup_invocations.to_string(),
        ),
        (
            "storage offset alignment",
            format!("{} bytes", info.storage_offset_alignment),
        ),
        ("compute queue family", info.queue_family.to_string()),
        (
            "compute units",
            match info.compute_units {
                0 => "unknown (persistent lowering: 1 workgroup)".to_string(),
                n => format!(
                    "{n} (persistent lowering: up to {} workgroups)",
                    sluice_kernels::persistent_residency(n)
                ),
            },
        ),
        (
            "matrix units",
            if info.coopmat_f16_16x16 {
                "used (16x16x16 f16 -> f32 cooperative matrices)".to_string()
            } else {
                "not used".to_string()
            },
        ),
        (
            "integer dot products",
            match (info.int_dot, info.int_dot_accelerated) {
                (true, true) => "used (4x8-bit packed, accelerated)",
                (true, false) => "used (4x8-bit packed, not reported accelerated)",
                _ => "not used",
            }
            .to_string(),
        ),
    ];
    for (k, v) in rows {
        outln!("{k:<26} {v}")?;
    }
    for shape in &info.coopmat_shapes {
        println!("{:<26} {shape}", "cooperative matrix");
    }
    for (i, h) in info.heaps.iter().enumerate() {
        let kind = match (h.device_local, h.host_visible) {
            (true, true) => "device-local, host-visible",
            (true, false) => "device-local",
            (false, true) => "host",
            (false, false) => "other",
        };
        let budget = match (h.budget, h.usage) {
            (Some(b), Some(u)) => format!(", budget {}, in use {}", gib(b), gib(u)),
            _ => ", no budget info".into(),
        };
        outln!(
            "{:<26} {} ({kind}{budget})",
            format!("heap {i}"),
            gib(h.size)
        )?;
    }
    Ok(())
}
