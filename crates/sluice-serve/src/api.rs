//! OpenAI request bodies and their checks (before any GPU work).

use serde::Deserialize;
use serde_json::Value;
use sluice_llm::sampler::Sampling;

use crate::error::{Result, ServeError};
use crate::text::ChatMessage;

/// `prompt` of `/v1/completions`: a string, a one-element array of strings, or token ids.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// Text.
    Text(String),
    /// Token ids.
    Ids(Vec<u32>),
    /// A batch of texts (only one is supported).
    Texts(Vec<String>),
}

/// `stop`: a string or up to 4 strings.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` before `[DONE]`.
    #[serde(default)]
    pub include_usage: bool,
}

/// Fields shared by both endpoints.
#[derive(Clone, Debug, Deserialize)]
pub struct Common {
    /// Model name (any value is accepted; the response names the served model).
    #[serde(default)]
    pub model: Option<String>,
    /// Tokens to generate at most.
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// Newer name of `max_tokens` (chat).
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    /// 0..=2; 0 is greedy. Default 1 as in OpenAI.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// (0, 1].
    #[serde(default)]
    pub top_p: Option<f32>,
    /// 0 or -1: off.
    #[serde(default)]
    pub top_k: Option<i64>,
    /// Seed of the draws.
    #[serde(default)]
    pub seed: Option<i64>,
    /// Stop strings.
    #[serde(default)]
    pub stop: Option<Stop>,
    /// Server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Number of choices (only 1).
    #[serde(default)]
    pub n: Option<i64>,
}

/// `POST /v1/chat/completions`.
#[derive(Clone, Debug, Deserialize)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// The other fields.
    #[serde(flatten)]
    pub common: Common,
}

/// `POST /v1/completions`.
#[derive(Clone, Debug, Deserialize)]
pub struct CompletionRequest {
    /// The prompt.
    pub prompt: Prompt,
    /// The other fields.
    #[serde(flatten)]
    pub common: Common,
}

/// Checked generation settings of a request.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Requested `max_tokens` (`None`: until the context is full or a server default).
    pub max_tokens: Option<usize>,
    /// Sampling.
    pub sampling: Sampling,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Stream as server-sent events.
    pub stream: bool,
    /// Last chunk carries `usage`.
    pub include_usage: bool,
}

/// Parses a JSON body into `T` with OpenAI-style 400 errors.
pub fn parse_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ServeError::BadRequest {
        message: format!("invalid JSON body: {e}"),
        code: "invalid_json",
    })?;
    if !value.is_object() {
        return Err(ServeError::bad_request("the body must be a JSON object"));
    }
    serde_json::from_value(value).map_err(|e| ServeError::BadRequest {
        message: format!("invalid request: {e}"),
        code: "invalid_request",
    })
}

