//! `sluice info`: the chosen device as a table or JSON; with `--kernels`, the driver's
//! compile statistics of the kernels.

use clap::Args;
use sluice::{Device, DeviceInfo, KernelStatistic};

/// `sluice info` options.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
    /// Instead of the device, the driver's compile statistics (registers, instructions,
    /// spills: what it reports through VK_KHR_pipeline_executable_properties) of every
    /// kernel whose name contains FILTER (all without one). Compiles each kernel.
    #[arg(long, value_name = "FILTER", num_args = 0..=1, default_missing_value = "")]
    pub kernels: Option<String>,
}

/// One kernel's row of `sluice info --kernels`.
#[derive(serde::Serialize)]
struct KernelRow {
    kernel: &'static str,
    workgroup_size: [u32; 3],
    workgroup_memory_bytes: u32,
    statistics: Vec<KernelStatistic>,
    /// Why there are no statistics (the kernel needs a feature this device lacks, ...).
    error: Option<String>,
}

/// Prints the compile statistics of the kernels whose names contain `filter`.
fn kernels(device: &Device, filter: &str, json: bool) -> Result<(), String> {
    if !device.info().kernel_statistics {
        return Err(format!(
            "{} does not report kernel statistics (no VK_KHR_pipeline_executable_properties)",
            device.info().name
        ));
    }
    let mut rows = Vec::new();
    let chosen: Vec<_> = sluice_kernels::ALL
        .iter()
        .filter(|k| k.name.contains(filter))
        .collect();
    // Compiling every kernel takes tens of seconds on some drivers: a live count on a
    // terminal.
    let live = std::io::IsTerminal::is_terminal(&std::io::stderr());
    for (i, k) in chosen.iter().enumerate() {
        if live {
            eprint!("\rcompiling kernel {}/{}", i + 1, chosen.len());
        }
        let (statistics, error) = match device.kernel_statistics(k) {
            Ok(s) => (s, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        rows.push(KernelRow {
            kernel: k.name,
            workgroup_size: k.workgroup_size,
            workgroup_memory_bytes: k.workgroup_memory_bytes,
            statistics,
            error,
        });
    }
    if live && !rows.is_empty() {
        eprintln!();
    }
    if rows.is_empty() {
        return Err(format!("no kernel name contains {filter:?}"));
    }
    if json {
        return outln!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?
        );
    }
    for r in &rows {
        let [x, y, z] = r.workgroup_size;
        let mut line = format!(
            "{:<34} wg {x}x{y}x{z}, shared {} B",
            r.kernel, r.workgroup_memory_bytes
        );
        match &r.error {
            Some(e) => line.push_str(&format!(": {e}")),
            None => {
                for s in &r.statistics {
                    line.push_str(&format!(", {} {}", s.name, s.value));
                }
            }
        }
        outln!("{line}")?;
    }
    Ok(())
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

/// Prints the device's [`DeviceInfo`] with current heap budgets, or with `--kernels` the
/// kernels' compile statistics.
pub fn run(device: &Device, args: &InfoArgs) -> Result<(), String> {
    let json = args.json;
    if let Some(filter) = &args.kernels {
        return kernels(device, filter, json);
    }
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
        (
            "largest storage binding",
            format!("{} bytes", info.max_storage_range),
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
            "int8 matrix units",
            if info.coopmat_s8_16x16x32 {
                "available (16x16x32 s8 -> s32; no model path uses them yet)".to_string()
            } else {
                "not available".to_string()
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
