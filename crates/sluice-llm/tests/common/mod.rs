//! Helpers shared by the model tests.

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
