//! Chat templates: the Jinja templates models ship (`tokenizer.chat_template` in GGUF,
//! `chat_template` in `tokenizer_config.json`), rendered with `minijinja` the way
//! transformers renders them: `trim_blocks` and `lstrip_blocks` on, loop controls,
//! `raise_exception`, a Python-style `tojson`, `strftime_now`, and Python string methods
//! (`.strip()`, `.startswith()`, `.split()`, ...) through minijinja-contrib's pycompat.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, ErrorKind};
use serde::Serialize;

use crate::error::{LlmError, Result};

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system`, `user`, `assistant` (or what the template knows).
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message of `role` with `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
    }
}

fn template_err(e: minijinja::Error) -> LlmError {
    let mut msg = e.to_string();
    if let Some(d) = e.detail() {
        if !msg.contains(d) {
            msg = format!("{msg}: {d}");
        }
    }
    LlmError::tokenizer("chat template", msg)
}

impl ChatTemplate {
    /// Compiles `src`; `bos_token` / `eos_token` are what the template sees under those
    /// names (empty when the model has none).
    pub fn new(src: impl Into<String>, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", src.into())
            .map_err(template_err)?;
        Ok(ChatTemplate {
            env,
            bos: bos_token.to_string(),
            eos: eos_token.to_string(),
        })
    }

    /// The conversation as the model's prompt text; `add_generation_prompt` appends the
    /// start of the assistant's turn.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let tmpl = self.env.get_template("chat").map_err(template_err)?;
        tmpl.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos,
            eos_token => &self.eos,
            date_string => format_date("%d %b %Y"),
        })
        .map_err(template_err)
    }
}

fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

fn strftime_now(fmt: String) -> String {
    format_date(&fmt)
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent)`: `", "` and `": "`
/// separators, keys in insertion order, non-ASCII kept.
fn tojson(
    value: &Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let indent = match indent {
        Some(v) => Some(v),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let _ = kwargs.get::<Option<Value>>("ensure_ascii")?;
    let _ = kwargs.get::<Option<Value>>("sort_keys")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(usize::try_from(v)?),
    };
    let mut out = String::new();
    py_json(value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn py_json(
    v: &Value,
    indent: Option<usize>,
    level: usize,
    out: &mut String,
) -> std::result::Result<(), minijinja::Error> {
    let newline = |out: &mut String, level: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * level));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => match v.as_i64() {
            Some(i) if !v.to_string().contains(['.', 'e', 'E']) => out.push_str(&i.to_string()),
            _ => {
                let f = f64::try_from(v.clone())?;
                out.push_str(&format!("{f:?}"));
            }
        },
        ValueKind::String => py_str(v.as_str().unwrap_or_default(), out),
        ValueKind::Map => {
            let keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                match k.as_str() {
                    Some(s) => py_str(s, out),
                    None => py_str(&k.to_string(), out),
                }
                out.push_str(": ");
                py_json(&v.get_item(k)?, indent, level + 1, out)?;
            }
            newline(out, level);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                py_json(x, indent, level + 1, out)?;
            }
            newline(out, level);
            out.push(']');
        }
        _ => py_str(&v.to_string(), out),
    }
    Ok(())
}

fn py_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Today's UTC date and time through a small `strftime` (`%Y %y %m %d %e %j %H %M %S
/// %b %B %a %A %%`).
fn format_date(fmt: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    strftime(fmt, secs)
}

/// `strftime` of `secs` since the Unix epoch (UTC).
fn strftime(fmt: &str, secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy0 = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy0 + 2) / 153;
    let d = doy0 - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(m - 1) as usize] + d + if leap && m > 2 { 1 } else { 0 };
    let wday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday.
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y % 100)),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:2}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('B') => out.push_str(MONTHS[(m - 1) as usize]),
            Some('b') => out.push_str(&MONTHS[(m - 1) as usize][..3]),
            Some('A') => out.push_str(DAYS[wday]),
            Some('a') => out.push_str(&DAYS[wday][..3]),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_known_dates() {
        // 2024-07-26 13:05:09 UTC, a Friday.
        let t = 1_721_999_109;
        assert_eq!(strftime("%Y-%m-%d %H:%M:%S", t), "2024-07-26 13:05:09");
        assert_eq!(
            strftime("%d %b %Y (%A, day %j)", t),
            "26 Jul 2024 (Friday, day 208)"
        );
        assert_eq!(strftime("%d %B %y %%", 0), "01 January 70 %");
        // 2000-02-29 (leap day).
        assert_eq!(strftime("%Y-%m-%d %a", 951_782_400), "2000-02-29 Tue");
    }

    #[test]
    fn tojson_is_python_style() {
        let t = ChatTemplate::new(
            "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ 'é\"' | tojson }}",
            "",
            "",
        )
        .unwrap();
        let env = &t.env;
        let out = env
            .get_template("chat")
            .unwrap()
            .render(minijinja::context! { x => serde_json::json!({"b": [1, 2.5, true, null], "a": "x"}) })
            .unwrap();
        assert_eq!(
            out,
            "{\"a\": \"x\", \"b\": [1, 2.5, true, null]}|{\n  \"a\": \"x\",\n  \"b\": [\n    1,\n    2.5,\n    true,\n    null\n  ]\n}|\"é\\\"\""
        );
    }

    #[test]
    fn raise_exception_is_an_error() {
        let t = ChatTemplate::new(
            "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok",
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            t.render(&[Message::new("user", "hi")], false).unwrap(),
            "ok"
        );
        let e = t
            .render(&[Message::new("assistant", "hi")], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("first must be user"), "{e}");
    }

    #[test]
    fn syntax_errors_are_errors() {
        let e = ChatTemplate::new("{% for m in messages %}", "", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("chat template"), "{e}");
    }
}
