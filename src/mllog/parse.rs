//! Reads MLPerf logs as the official checkers do: bytes decoded as Latin-1, text before the
//! last `:::MLLOG ` on a line ignored, lines without it skipped. Unlike the official parser it
//! never crashes: malformed lines become [`ParseIssue`]s naming the line.

use super::{Event, EventType, PREFIX};
use serde_json::{Map, Value};
use std::fmt;
use std::path::{Path, PathBuf};

/// A line that carries `:::MLLOG` but cannot be read as an event.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseIssue {
    /// 1-based line number.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// A parsed log: its events in file order and the lines that failed to parse.
#[derive(Debug, Clone, Default)]
pub struct LogFile {
    pub path: PathBuf,
    pub events: Vec<Event>,
    pub issues: Vec<ParseIssue>,
    /// Lines in the file (including non-MLLOG lines).
    pub total_lines: usize,
    /// True when the data looked binary (NUL bytes): a clear hint for the user.
    pub looks_binary: bool,
}

impl LogFile {
    /// All events with `key`, in file order.
    pub fn with_key<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Event> + 'a {
        self.events.iter().filter(move |e| e.key == key)
    }

    /// The first event with `key`.
    pub fn first(&self, key: &str) -> Option<&Event> {
        self.events.iter().find(|e| e.key == key)
    }

    /// The last event with `key`.
    pub fn last(&self, key: &str) -> Option<&Event> {
        self.events.iter().rev().find(|e| e.key == key)
    }

    /// `path:line` for messages.
    pub fn at(&self, line: usize) -> String {
        format!("{}:{}", self.path.display(), line)
    }
}

/// Read and parse a log file. I/O errors name the path.
pub fn parse_file(path: &Path) -> anyhow::Result<LogFile> {
    let bytes = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("cannot read log {}: {e}", path.display()))?;
    let mut log = parse_bytes(&bytes);
    log.path = path.to_path_buf();
    Ok(log)
}

/// Parse log text (already decoded).
pub fn parse_str(text: &str) -> LogFile {
    parse_lines(text.split('\n').map(|l| l.to_string()), text.contains('\0'))
}

/// Parse raw bytes, decoded as Latin-1 like `mlp_parser.parse_file`.
pub fn parse_bytes(bytes: &[u8]) -> LogFile {
    let looks_binary = bytes.contains(&0);
    let lines = bytes
        .split(|b| *b == b'\n')
        .map(|line| line.iter().map(|&b| b as char).collect::<String>());
    parse_lines(lines, looks_binary)
}

fn parse_lines(lines: impl Iterator<Item = String>, looks_binary: bool) -> LogFile {
    let mut log = LogFile {
        looks_binary,
        ..LogFile::default()
    };
    for (idx, raw) in lines.enumerate() {
        log.total_lines = idx + 1;
        let Some(pos) = raw.rfind(PREFIX) else {
            continue;
        };
        let rest = &raw[pos + PREFIX.len()..];
        let body = rest.trim();
        match parse_event(body, idx + 1) {
            Ok(event) => log.events.push(event),
            Err(message) => log.issues.push(ParseIssue {
                line: idx + 1,
                message,
            }),
        }
    }
    log
}

fn parse_event(body: &str, line: usize) -> Result<Event, String> {
    let value: Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(first) => {
            // Python's json accepts NaN and Infinity; read them as null rather than fail.
            let patched = replace_nonfinite(body);
            serde_json::from_str(&patched).map_err(|_| format!("broken JSON: {first}"))?
        }
    };
    let Value::Object(mut obj) = value else {
        return Err("the text after :::MLLOG is not a JSON object".into());
    };
    let mut take = |name: &str| {
        obj.remove(name)
            .ok_or_else(|| format!("missing field '{name}'"))
    };
    let namespace = take("namespace").ok();
    let time_ms = take("time_ms")?;
    let event_type = take("event_type")?;
    let key = take("key")?;
    let value = take("value")?;
    let metadata = take("metadata")?;
    let time_ms = match &time_ms {
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| format!("time_ms is not a number: {s:?}"))?,
        other => return Err(format!("time_ms is not a number: {other}")),
    };
    let event_type = event_type
        .as_str()
        .and_then(EventType::parse)
        .ok_or_else(|| format!("unknown event_type {event_type}"))?;
    let key = match key {
        Value::String(s) => s,
        other => return Err(format!("key is not a string: {other}")),
    };
    let metadata = match metadata {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        other => return Err(format!("metadata is not an object: {other}")),
    };
    let namespace = match namespace {
        Some(Value::String(s)) => s,
        _ => String::new(),
    };
    Ok(Event {
        namespace,
        time_ms,
        event_type,
        key,
        value,
        metadata,
        line,
    })
}

/// Replace bare NaN/Infinity/-Infinity tokens (outside strings) with null.
fn replace_nonfinite(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_str = false;
    let mut escaped = false;
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '"' {
            in_str = true;
        }
        let mut replaced = false;
        for tok in ["-Infinity", "Infinity", "NaN"] {
            if rest.starts_with(tok) {
                out.push_str("null");
                rest = &rest[tok.len()..];
                replaced = true;
                break;
            }
        }
        if !replaced {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_prefix_text_and_reports_broken_lines() {
        let text = "noise\n[1,0]<stdout>: :::MLLOG {\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"key\": \"seed\", \"value\": 7, \"metadata\": {\"file\": \"a.py\", \"lineno\": 3}}\n:::MLLOG {\"namespace\": \n";
        let log = parse_str(text);
        assert_eq!(log.events.len(), 1);
        assert_eq!(log.events[0].key, "seed");
        assert_eq!(log.events[0].line, 2);
        assert_eq!(log.issues.len(), 1);
        assert_eq!(log.issues[0].line, 3);
    }

    #[test]
    fn missing_value_is_an_issue_not_a_panic() {
        let log = parse_str(":::MLLOG {\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"key\": \"seed\", \"metadata\": {}}");
        assert!(log.events.is_empty());
        assert!(log.issues[0].message.contains("value"));
    }

    #[test]
    fn nan_values_parse() {
        let log = parse_str(":::MLLOG {\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"key\": \"eval_accuracy\", \"value\": NaN, \"metadata\": {\"note\": \"NaN\"}}");
        assert_eq!(log.events.len(), 1);
        assert_eq!(log.events[0].value, Value::Null);
        assert_eq!(log.events[0].meta("note").unwrap(), "NaN");
    }
}
