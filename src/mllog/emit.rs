//! Writes MLPerf log lines byte-compatible with `mlperf_logging.mllog`.
//!
//! Durability: every line is written with a single `write_all` of the whole line followed by
//! a flush (and `sync_data` for files when requested), so a crash or Ctrl-C never loses a line
//! already logged and never leaves half a line behind from a completed call.

use super::{pyjson, EventType, PREFIX};
use serde_json::{Map, Value};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::panic::Location;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where log lines go.
pub enum Sink {
    /// Append to a file (created if missing).
    File {
        path: PathBuf,
        file: File,
        sync: bool,
    },
    /// Standard output.
    Stdout,
    /// Collected in memory (tests).
    Memory(Arc<Mutex<Vec<String>>>),
    /// Dropped (non-zero ranks).
    Null,
}

impl Sink {
    /// Open `path` for appending; with `sync`, each line is also `fdatasync`ed.
    pub fn file(path: &Path, sync: bool) -> io::Result<Sink> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)?;
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Sink::File {
            path: path.to_path_buf(),
            file,
            sync,
        })
    }

    fn write_line(&mut self, line: &str) -> io::Result<()> {
        match self {
            Sink::File { file, sync, .. } => {
                let mut buf = String::with_capacity(line.len() + 1);
                buf.push_str(line);
                buf.push('\n');
                file.write_all(buf.as_bytes())?;
                file.flush()?;
                if *sync {
                    file.sync_data()?;
                }
                Ok(())
            }
            Sink::Stdout => {
                // a closed stdout (`| head`) is tagged, and ends the process quietly in main
                let mut out = crate::util::output::stdout();
                writeln!(out, "{line}")?;
                out.flush()
            }
            Sink::Memory(lines) => {
                lines.lock().unwrap().push(line.to_string());
                Ok(())
            }
            Sink::Null => Ok(()),
        }
    }
}

/// An MLPerf logger. `file`/`lineno` metadata name the Rust call site (stable across runs,
/// which the closed-division seed rule relies on).
pub struct Emitter {
    sinks: Vec<Sink>,
    namespace: String,
    /// Milliseconds to use instead of the wall clock (tests); None means now.
    clock: Option<Box<dyn FnMut() -> i64 + Send>>,
}

impl Emitter {
    pub fn new(sinks: Vec<Sink>) -> Self {
        Emitter {
            sinks,
            namespace: String::new(),
            clock: None,
        }
    }

    /// An emitter that writes nothing (ranks other than 0).
    pub fn null() -> Self {
        Emitter::new(vec![Sink::Null])
    }

    /// Replace the wall clock (deterministic tests).
    pub fn with_clock(mut self, clock: impl FnMut() -> i64 + Send + 'static) -> Self {
        self.clock = Some(Box::new(clock));
        self
    }

    /// The path of the first file sink, if any.
    pub fn file_path(&self) -> Option<&Path> {
        self.sinks.iter().find_map(|s| match s {
            Sink::File { path, .. } => Some(path.as_path()),
            _ => None,
        })
    }

    fn now_ms(&mut self) -> i64 {
        match &mut self.clock {
            Some(clock) => clock(),
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
        }
    }

    /// Write one event; `metadata` entries follow `file` and `lineno` as in the Python library.
    pub fn log_at(
        &mut self,
        location: &Location<'_>,
        event_type: EventType,
        key: &str,
        value: Value,
        metadata: Map<String, Value>,
    ) -> io::Result<()> {
        let time_ms = self.now_ms();
        let line = encode_line(
            &self.namespace,
            time_ms,
            event_type,
            key,
            &value,
            location,
            metadata,
        );
        for sink in &mut self.sinks {
            sink.write_line(&line)?;
        }
        Ok(())
    }

    /// One event of `event_type` at the caller of the `#[track_caller]` method that calls this.
    #[track_caller]
    fn log_here(
        &mut self,
        event_type: EventType,
        key: &str,
        value: impl Into<Value>,
        meta: Map<String, Value>,
    ) -> io::Result<()> {
        self.log_at(Location::caller(), event_type, key, value.into(), meta)
    }

    /// POINT_IN_TIME event.
    #[track_caller]
    pub fn event(&mut self, key: &str, value: impl Into<Value>) -> io::Result<()> {
        self.log_here(EventType::PointInTime, key, value, Map::new())
    }

