//! sluice-serve: an OpenAI-compatible HTTP server for sluice models.
//!
//! - [`server`]: routes (`/v1/chat/completions`, `/v1/completions` with server-sent
//!   events, `/v1/models`, `/health`, `/metrics`), OpenAI JSON errors, bearer keys, body limit.
//! - [`scheduler`]: the engine thread, the bounded request queue, joining at token
//!   boundaries, per-request timeouts, cancellation when a client disconnects.
//! - [`engine`]: the [`engine::Engine`] trait (add, step all, free) and
//!   [`engine::GpuEngine`] over the single-sequence decoder (one sequence at a time).
//! - [`batch_engine`]: [`batch_engine::BatchEngine`], continuous batching over the paged
//!   KV cache (every running sequence in one batched step per token, prompts in chunks
//!   between them) — what `sluice serve` runs by default.
//! - [`text`]: tokenizer adapter, chat template, incremental detokenizing, stop strings.
//! - [`run`]: a server over a real model with signal handling; [`client`] and
//!   [`loadgen`]: a small HTTP client and the load generator.
#![warn(missing_docs)]

pub mod api;
pub mod batch_engine;
pub mod client;
pub mod engine;
pub mod error;
pub mod loadgen;
pub mod metrics;
pub mod run;
pub mod scheduler;
pub mod server;
pub mod testing;
pub mod text;

pub use error::ServeError;
