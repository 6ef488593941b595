//! A small argument parser: `--flag`, `--key value`, positionals; unknown flags are errors.

use std::collections::HashMap;

/// Parsed command-line arguments of one subcommand.
pub struct Args {
    positional: Vec<String>,
    values: HashMap<String, String>,
    flags: Vec<String>,
    used: std::cell::RefCell<Vec<String>>,
}

impl Args {
    /// Splits `raw` into positionals, `--key value` pairs and `--flag`s. `flag_names` lists
    /// the options that take no value.
    pub fn parse(raw: &[String], flag_names: &[&str]) -> Args {
        let mut positional = Vec::new();
        let mut values = HashMap::new();
        let mut flags = Vec::new();
        let mut it = raw.iter().peekable();
        while let Some(a) = it.next() {
            if let Some(name) = a.strip_prefix("--") {
                if let Some((k, v)) = name.split_once('=') {
                    values.insert(k.to_string(), v.to_string());
                } else if flag_names.contains(&name) {
                    flags.push(name.to_string());
                } else if let Some(v) = it.next() {
                    values.insert(name.to_string(), v.clone());
                } else {
                    values.insert(name.to_string(), String::new());
                }
            } else if a.len() == 2 && a.starts_with('-') && a != "-" {
                let k = a[1..].to_string();
                values.insert(k, it.next().cloned().unwrap_or_default());
            } else {
                positional.push(a.clone());
            }
        }
        Args {
            positional,
            values,
            flags,
            used: Default::default(),
        }
    }

    /// Positional argument `i`.
    pub fn positional(&self, i: usize) -> Option<&str> {
        self.positional.get(i).map(|s| s.as_str())
    }

    /// Whether `--name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.used.borrow_mut().push(name.into());
        self.flags.iter().any(|f| f == name)
    }

    /// The value of `--name` (or `-name`).
    pub fn value(&self, name: &str) -> Option<&str> {
        self.used.borrow_mut().push(name.into());
        self.values.get(name).map(|s| s.as_str())
    }

    /// The value of `--name` parsed, or `default`.
    pub fn parsed<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.value(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{name}: cannot parse {v:?}")),
        }
    }

    /// Errors on options that no code asked for (typos).
    pub fn finish(&self) -> Result<(), String> {
        let used = self.used.borrow();
        let unknown: Vec<&String> = self
            .values
            .keys()
            .chain(self.flags.iter())
            .filter(|k| !used.iter().any(|u| u == *k))
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "unknown option(s): {}",
                unknown
                    .iter()
                    .map(|k| format!("--{k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    }
}