    /// POINT_IN_TIME event with metadata.
    #[track_caller]
    pub fn event_with(
        &mut self,
        key: &str,
        value: impl Into<Value>,
        meta: Map<String, Value>,
    ) -> io::Result<()> {
        self.log_here(EventType::PointInTime, key, value, meta)
    }

    /// INTERVAL_START event.
    #[track_caller]
    pub fn start(
        &mut self,
        key: &str,
        value: impl Into<Value>,
        meta: Map<String, Value>,
    ) -> io::Result<()> {
        self.log_here(EventType::IntervalStart, key, value, meta)
    }

    /// INTERVAL_END event.
    #[track_caller]
    pub fn end(
        &mut self,
        key: &str,
        value: impl Into<Value>,
        meta: Map<String, Value>,
    ) -> io::Result<()> {
        self.log_here(EventType::IntervalEnd, key, value, meta)
    }
}

/// Build `metadata` maps tersely: `meta! {"epoch_num" => 3, "status" => "success"}`.
#[macro_export]
macro_rules! meta {
    () => { ::serde_json::Map::new() };
    ($($k:expr => $v:expr),+ $(,)?) => {{
        let mut m = ::serde_json::Map::new();
        $( m.insert(($k).to_string(), ::serde_json::Value::from($v)); )+
        m
    }};
}

/// One log line as `mlperf_logging.mllog` writes it.
pub fn encode_line(
    namespace: &str,
    time_ms: i64,
    event_type: EventType,
    key: &str,
    value: &Value,
    location: &Location<'_>,
    metadata: Map<String, Value>,
) -> String {
    let mut meta = Map::new();
    meta.insert("file".into(), Value::from(location.file()));
    meta.insert("lineno".into(), Value::from(location.line()));
    for (k, v) in metadata {
        if k != "file" && k != "lineno" {
            meta.insert(k, v);
        }
    }
    let mut line = String::with_capacity(160);
    line.push_str(PREFIX);
    line.push_str("{\"namespace\": ");
    pyjson::write_str(&mut line, namespace);
    line.push_str(", \"time_ms\": ");
    line.push_str(&time_ms.to_string());
    line.push_str(", \"event_type\": \"");
    line.push_str(event_type.as_str());
    line.push_str("\", \"key\": ");
    pyjson::write_str(&mut line, key);
    line.push_str(", \"value\": ");
    pyjson::write_value(&mut line, value);
    line.push_str(", \"metadata\": ");
    pyjson::write_value(&mut line, &Value::Object(meta));
    line.push('}');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_layout_matches_python_mllog() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut e = Emitter::new(vec![Sink::Memory(lines.clone())]).with_clock(|| 1653030513397);
        e.start("cache_clear", Value::Null, Map::new()).unwrap();
        e.event_with("eval_accuracy", 0.7625, crate::meta! {"epoch_num" => 4})
            .unwrap();
        let lines = lines.lock().unwrap();
        let file = file!();
        assert!(lines[0].starts_with(
            ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1653030513397, \"event_type\": \"INTERVAL_START\", \"key\": \"cache_clear\", \"value\": null, \"metadata\": {\"file\": \""
        ));
        assert!(lines[0].contains(&format!("\"file\": \"{file}\", \"lineno\": ")));
        assert!(lines[1].ends_with(", \"epoch_num\": 4}}"), "{}", lines[1]);
        assert!(lines[1].contains("\"value\": 0.7625,"));
    }

    /// `file`/`lineno` name the line that called `event`, `start` or `end` (each passes its
    /// caller's location on), not a line inside the emitter.
    #[test]
    fn lineno_is_the_callers_line() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut e = Emitter::new(vec![Sink::Memory(lines.clone())]).with_clock(|| 1);
        let called = [
            (line!(), e.event("seed", 7)),
            (line!(), e.start("run_start", Value::Null, Map::new())),
            (line!(), e.end("run_stop", Value::Null, Map::new())),
        ];
        let lines = lines.lock().unwrap();
        for ((line, result), text) in called.into_iter().zip(lines.iter()) {
            result.unwrap();
            assert!(text.ends_with(&format!("\"lineno\": {line}}}}}")), "{text}");
        }
    }
}