impl Common {
    /// Checks ranges and returns the settings.
    pub fn settings(&self) -> Result<Settings> {
        let max = self.max_completion_tokens.or(self.max_tokens);
        let max_tokens = match max {
            None => None,
            Some(m) if m < 1 => {
                return Err(ServeError::BadRequest {
                    message: format!("max_tokens is {m}; it must be at least 1"),
                    code: "invalid_max_tokens",
                })
            }
            Some(m) => Some(usize::try_from(m).unwrap_or(usize::MAX)),
        };
        if let Some(n) = self.n {
            if n != 1 {
                return Err(ServeError::bad_request(format!(
                    "n is {n}; only n = 1 is supported"
                )));
            }
        }
        let temperature = self.temperature.unwrap_or(1.0);
        if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
            return Err(ServeError::bad_request(format!(
                "temperature {temperature} must be in [0, 2]"
            )));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ServeError::bad_request(format!(
                "top_p {top_p} must be in (0, 1]"
            )));
        }
        let top_k = match self.top_k.unwrap_or(0) {
            -1 | 0 => 0,
            k if k < 0 => {
                return Err(ServeError::bad_request(format!(
                    "top_k {k} must be >= 0 (0 or -1: off)"
                )))
            }
            k => usize::try_from(k).unwrap_or(usize::MAX),
        };
        let seed = match self.seed {
            Some(s) => s as u64,
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
        };
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > 4 {
            return Err(ServeError::bad_request(format!(
                "stop has {} strings; at most 4 are allowed",
                stop.len()
            )));
        }
        if stop.iter().any(|s| s.len() > 256) {
            return Err(ServeError::bad_request(
                "stop strings are limited to 256 bytes",
            ));
        }
        Ok(Settings {
            max_tokens,
            sampling: Sampling {
                temperature,
                top_k,
                top_p,
                seed,
            },
            stop,
            stream: self.stream.unwrap_or(false),
            include_usage: self
                .stream_options
                .as_ref()
                .is_some_and(|o| o.include_usage),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_fields() {
        let ok: ChatRequest = parse_body(
            br#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stop":"x"}"#,
        )
        .unwrap();
        let s = ok.common.settings().unwrap();
        assert_eq!((s.max_tokens, s.stop.len(), s.stream), (Some(3), 1, false));
        let e = parse_body::<ChatRequest>(br#"{"model":"m"}"#).unwrap_err();
        assert!(e.to_string().contains("messages"), "{e}");
        assert_eq!(e.status(), 400);
        let e = parse_body::<ChatRequest>(b"{nope").unwrap_err();
        assert_eq!((e.status(), e.code()), (400, "invalid_json"));
        let neg: CompletionRequest = parse_body(br#"{"prompt":"a","max_tokens":-2}"#).unwrap();
        assert_eq!(
            neg.common.settings().unwrap_err().code(),
            "invalid_max_tokens"
        );
        let ids: CompletionRequest = parse_body(br#"{"prompt":[1,2,3],"temperature":0}"#).unwrap();
        assert!(matches!(ids.prompt, Prompt::Ids(ref v) if v == &[1, 2, 3]));
        assert!(ids.common.settings().unwrap().sampling.is_greedy());
        let hot: CompletionRequest = parse_body(br#"{"prompt":"a","temperature":3}"#).unwrap();
        assert_eq!(hot.common.settings().unwrap_err().status(), 400);
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;
        use serde_json::json;

        /// A value as a client might send for any field: right or wrong type, in or out
        /// of range, huge, nested.
        fn value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                (-3i64..5).prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                (-1e40f64..1e40).prop_map(Value::from),
                (-0.5f64..2.5).prop_map(Value::from),
                prop::sample::select(vec![0.0, 1e-40, 0.5, 1.0, 1.01, 2.0, 2.01, 3.0, -1.0])
                    .prop_map(Value::from),
                ".{0,300}".prop_map(Value::from),
            ];
            leaf.prop_recursive(3, 24, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                    prop::collection::btree_map(
                        prop::sample::select(vec!["role", "content", "x"]),
                        inner,
                        0..3
                    )
                    .prop_map(|m| json!(m)),
                ]
            })
        }

        const FIELDS: [&str; 14] = [
            "messages",
            "prompt",
            "model",
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "top_p",
            "top_k",
            "seed",
            "stop",
            "stream",
            "stream_options",
            "n",
            "extra",
        ];

        fn body() -> impl Strategy<Value = Vec<u8>> {
            // A valid request for either endpoint with some fields replaced.
            let edited = prop::collection::btree_map(
                prop::sample::select(FIELDS[2..].to_vec()),
                value(),
                0..4,
            )
            .prop_map(|m| {
                let mut v = json!({"messages": [{"role": "user", "content": "hi"}], "prompt": "a"});
                for (k, x) in m {
                    v[k] = x;
                }
                serde_json::to_vec(&v).unwrap()
            });
            prop_oneof![
                3 => edited,
                1 => prop::collection::btree_map(
                    prop::sample::select(FIELDS.to_vec()),
                    value(),
                    0..8
                )
                .prop_map(|m| serde_json::to_vec(&m).unwrap()),
                1 => value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
                1 => prop::collection::vec(any::<u8>(), 0..64),
            ]
        }

        /// Settings the server accepts are in range.
        fn in_range(s: &Settings) -> bool {
            s.max_tokens.is_none_or(|m| m >= 1)
                && (0.0..=2.0).contains(&s.sampling.temperature)
                && s.sampling.top_p > 0.0
                && s.sampling.top_p <= 1.0
                && s.stop.len() <= 4
                && s.stop.iter().all(|x| x.len() <= 256)
        }

        /// Any body is a request with checked settings or a 400 naming why; many reach
        /// the range checks.
        #[test]
        fn any_body_is_checked_settings_or_a_400() {
            let accepted = std::sync::atomic::AtomicUsize::new(0);
            // A fixed seed: the same bodies every run (reproducible, and the count below
            // is not left to chance).
            let mut runner = proptest::test_runner::TestRunner::new_with_rng(
                ProptestConfig {
                    cases: 4096,
                    ..ProptestConfig::default()
                },
                proptest::test_runner::TestRng::deterministic_rng(
                    proptest::test_runner::RngAlgorithm::ChaCha,
                ),
            );
            runner
                .run(&body(), |b| {
                    let chat = parse_body::<ChatRequest>(&b).and_then(|r| r.common.settings());
                    let done =
                        parse_body::<CompletionRequest>(&b).and_then(|r| r.common.settings());
                    for r in [chat, done] {
                        match r {
                            Ok(s) => {
                                accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                prop_assert!(in_range(&s), "{s:?}");
                            }
                            Err(e) => {
                                prop_assert_eq!(e.status(), 400);
                                prop_assert!(!e.to_string().is_empty());
                            }
                        }
                    }
                    Ok(())
                })
                .unwrap();
            let accepted = accepted.into_inner();
            assert!(
                accepted >= 512,
                "only {accepted} bodies reached the range checks"
            );
        }
    }
}
