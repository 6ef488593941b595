//! Helpers shared by the model tests (each test crate uses some of them).
#![allow(dead_code)]

use sluice_llm::config::ModelConfig;
use sluice_llm::load::target_dtype;
use sluice_llm::quant_mix::QuantRequest;
use sluice_llm::reference::CpuModel;
use sluice_llm::weights::{expected_tensors, synthetic_tensor_f32, DEFAULT_SEED};

/// The CPU reference of synthetic model `cfg` with every matrix quantized as `request`
/// places it on the GPU, then dequantized: the weights the GPU decodes.
pub fn quantized_reference(cfg: &ModelConfig, request: &QuantRequest) -> CpuModel {
    use sluice_kernels::WeightDtype;
    use sluice_llm::safetensors::DType;
    let mut weights = std::collections::HashMap::new();
    for spec in expected_tensors(cfg) {
        let mut v = synthetic_tensor_f32(cfg, DEFAULT_SEED, &spec, DType::F32);
        if let [rows, cols] = spec.shape[..] {
            let q = target_dtype(Some(request), cfg, &spec.name, rows, cols, WeightDtype::F32);
            let bytes = sluice_kernels::quantize(q, rows, cols, &v);
            v = sluice_kernels::dequantize(q, rows, cols, &bytes);
        }
        weights.insert(spec.name, v);
    }
    CpuModel::new(cfg, weights).unwrap()
}

/// Checks the progress calls of one model load: the total (the weight bytes planned before
/// upload, also what the memory check counts) is what the matrices then upload plus the
/// 1-D tensors as f32, so the bar reaches 100% once, at the end: every call before the last
/// is below the total, the last matrix's call leaves exactly the vectors' bytes, and the
/// last call is (total, total).
pub fn assert_progress_is_exact(what: &str, cfg: &ModelConfig, calls: &[(u64, u64)]) {
    let vectors: u64 = sluice_llm::layer::tensors(cfg)
        .iter()
        .filter(|(_, shape)| shape.len() == 1)
        .map(|(_, shape)| 4 * shape[0] as u64)
        .sum();
    let Some((&(end, total), before)) = calls.split_last() else {
        panic!("{what}: no progress calls");
    };
    assert_eq!(end, total, "{what}: the last call");
    assert!(
        before.iter().all(|&(d, t)| t == total && d < total),
        "{what}: 100% before the end ({} calls, total {total})",
        calls.len()
    );
    let last = before.last().map_or(0, |c| c.0);
    assert_eq!(
        last + vectors,
        total,
        "{what}: matrices {last} + vectors {vectors}"
    );
}
