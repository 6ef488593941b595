//! sluice-llm: Qwen3, Qwen2 and Llama decode on the sluice runtime.
//!
//! CPU side: model config ([`config`]), safetensors reading ([`safetensors`]), tensor
//! naming and synthetic weights ([`weights`]), an f32 reference forward ([`reference`]),
//! sampling ([`sampler`]), tokenizers ([`tokenizer`]) and chat templates ([`chat`]). GPU side: the model on the
//! device ([`gpu`]), the decode loop in direct or replay mode ([`decode`]), generation and
//! benchmarks ([`run`]) and opening models by name ([`load`]).

#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod batch;
pub mod bench;
pub mod chat;
pub mod config;
pub mod decode;
pub mod error;
pub mod gguf;
pub mod gguf_model;
pub mod gpu;
pub mod layer;
pub mod load;
pub mod quant_mix;
pub mod reference;
pub mod run;
pub mod safetensors;
pub mod sampler;
pub mod tokenizer;
pub mod weights;

pub use error::LlmError;
